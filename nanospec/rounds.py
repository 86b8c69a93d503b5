"""What every decoding loop shares — autoregressive, chain and tree speculation alike.

A loop is an object whose static parts (model graph and config, drafter, γ or tree, EOS) are
frozen fields, so the whole object is one static argument of `jax.jit`. It runs in rounds:

    state = loop.prefill(params, dparams, tokens, lengths, key)
    drafted, state = loop.draft(dparams, state, sp)                        # the drafter alone
    state, trace = loop.settle(params, dparams, state, drafted, sp, max_new)  # ONE target pass

`settle` is the round after its drafts: the verify rule on one target pass (verify.py is the
rule; nothing else in the code is called verify), the commit, and any hooks. `Loop` turns those
three into the two drivers every caller uses (as in the gemma sampler):

- `run`:    every round fused into one jitted `lax.while_loop` (speed, large-N statistics);
- `rounds`: each round as its own compiled call, timed, yielding a `Round` (the UI, lessons,
            tracing). Same key => same tokens from both.

Round statistics (`RoundStats`: how many drafts each round accepted) sit *beside* the
algorithm's state: they are read off each round's trace and never steer the algorithm.
The key schedule has a name, `round_keys`: round r drafts with one key and settles with
another, both derived from (key, r) alone, so any driver replays any other.
"""

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.aot import compiled
from nanospec.cache import init_cache
from nanospec.compat import out_info
from nanospec.model import ModelConfig, forward
from nanospec.sampling import fold_keys
from nanospec.verify import Verdict

TOP = 5  # how many of the most likely tokens a trace keeps per position (for display)


def round_keys(key: jax.Array, step: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The key schedule: round `step` drafts with fold_in(k, 0) and verifies with fold_in(k, 1),
    where k = fold_in(key, step)."""
    k = fold_keys(key, step)
    return fold_keys(k, 0), fold_keys(k, 1)


def top_tokens(probs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(ids, probs) of the TOP most likely tokens along the last axis."""
    probs, ids = jax.lax.top_k(probs, TOP)
    return ids, probs


def prob_of(probs: jax.Array, token: jax.Array) -> jax.Array:
    """probs[b, token[b]] for every row: (B, V), (B,) -> (B,)."""
    return jnp.take_along_axis(probs, token[:, None], axis=1)[:, 0]


def prefill_target(graphdef, params, cfg: ModelConfig, tokens: jax.Array, capacity: int):
    """The one prefill: the padded prompt (B, Lb) through the target into an empty cache of
    `capacity` slots. Returns (logits, hidden, cache, seq); each loop then sets the cache's
    committed length to its own invariant (cache.rollback)."""
    B, Lb = tokens.shape
    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, B, capacity)
    positions = jnp.broadcast_to(jnp.arange(Lb), (B, Lb))
    logits, hidden, cache = forward(graphdef, params, tokens, positions, cache)
    seq = jnp.zeros((B, capacity), jnp.int32).at[:, :Lb].set(tokens)
    return logits, hidden, cache, seq


def share_rows(state, batch: int):
    """A batch-1 state repeated for `batch` identical rows (the leading axis of every array
    leaf; scalars such as the key and the step count are shared as they are). Tiled, not
    repeated element by element: a cache buffer's leading axis holds the row's H heads."""
    tile = lambda x: jnp.tile(x, (batch,) + (1,) * (x.ndim - 1))
    return jax.tree.map(lambda x: tile(x) if x.ndim else x, state)


def generated(state, prompt_lengths) -> list[list[int]]:
    """Each row's generated ids (prompt stripped), from any loop's state (`seq`, `n_new`)."""
    seq, start, n = np.asarray(state.seq), np.asarray(prompt_lengths), np.asarray(state.n_new)
    return [seq[b, start[b] : start[b] + n[b]].tolist() for b in range(len(start))]


class StepTrace(NamedTuple):
    """Everything one round decided, as fixed-shape arrays (turned into events on the host)."""

    live: jax.Array  # (B,) bool: the row took part in this round
    start: jax.Array  # (B,) int32: committed length before the round
    drafts: jax.Array  # (B, γ)
    n_draft: jax.Array  # (B,) int32: drafts proposed (the first n_draft of `drafts`)
    verdict: Verdict  # n_accepted, accepted, token, is_bonus, u, p_x, q_x, extra_probs
    n_emitted: jax.Array  # (B,) tokens appended (n + 1, cut short by EOS or max_new)
    emitted: jax.Array  # (B, γ+1) the appended tokens (valid up to n_emitted)
    q_top: tuple  # (ids, probs) each (B, γ, TOP)
    p_top: tuple  # (ids, probs) each (B, γ+1, TOP)
    extra_top: tuple  # (ids, probs) each (B, TOP): the residual or bonus law
    token_prob: jax.Array  # (B,) probability of the residual/bonus token under that law
    token_p: jax.Array  # (B,) its probability under the target's p at that position
    token_q: jax.Array  # (B,) ... and under the draft's q there (0 for a bonus token)
    cached: jax.Array  # (B,) bool: a live row whose drafts were ready before the round (SSD)
    ahead: Any = None  # what a post-round hook prepared for the next round (ssd.Ahead)

    def counts(self):
        """(live, drafts proposed, accepted, all accepted, drafts cached) for RoundStats.add."""
        v = self.verdict
        return self.live, self.n_draft, v.n_accepted, v.is_bonus, self.cached


class RoundStats(NamedTuple):
    """Counters of a run, per row: what trace.metrics reports. Never read by the algorithm."""

    hist: jax.Array  # (B, depth+1) int32: rounds that accepted 0, 1, ..., depth drafts
    drafted: jax.Array  # (B,) int32: drafts proposed
    rejected: jax.Array  # (B,) int32: rounds that ended in a rejection (not a bonus token)
    cached: jax.Array  # (B,) int32: rounds whose drafts were ready in SSD's cache (ssd/)

    @classmethod
    def zeros(cls, batch: int, depth: int) -> "RoundStats":
        z = jnp.zeros(batch, jnp.int32)
        return cls(jnp.zeros((batch, depth + 1), jnp.int32), z, z, z)

    def add(self, live, n_draft, n_accepted, is_bonus, cached=False) -> "RoundStats":
        """Count one round: (B,) each — which rows took part, drafts proposed and accepted,
        whether every one was accepted, whether the drafts came from a speculation cache."""
        rows = jnp.arange(live.shape[0])
        return RoundStats(
            self.hist.at[rows, n_accepted].add(live.astype(jnp.int32)),
            self.drafted + jnp.where(live, n_draft, 0),
            self.rejected + (live & ~is_bonus).astype(jnp.int32),
            self.cached + (live & cached).astype(jnp.int32),
        )

    def counters(self, state, rows: int | None = None) -> tuple[list[int], int, int]:
        """The first `rows` rows (default all) together: the acceptance histogram, tokens
        generated (from the final `state`) and drafts proposed (trace.metrics' inputs)."""
        keep = slice(None, rows)
        return (
            np.asarray(self.hist)[keep].sum(0).tolist(),
            int(np.sum(state.n_new[keep])),
            int(np.sum(self.drafted[keep])),
        )

    def cached_rounds(self, rows: int | None = None) -> int:
        """Rounds of the first `rows` rows (default all) whose drafts came from SSD's cache."""
        return int(np.sum(self.cached[slice(None, rows)]))


class Round(NamedTuple):
    """What the step-wise driver yields after each round."""

    trace: Any  # the round's trace (StepTrace or trees.loop.TreeTrace), device arrays
    state: Any  # the loop's state after the round
    stats: RoundStats  # counters so far
    seconds: dict  # {"draft_s": ..., "verify_s": ...}: the draft program, the settle program


class Programs(NamedTuple):
    """The step-wise driver's three compiled programs (aot.py)."""

    prefill: Any
    draft: Any
    settle: Any


def _loop(spec, params, dparams, tokens, lengths, key, sp, max_new):
    """Prefill, then rounds until every row is done: one `lax.while_loop`."""
    if spec.shared:  # every row holds the same prompt: run it once, repeat the state
        state = share_rows(
            spec.prefill(params, dparams, tokens[:1], lengths[:1], key), tokens.shape[0]
        )
    else:
        state = spec.prefill(params, dparams, tokens, lengths, key)

    def one_round(carry):
        state, stats = carry
        drafted, state = spec.draft(dparams, state, sp)
        state, trace = spec.settle(params, dparams, state, drafted, sp, max_new)
        return state, stats.add(*trace.counts())

    stats = RoundStats.zeros(tokens.shape[0], spec.depth)
    return jax.lax.while_loop(lambda c: ~jnp.all(c[0].done), one_round, (state, stats))


_fused = jax.jit(_loop, static_argnames=("spec",))
_prefill_jit = jax.jit(
    lambda spec, params, dparams, tokens, lengths, key: spec.prefill(
        params, dparams, tokens, lengths, key
    ),
    static_argnames=("spec",),
)
_draft_jit = jax.jit(
    lambda spec, dparams, state, sp: spec.draft(dparams, state, sp),
    static_argnames=("spec",),
    donate_argnames=("state",),
)
_settle_jit = jax.jit(
    lambda spec, params, dparams, state, drafted, sp, max_new: spec.settle(
        params, dparams, state, drafted, sp, max_new
    ),
    static_argnames=("spec",),
    donate_argnames=("state",),
)
JITTED = (_prefill_jit, _draft_jit, _settle_jit)  # the step-wise programs (tests count them)
prefill_program = _prefill_jit  # prefill_program(loop, params, dparams, tokens, lengths, key)
fused_program = _fused  # the fused driver, to lower and compile by hand (measure/quick_compile.py)


class Loop:
    """The two drivers, for any loop with `prefill`, `draft`, `settle`, `check`, `events`,
    `depth` (most drafts one round can accept) and `shared` (rows hold the same prompt).
    A round's trace says what to count itself (`trace.counts()`: StepTrace, TreeTrace)."""

    def step(self, params, dparams, state, sp, max_new):
        """One whole round: draft, then settle (verify and commit). Returns (state, trace)."""
        drafted, state = self.draft(dparams, state, sp)
        return self.settle(params, dparams, state, drafted, sp, max_new)

    def program(self, params, dparams, tokens, lengths, key, sp):
        """(the fused loop compiled for these shapes, seconds compiling; 0 if done before).
        Call it with params, dparams, tokens, lengths, key, sp and max_new as keywords."""
        return compiled(
            _fused,
            dict(spec=self),
            dict(
                params=params,
                dparams=dparams,
                tokens=tokens,
                lengths=lengths,
                key=key,
                sp=sp,
                max_new=jax.ShapeDtypeStruct((), jnp.int32),
            ),
        )

    def run(self, params, dparams, tokens, lengths, key, sp, max_new: int):
        """Fused driver: the whole generation in one jitted `lax.while_loop` -> (state, stats)."""
        self.check(lengths, max_new)
        program, _ = self.program(params, dparams, tokens, lengths, key, sp)
        dynamic = dict(params=params, dparams=dparams, tokens=tokens, lengths=lengths)
        return program(**dynamic, key=key, sp=sp, max_new=jnp.int32(max_new))

    def compile(self, params, dparams, tokens, lengths, key, sp) -> tuple[Programs, float]:
        """Compile the step-wise driver ahead of time: (programs, seconds spent compiling).
        Only the static fields and the shapes decide, so a new seed, temperature or prompt of
        the same bucket reuses them (0 s)."""
        pre, s1 = compiled(
            _prefill_jit,
            dict(spec=self),
            dict(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key),
        )
        dr, s2 = compiled(
            _draft_jit, dict(spec=self), dict(dparams=dparams, state=out_info(pre), sp=sp)
        )
        se, s3 = compiled(
            _settle_jit,
            dict(spec=self),
            dict(
                params=params,
                dparams=dparams,
                state=out_info(pre),
                drafted=out_info(dr)[0],
                sp=sp,
                max_new=jax.ShapeDtypeStruct((), jnp.int32),
            ),
        )
        return Programs(pre, dr, se), s1 + s2 + s3

    def rounds(
        self,
        params,
        dparams,
        tokens,
        lengths,
        key,
        sp,
        max_new: int,
        programs: Programs | None = None,
    ):
        """Step-wise driver: yields a `Round` after every round. Give it `compile`'s programs
        to keep compiling out of round 1's timings (else it compiles them first)."""
        self.check(lengths, max_new)
        if programs is None:
            programs, _ = self.compile(params, dparams, tokens, lengths, key, sp)
        state = programs.prefill(
            params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key
        )
        stats = RoundStats.zeros(tokens.shape[0], self.depth)
        max_new = jnp.int32(max_new)
        while not bool(jnp.all(state.done)):
            t0 = time.perf_counter()
            drafted, state = programs.draft(dparams=dparams, state=state, sp=sp)
            jax.block_until_ready(drafted)
            t1 = time.perf_counter()
            state, trace = programs.settle(
                params=params, dparams=dparams, state=state, drafted=drafted, sp=sp, max_new=max_new
            )
            jax.block_until_ready(state.done)
            t2 = time.perf_counter()
            stats = stats.add(*trace.counts())
            yield Round(trace, state, stats, {"draft_s": t1 - t0, "verify_s": t2 - t1})
