"""Live mode: run the speculative loop round by round and hand each round's events to the UI.

The app calls `LiveRun.compile()` and then `LiveRun.rounds()` from a Textual *thread worker*,
so JAX never runs on the UI thread; everything else here is cheap Python the UI thread may call
(settings checks, the run_start event). Compiling comes first and on its own (nanospec/aot.py),
so the UI can say "compiling…" while it happens and round 1's times are a round's, not XLA's.
The loop itself is nanospec's step-wise driver, `rounds()` of the loop `decode.make_loop`
builds (for method "ar" a Decoder: one round per token, no drafts), and each round becomes
events with the loop's own `events` — exactly what `nanospec generate --trace` records, so a
live run and its saved trace replay identically.

Static vs traced (see nanospec/speculative.py): changing γ, the method or the prompt's length
bucket compiles new programs; temperature, top-k, top-p, the seed and the prompt's tokens are
traced values, so changing them reruns the already-compiled programs.

Replay never imports this file, so playing a recorded trace loads no JAX at all.
What this file deliberately leaves out: batches (the demo follows one sequence).
"""

from collections.abc import Iterator
from dataclasses import replace

import jax

from nanospec.cache import capacity
from nanospec.decode import Bundle, make_loop
from nanospec.generate import bucket, pad_prompts
from nanospec.methods import DRAFTING
from nanospec.sampling import SamplingParams
from nanospec.trace import compile_event, run_start
from viz.settings import Settings

SPECULATIVE = DRAFTING  # every drafting method (the demo's m key cycles through them)


class LiveRun:
    """One generation with fixed settings: check them, describe them, then run it round by round."""

    def __init__(self, bundle: Bundle, settings: Settings):
        settings.check()
        self.bundle, self.settings = bundle, settings
        self.cfg = bundle.models["target"][0]
        self.prompt_ids = bundle.tok.encode_prompt(settings.prompt)
        loop, self.dparams = make_loop(bundle, settings.method, settings.gamma)
        self.autoregressive = loop.drafter is None
        loop.check([len(self.prompt_ids)], settings.max_new)
        self._block = loop.block  # the cache slack a round writes: γ+1, 2γ+1 for SSD, 1 for AR
        self.loop = replace(loop, capacity=self._capacity)
        self.drafter = loop.drafter
        self.programs = None  # compile() fills it in

    @property
    def compile_key(self) -> tuple:
        """What decides whether this run reuses compiled programs (the static arguments)."""
        s = self.settings
        return (
            s.method,
            0 if self.autoregressive else s.gamma,
            bucket(len(self.prompt_ids), self.cfg.n_ctx),
            self._capacity,
        )

    @property
    def _capacity(self) -> int:
        s = self.settings
        return capacity(
            self.cfg.n_ctx, bucket(len(self.prompt_ids), self.cfg.n_ctx), s.max_new, self._block
        )

    def start_event(self) -> dict:
        s = self.settings
        event = run_start(
            self.bundle.tok,
            s.prompt,
            self.prompt_ids,
            s.method,
            0 if self.autoregressive else s.gamma,
            s.temperature,
            s.top_k,
            s.top_p,
            s.seed,
            target=self.cfg.name,
            drafter="none" if self.autoregressive else self.drafter.name,
        )
        event.update(self.loop.settings())  # as `nanospec generate --trace` records it (SSD's
        return event  # cache panel says which backup drafts after a miss)

    def _inputs(self):
        s = self.settings
        tokens, lengths = pad_prompts([self.prompt_ids], self.cfg.n_ctx)
        return (
            tokens,
            lengths,
            jax.random.key(s.seed),
            SamplingParams.make(s.temperature, s.top_k, s.top_p),
        )

    def compile(self) -> dict:
        """Compile this run's programs (or find them compiled: 0 s); returns the `compile`
        event. Runs JAX: call from a worker thread, before `rounds`."""
        tokens, lengths, key, sp = self._inputs()
        self.programs, seconds = self.loop.compile(
            self.bundle.models["target"][2], self.dparams, tokens, lengths, key, sp
        )
        return compile_event(seconds)

    def rounds(self) -> Iterator[list[dict]]:
        """Each round's events as soon as the round is done. Runs JAX: call from a worker thread
        (it compiles first if `compile` was not called)."""
        if self.programs is None:
            self.compile()
        tokens, lengths, key, sp = self._inputs()
        steps = self.loop.rounds(
            self.bundle.models["target"][2],
            self.dparams,
            tokens,
            lengths,
            key,
            sp,
            self.settings.max_new,
            self.programs,
        )
        for r, rnd in enumerate(steps):
            yield self.loop.events(rnd.trace, self.bundle.tok, r, rnd.seconds)
