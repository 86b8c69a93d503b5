"""SSD on two devices: the target verifies on one as the drafter builds the cache on the other.

ssd/loop.py defines one round of speculative speculative decoding from three parts — the
proposer's `propose` (look up the cache, or run the backup), the target's side
(`judge_and_commit`: the judge and the commit), and the hook's `build` (the next round's
cache) — and proves that `build` reads nothing the target computes in this round.
That independence is what this driver spends. Each round, the host *enqueues*:

    drafter device:  draft ──────────► build (the cache for round r+1) ─┐
                         │ drafts, q                                     │
    target device:       └──► verify + commit (round r) ──► outcome ────┴─► draft (round r+1)

JAX dispatches asynchronously: enqueueing returns at once, and a program starts as soon as
its inputs are ready, so `build` runs while the target verifies. The host then waits for the
verdict alone (is every row done?), hands the outcome (k, t*) and the committed tokens to
the drafter, and enqueues the next round, whose `draft` is a cache lookup on a hit and the
backup's γ draft steps on a miss. Only small arrays cross between the devices each round:
the drafts and their laws (B, γ, V), then the committed tokens (B, S) and the outcome (B, 2).

The same key schedule as every other driver (rounds.round_keys), so with the same key it
emits exactly the tokens of `SSDSpeculator.run` (tests/test_ssd_devices.py). With both
devices the same device it is the sequential algorithm, step by step.

    devices = jax.devices()[:2]          # e.g. two GPUs; on CPU:
    # XLA_FLAGS=--xla_force_host_platform_device_count=2 before JAX is imported
    state, stats = run_two_devices(ssd, params, dparams, tokens, lengths, key, sp, 32, devices)

What this file deliberately leaves out: pipelining more than one round ahead (the next
round's draft waits for this round's outcome — that wait is SSD's, not the driver's), and
copying over a real interconnect (on one host, a device-to-device copy is a memcpy).
"""

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

from nanospec.aot import compiled
from nanospec.rounds import RoundStats
from nanospec.speculative import SpecState
from nanospec.ssd.loop import SSDSpeculator


def _draft(spec: SSDSpeculator, dparams, view: SpecState, sp):
    """On the drafter's device: the round's drafts, from the cache or the backup."""
    return spec.draft(dparams, view, sp)


def _build(spec: SSDSpeculator, dparams, view: SpecState, drafted, sp):
    """On the drafter's device: the speculation cache for the next round (SSDProposer.build)."""
    return spec.proposer.build(dparams, view, drafted, sp)


def _settle(spec: SSDSpeculator, params, state: SpecState, drafted, stats: RoundStats, sp, max_new):
    """On the target's device: one target pass, the verify rule and the commit (the round
    settled, without SSD's hook), the counters, the outcome (k, t*) and whether every row is
    done (computed here: one fewer program for the host to dispatch each round)."""
    new_state, step = spec.judge_and_commit(params, None, state, drafted, sp, max_new)
    stats = stats.add(*step.counts())
    outcome = jnp.stack([step.verdict.n_accepted, step.verdict.token], axis=1)
    return new_state, stats, outcome, jnp.all(new_state.done)


_prefill_jit = jax.jit(
    lambda spec, params, dparams, tokens, lengths, key: spec.prefill(
        params, dparams, tokens, lengths, key
    ),
    static_argnames=("spec",),
)
_draft_jit = jax.jit(_draft, static_argnames=("spec",), donate_argnames=("view",))
_build_jit = jax.jit(_build, static_argnames=("spec",))
_settle_jit = jax.jit(_settle, static_argnames=("spec",), donate_argnames=("state",))


class Timed(NamedTuple):
    """Seconds per round of each program run alone (`run_two_devices(..., timed=True)`)."""

    draft_s: list[float]  # the draft step: a lookup on a hit, the backup on a miss
    all_hit: list[bool]  # ... whether every live row's drafts came from the cache
    verify_s: list[float]  # the target's pass, verify rule and commit
    build_s: list[float]  # the cache for the next round
    tokens: list[int]  # tokens the round emitted (all rows)


def run_two_devices(
    spec: SSDSpeculator,
    params,
    dparams,
    tokens,
    lengths,
    key,
    sp,
    max_new: int,
    devices,
    timed: bool = False,
):
    """Generate with the target on devices[0] and the drafter on devices[1] -> (state, stats),
    or (state, stats, Timed) with `timed`: then every program is waited for on its own, so
    nothing overlaps and each one's cost is read off the clock (the timeline model's inputs).
    `spec.shared` is ignored: every row is prefilled."""
    spec.check(lengths, max_new)
    target, drafter = devices
    to_t = lambda x: jax.device_put(x, target)
    to_d = lambda x: jax.device_put(x, drafter)
    # subtle: what the drafter reads of the target's state is a copy (jnp.copy: jax 0.4.38's
    # may_alias=False aliases), or on one device it shares buffers the next settle donates.
    copy_d = lambda x: jax.device_put(jax.tree.map(jnp.copy, x), drafter)
    params, dparams_t, dparams_d = to_t(params), to_t(dparams), to_d(dparams)
    sp_t, sp_d = to_t(sp), to_d(sp)
    # The prefill (once) on the target's device; then the drafter's state moves to its own.
    state = _prefill_jit(spec, params, dparams_t, to_t(tokens), to_t(lengths), to_t(key))
    view = copy_d(state._replace(cache=None, n_new=None, done=None))  # what the drafter reads
    state = state._replace(dstate=None)
    stats = to_t(RoundStats.zeros(tokens.shape[0], spec.depth))
    max_new = to_t(jnp.int32(max_new))
    clock = Timed([], [], [], [], [])
    wait = jax.block_until_ready if timed else (lambda x: x)
    # Each program compiled once for its device and shapes (aot.py), then called with its
    # arrays alone: a jitted call would hash the loop object (its static argument) every time.
    program = lambda jitted, device, **args: compiled(jitted, dict(spec=spec), args, (device,))[0]
    draft = program(_draft_jit, drafter, dparams=dparams_d, view=view, sp=sp_d)
    settle = build = None  # compiled in round 1, once their inputs exist
    while True:
        if timed:  # the rows that take part in this round, and their tokens so far
            live, before_n = to_d(~state.done), int(jnp.sum(state.n_new))
        t0 = time.perf_counter()
        drafted, view = wait(draft(dparams=dparams_d, view=view, sp=sp_d))
        t1 = time.perf_counter()
        before = view  # build reads the text as it was before this round's verdict
        args = dict(
            params=params, state=state, drafted=to_t(drafted), stats=stats, sp=sp_t, max_new=max_new
        )
        settle = settle or program(_settle_jit, target, **args)
        state, stats, outcome, finished = wait(settle(**args))
        t2 = time.perf_counter()
        args = dict(dparams=dparams_d, view=before, drafted=drafted, sp=sp_d)
        build = build or program(_build_jit, drafter, **args)
        cache = wait(build(**args))
        t3 = time.perf_counter()
        seq, length, step, outcome = copy_d((state.seq, state.length, state.step, outcome))
        view = view._replace(
            seq=seq, length=length, step=step, dstate=cache._replace(outcome=outcome)
        )
        if timed:
            clock.draft_s.append(t1 - t0)
            clock.all_hit.append(bool(jnp.all(drafted.cached | ~live)))
            clock.verify_s.append(t2 - t1)
            clock.build_s.append(t3 - t2)
            clock.tokens.append(int(jnp.sum(state.n_new)) - before_n)
        if bool(finished):  # the host waits here: for the verdict only
            break
    return (state, stats, clock) if timed else (state, stats)
