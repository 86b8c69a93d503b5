"""A continuous-batching engine: decode slots that requests enter and leave while others decode.

JetStream's shape (prefill, insert into a free slot, one generate step for every slot), with
any nanospec loop — autoregressive or speculative — as the step:

    engine = Engine(loop, params, dparams, slots=8)
    slot = engine.insert(Request(prompt_ids, max_new=32, temperature=1.0, seed=7))
    while engine.busy:
        for out in engine.step():           # one round over every live slot
            print(out.slot, out.tokens, out.done)

How a request's output is kept independent of its neighbours: every slot holds a batch-1
state of the loop (its own KV caches, committed tokens, round counter and *key*), and a step
is the loop's own batch-1 round mapped over the slots with `jax.vmap`. So a request draws
exactly the random numbers it would draw alone — with the same seed, the same tokens as
`loop.run` on that prompt at batch 1, whatever else is running (tests/test_engine.py). Rows
that finished, and free slots, are rows the loop already skips (`done`).

Static shapes, so nothing recompiles as requests come and go: the slot count and the cache
capacity (the whole context) are fixed; a prompt is prefilled at batch 1 in its length's
bucket (generate.bucket: one program per bucket), then copied into its slot.

What this file deliberately leaves out: stop strings and streaming text (the server's work),
choosing γ per step (adaptive speculation), and a waiting queue (the caller inserts when
`free_slots` says there is room).
"""

from dataclasses import dataclass, replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import capacity as cache_capacity
from nanospec.errors import UserError
from nanospec.generate import pad_prompts
from nanospec.cli_args import check_sampling
from nanospec.sampling import SamplingParams


class Request(NamedTuple):
    """One generation request: a tokenized prompt and its own sampling settings."""

    prompt: list[int]
    max_new: int = 32
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0


class Output(NamedTuple):
    """What one engine step added to one slot."""

    slot: int
    tokens: list[int]  # new tokens this step (1 to γ+1, or none for a slot that just ended)
    done: bool  # the request finished (EOS, max_new or the context's end)


@dataclass
class _Slot:
    request: Request
    start: int  # prompt length: generated tokens begin here
    sent: int  # generated tokens already handed out


def _put(slots, one, at):
    """Every leaf of the slot states with slot `at` replaced by `one` (a batch-1 state)."""
    return jax.tree.map(lambda all_, x: all_.at[at].set(x), slots, one)


class Engine:
    """`slots` decode slots over one loop (`rounds.Loop`: generate.Decoder, a Speculator, ...)."""

    def __init__(self, loop, params, dparams, slots: int):
        if slots < 1:
            raise UserError(f"The engine needs at least one slot, got {slots}.")
        cfg = loop.cfg
        self.loop = replace(loop, shared=False,
                            capacity=cache_capacity(cfg.n_ctx, cfg.n_ctx, 0, loop.block))
        self.params, self.dparams, self.n_slots = params, dparams, slots
        self.slots: list[_Slot | None] = [None] * slots
        spec = self.loop
        self._prefill = jax.jit(lambda p, dp, tokens, lengths, key:
                                spec.prefill(p, dp, tokens, lengths, key))
        self._insert = jax.jit(_put, donate_argnums=0)

        def one_round(p, dp, state, sp, max_new):
            return spec.step(p, dp, state, sp, max_new)[0]  # a batch-1 round; trace dropped

        self._step = jax.jit(jax.vmap(one_round, in_axes=(None, None, 0, 0, 0)),
                             donate_argnums=2)
        # Every slot starts as a finished batch-1 state (any prompt will do): the loop skips it.
        empty = self._prefill(params, dparams, *pad_prompts([[0]], cfg.n_ctx), jax.random.key(0))
        empty = empty._replace(done=jnp.ones_like(empty.done))
        self.state = jax.tree.map(lambda x: jnp.stack([x] * slots), empty)
        self.sp = jax.tree.map(lambda x: jnp.stack([x] * slots), SamplingParams.make())
        self.max_new = jnp.ones(slots, jnp.int32)

    @property
    def free_slots(self) -> int:
        return sum(s is None for s in self.slots)

    @property
    def step_programs(self) -> int:
        """Step programs compiled so far: one, whatever requests arrive (tests count them)."""
        return self._step._cache_size()

    @property
    def busy(self) -> bool:
        return self.free_slots < self.n_slots

    def insert(self, request: Request) -> int:
        """Prefill `request` and place it in a free slot; returns the slot. A full engine or a
        bad request is a UserError (one sentence)."""
        if self.free_slots == 0:
            raise UserError(f"All {self.n_slots} slots are busy; wait for one to finish.")
        check_sampling(request.temperature, request.top_k, request.top_p)
        if request.max_new < 1:
            raise UserError(f"max_new must be at least 1, got {request.max_new}.")
        self.loop.check([len(request.prompt)], request.max_new)
        tokens, lengths = pad_prompts([request.prompt], self.loop.cfg.n_ctx)
        one = self._prefill(self.params, self.dparams, tokens, lengths,
                            jax.random.key(request.seed))
        at = self.slots.index(None)
        self.state = self._insert(self.state, one, at)
        sp = SamplingParams.make(request.temperature, request.top_k, request.top_p)
        self.sp = jax.tree.map(lambda all_, x: all_.at[at].set(x), self.sp, sp)
        self.max_new = self.max_new.at[at].set(request.max_new)
        self.slots[at] = _Slot(request, len(request.prompt), 0)
        return at

    def step(self) -> list[Output]:
        """One round (or decode step) for every live slot; frees the slots that finished."""
        self.state = self._step(self.params, self.dparams, self.state, self.sp, self.max_new)
        seq, n_new, done = (np.asarray(x) for x in (self.state.seq, self.state.n_new,
                                                    self.state.done))
        out = []
        for i, slot in enumerate(self.slots):
            if slot is None:
                continue
            n = int(n_new[i, 0])
            out.append(Output(i, seq[i, 0, slot.start + slot.sent:slot.start + n].tolist(),
                              bool(done[i, 0])))
            slot.sent = n
            if done[i, 0]:
                self.slots[i] = None
        return out
