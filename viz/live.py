"""Live mode: run the speculative loop round by round and hand each round's events to the UI.

The app calls `LiveRun.rounds()` from a Textual *thread worker*, so JAX never runs on the UI
thread; everything else here is cheap Python the UI thread may call (settings checks, the
run_start event). The loop itself is nanospec's step-wise driver, `speculative_rounds`, and each
round becomes events with `events_from_step` — exactly what `nanospec generate --trace` records,
so a live run and its saved trace replay identically.

Static vs traced (see nanospec/speculative.py): changing γ, the method or the prompt's length
bucket compiles new programs; temperature, top-k, top-p, the seed and the prompt's tokens are
traced values, so changing them reruns the already-compiled programs.

Replay never imports this file, so playing a recorded trace loads no JAX at all.
What this file deliberately leaves out: batches (the demo follows one sequence).
"""

from collections.abc import Iterator

import jax

from nanospec.decode import METHODS, Bundle, check_gamma
from nanospec.errors import UserError
from nanospec.generate import bucket, pad_prompts
from nanospec.sampling import SamplingParams
from nanospec.speculative import check_room, speculative_rounds
from nanospec.trace import events_from_step, run_start
from viz.settings import Settings

SPECULATIVE = tuple(m for m in METHODS if m != "ar")  # every drafting method the loop supports


class LiveRun:
    """One generation with fixed settings: check them, describe them, then run it round by round."""

    def __init__(self, bundle: Bundle, settings: Settings):
        settings.check()
        if settings.method not in SPECULATIVE:
            raise UserError(f"Unknown method {settings.method!r}; choose one of "
                            f"{', '.join(SPECULATIVE)}.")
        self.bundle, self.settings = bundle, settings
        self.cfg = bundle.models["target"][0]
        self.prompt_ids = bundle.tok.encode_prompt(settings.prompt)
        check_room(self.cfg, [len(self.prompt_ids)], settings.max_new, settings.gamma)
        self.drafter, self.dparams = bundle.drafter(settings.method)
        check_gamma(self.drafter, settings.gamma)

    @property
    def compile_key(self) -> tuple:
        """What decides whether this run reuses compiled programs (the static arguments)."""
        s = self.settings
        return (s.method, s.gamma, bucket(len(self.prompt_ids), self.cfg.n_ctx))

    def start_event(self) -> dict:
        s = self.settings
        return run_start(self.bundle.tok, s.prompt, self.prompt_ids, s.method, s.gamma,
                         s.temperature, s.top_k, s.top_p, s.seed, target=self.cfg.name,
                         drafter=self.drafter.name)

    def rounds(self) -> Iterator[list[dict]]:
        """Each round's events as soon as the round is done. Runs JAX: call from a worker thread."""
        s, tok = self.settings, self.bundle.tok
        _, graphdef, params = self.bundle.models["target"]
        tokens, lengths = pad_prompts([self.prompt_ids], self.cfg.n_ctx)
        sp = SamplingParams.make(s.temperature, s.top_k, s.top_p)
        steps = speculative_rounds(graphdef, params, self.cfg, self.drafter, self.dparams, tokens,
                                   lengths, jax.random.key(s.seed), sp, s.max_new, tok.eos_id,
                                   s.gamma)
        for r, (trace, _, times) in enumerate(steps):
            yield events_from_step(trace, tok, r, times)
