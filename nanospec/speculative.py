"""The speculative loop: draft γ tokens, verify them in one target pass, commit, repeat.

One round (`speculative_step` = `draft_phase` then `verify_phase`):

1. draft:  the drafter proposes x₁..x_γ and their laws q₁..q_γ (a drafter with `draft_length`
           may propose fewer, down to none: then the round is a one-token decode step);
2. verify: ONE target pass over the block [last committed token, x₁..x_γ] gives p₁..p_{γ+1};
3. accept / reject / residual / bonus (verify.py) -> n accepted drafts plus one more token;
4. commit: append x₁..x_n and that token, roll both caches back to the committed length.

Static vs traced — what recompiles: the target and drafter (graph + config), γ, batch size,
prompt bucket and cache capacity are static; tokens, lengths, max_new_tokens, the sampling
params and the key are traced (changing temperature never recompiles).

Cache invariant: the target's KV cache holds every committed token except the last one, which
leads the next verify block; so after a round the cache length is simply `length - 1` and the
KV of rejected drafts sits in stale slots that no query can see (cache.py).

Two drivers, one step (as in the gemma sampler): `speculative_generate` fuses every round into
one `lax.while_loop` (speed, large-N statistics); `speculative_rounds` is a Python generator
that runs the two phases as separate jitted calls, times them, and yields each round's
`StepTrace` (the UI, lessons, tracing). Same key => same tokens from both.
"""

import time
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.aot import compiled
from nanospec.cache import KVCache, capacity as cache_capacity, init_cache, rollback, run_if
from nanospec.drafters import take_rows
from nanospec.errors import UserError
from nanospec.model import ModelConfig, forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.trace import metrics
from nanospec.verify import Verdict, verify

TOP = 5  # how many of the most likely tokens a trace keeps per position (for display)


class SpecState(NamedTuple):
    seq: jax.Array  # (B, S) int32: committed tokens; slot i holds position i
    length: jax.Array  # (B,) int32: committed tokens per row (prompt included)
    cache: KVCache  # the target's: holds length - 1 tokens
    dstate: Any  # the drafter's own state (e.g. the draft model's KV cache)
    n_new: jax.Array  # (B,) int32: tokens generated so far
    done: jax.Array  # (B,) bool
    hist: jax.Array  # (B, γ+1) int32: rounds that accepted 0, 1, ..., γ drafts (trace.metrics)
    drafted: jax.Array  # (B,) int32: drafts proposed (γ per round, unless the drafter chose fewer)
    rejected: jax.Array  # (B,) int32: rounds that ended in a rejection (not in a bonus token)
    step: jax.Array  # () int32: rounds taken by the loop (keys are fold_in(key, step))
    key: jax.Array


class Drafted(NamedTuple):  # what the draft phase hands to the verify phase
    drafts: jax.Array  # (B, γ) int32
    q: jax.Array  # (B, γ, V) the law each draft was drawn from
    n_draft: jax.Array  # (B,) int32: how many of them are proposed (the rest: padding)


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


def top_tokens(probs):
    """(ids, probs) of the TOP most likely tokens along the last axis."""
    probs, ids = jax.lax.top_k(probs, TOP)
    return ids, probs



def full_capacity(cfg: ModelConfig, block: int) -> int:
    """Cache slots for a run that may go all the way to the context's end (cache.capacity)."""
    return cache_capacity(cfg.n_ctx, cfg.n_ctx, 0, block)


def prefill(graphdef, params, cfg: ModelConfig, drafter, dparams, tokens, lengths, key,
            gamma: int, capacity: int | None = None) -> SpecState:
    """Cache the prompt in target and drafter; the last prompt token waits for the first block.

    `capacity` (static): the caches' slots (cache.capacity; default: the whole context)."""
    B, Lb = tokens.shape
    S = capacity or full_capacity(cfg, gamma + 1)
    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, B, S)
    positions = jnp.broadcast_to(jnp.arange(Lb), (B, Lb))
    _, hidden, cache = forward(graphdef, params, tokens, positions, cache)
    seq = jnp.zeros((B, S), jnp.int32).at[:, :Lb].set(tokens)
    dstate = drafter.init(dparams, tokens, lengths, hidden, capacity=S)
    return SpecState(seq, lengths, rollback(cache, lengths - 1), dstate,
                     jnp.zeros(B, jnp.int32), jnp.zeros(B, bool), jnp.zeros((B, gamma + 1), jnp.int32),
                     jnp.zeros(B, jnp.int32), jnp.zeros(B, jnp.int32), jnp.int32(0), key)


def draft_phase(drafter, dparams, state: SpecState, sp: SamplingParams, gamma: int):
    key = jax.random.fold_in(jax.random.fold_in(state.key, state.step), 0)
    drafts, q, dstate = drafter.propose(dparams, state.dstate, state.seq, state.length, key, sp, gamma)
    n_draft = (drafter.draft_length(state.seq, state.length, gamma) if variable_length(drafter)
               else jnp.full(drafts.shape[:1], gamma, jnp.int32))
    return Drafted(drafts, q, n_draft), state._replace(dstate=dstate)


def variable_length(drafter) -> bool:
    """Drafters with `draft_length` may propose fewer than γ drafts in a round (drafters.py)."""
    return hasattr(drafter, "draft_length")


def target_pass(graphdef, params, block, positions, cache, n_draft, live, variable: bool):
    """The verify pass over [last, x₁..x_γ] — or, when no live row proposed a draft, over
    [last] alone (an ordinary decode step, 1 token instead of γ+1), padded back to γ+1.

    subtle: both passes are compiled into the loop and exactly one runs, each in a `run_if`
    (cache.py: a `lax.cond` here copied the whole cache twice a round, which cost more than
    skipping the wide pass saved). The padding (logits and features of positions no row
    proposed) is never read — verify stops at n_draft — and the cache slots it stands for
    are rolled back like any rejected draft's.
    """
    if not variable:
        return forward(graphdef, params, block, positions, cache)
    W = block.shape[1]

    def wide(out):
        return forward(graphdef, params, block, positions, out[2])

    def one_token(out):
        logits, hidden, c = forward(graphdef, params, block[:, :1], positions[:, :1], out[2])
        pad = lambda x: jnp.pad(x, ((0, 0), (0, W - 1), (0, 0)))
        return pad(logits), pad(hidden), c._replace(length=c.length + W - 1)

    logits, hidden, _ = jax.eval_shape(lambda: wide((None, None, cache)))
    out = (jnp.zeros(logits.shape, logits.dtype), jnp.zeros(hidden.shape, hidden.dtype), cache)
    any_drafts = jnp.any(live & (n_draft > 0))
    return run_if(~any_drafts, one_token, run_if(any_drafts, wide, out))


def committed_cache_length(new_length: jax.Array) -> jax.Array:
    """The target cache keeps every committed token but the last (it leads the next block)."""
    return new_length - 1


def emit_count(n_accepted, emitted, limit, eos_id: int):
    """How many of [x₁..x_n, token] to append: n + 1, cut after an EOS and at `limit` (B,),
    the tokens a row may still add (max_new_tokens and the context's end both count)."""
    gamma1 = emitted.shape[1]
    idx = jnp.arange(gamma1)[None, :]
    is_eos = (emitted == eos_id) & (idx <= n_accepted[:, None])
    first_eos = jnp.where(jnp.any(is_eos, axis=1), jnp.argmax(is_eos, axis=1), gamma1)
    n = jnp.minimum(jnp.minimum(n_accepted + 1, first_eos + 1), limit)
    return n, first_eos < n


def room_for_drafts(cfg: ModelConfig, length) -> jax.Array:
    """Drafts a row can still use: a round emits up to n_draft + 1 tokens, and a row may grow
    to the context's end (n_ctx tokens), exactly as far as autoregressive decoding goes.

    subtle: without this cap the last rounds would stop early or need γ+1 free slots, and a
    speculative run would end at a random length where AR reaches the context's end — a
    different output law. The cap depends only on the length, so it is fixed before the
    target is consulted, and the verify rule is exact for any such n_draft (verify.py)."""
    return jnp.maximum(cfg.n_ctx - 1 - length, 0)


def verify_phase(graphdef, params, cfg: ModelConfig, drafter, dparams, state: SpecState,
                 drafted: Drafted, sp: SamplingParams, max_new, eos_id: int):
    """One target pass over [last, x₁..x_γ], the verify rule, and the commit.

    The drafter then sees what the target saw (`drafter.commit`): the block's hidden features
    and the tokens that were appended — what EAGLE, Medusa and MTP heads draft from.
    """
    B, gamma = drafted.drafts.shape
    live = ~state.done
    drafted = drafted._replace(n_draft=jnp.minimum(drafted.n_draft, room_for_drafts(cfg, state.length)))
    last = take_rows(state.seq, state.length - 1, 1)  # (B, 1)
    block = jnp.concatenate([last, drafted.drafts], axis=1)  # (B, γ+1)
    positions = (state.length - 1)[:, None] + jnp.arange(gamma + 1)  # (B, γ+1)
    logits, hidden, cache = target_pass(graphdef, params, block, positions, state.cache,
                                        drafted.n_draft, live, variable_length(drafter))  # (B, γ+1, V)
    p = sampling_probs(logits, sp)  # (B, γ+1, V)
    key = jax.random.fold_in(jax.random.fold_in(state.key, state.step), 1)
    v = verify(key, drafted.drafts, drafted.q, p, drafted.n_draft)

    # The appended tokens: drafts x₁..x_n then the residual/bonus token at index n.
    emitted = jnp.concatenate([drafted.drafts, jnp.zeros((B, 1), jnp.int32)], axis=1)
    emitted = emitted.at[jnp.arange(B), v.n_accepted].set(v.token)  # (B, γ+1)
    new_state, n_emit = commit_round(cfg, state, cache, v.n_accepted, emitted, max_new, eos_id,
                                     drafted.n_draft, v.is_bonus)
    new_state = new_state._replace(dstate=drafter.commit(
        dparams, state.dstate, hidden, emitted, state.length - 1, new_state.length))
    trace = StepTrace(live, state.length, drafted.drafts, drafted.n_draft, v, n_emit, emitted,
                      top_tokens(drafted.q), top_tokens(p), top_tokens(v.extra_probs), at(v.extra_probs, v.token),
                      p[jnp.arange(B), v.n_accepted, v.token],
                      jnp.where(v.is_bonus, 0.0, drafted.q[jnp.arange(B), jnp.minimum(v.n_accepted, gamma - 1), v.token]))
    return new_state, trace


def at(probs, token):
    """probs[b, token[b]] for every row: (B, V), (B,) -> (B,)."""
    return jnp.take_along_axis(probs, token[:, None], axis=1)[:, 0]


def commit_round(cfg: ModelConfig, state: SpecState, cache: KVCache, n_accepted, emitted,
                 max_new, eos_id: int, n_draft, is_bonus):
    """Append [x₁..x_n, token] (`emitted`, (B, W)), roll the target cache back, update the
    counters. `n_draft` (B,) the drafts proposed, `is_bonus` (B,) whether every one was
    accepted (the counters' other inputs). A row is done after EOS, after max_new tokens, or
    once it holds n_ctx tokens — the same three stops as autoregressive decoding.

    `cache` comes from the verify pass, with the accepted path already in slots start.. (a
    chain's drafts are; a tree's are moved there first, trees/loop.py). The caller then
    lets the drafter see the target's features (`drafter.commit`).
    """
    B, W = emitted.shape
    live = ~state.done
    limit = jnp.minimum(max_new - state.n_new, cfg.n_ctx - state.length)  # (B,)
    n_emit, hit_eos = emit_count(n_accepted, emitted, limit, eos_id)
    n_emit = jnp.where(live, n_emit, 0)
    # Write all W slots (fixed shape); those past the new length are junk until overwritten.
    # subtle: a finished row may sit too close to the end for W slots, where the write would
    # be clamped onto committed tokens — so it writes back what is already there.
    block_out = jnp.where(live[:, None], emitted, take_rows(state.seq, state.length, W))
    write = lambda row, e, s: jax.lax.dynamic_update_slice(row, e, (s,))
    seq = jax.vmap(write)(state.seq, block_out, state.length)
    length = state.length + n_emit
    n_new = state.n_new + n_emit
    full = length >= cfg.n_ctx
    done = state.done | (live & (hit_eos | (n_new >= max_new) | full))
    cache = rollback(cache, jnp.where(live, committed_cache_length(length), state.cache.length))
    hist = state.hist.at[jnp.arange(B), n_accepted].add(live.astype(jnp.int32))
    drafted = state.drafted + jnp.where(live, n_draft, 0)
    rejected = state.rejected + (live & ~is_bonus).astype(jnp.int32)
    new_state = state._replace(seq=seq, length=length, cache=cache, n_new=n_new, done=done,
                               hist=hist, drafted=drafted, rejected=rejected, step=state.step + 1)
    return new_state, n_emit


def speculative_step(graphdef, params, cfg, drafter, dparams, state, sp, max_new, eos_id, gamma):
    """One whole round: draft, verify, commit."""
    drafted, state = draft_phase(drafter, dparams, state, sp, gamma)
    return verify_phase(graphdef, params, cfg, drafter, dparams, state, drafted, sp, max_new, eos_id)


_STATIC = ("graphdef", "cfg", "drafter", "eos_id", "gamma", "capacity", "shared")


def shared_prefill(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, gamma,
                   capacity, shared: bool) -> SpecState:
    """`prefill`, or — when every row holds the same prompt (`shared`) — `prefill` of row 0
    repeated for every row (generate.share_rows)."""
    if not shared:
        return prefill(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, gamma, capacity)
    from nanospec.generate import share_rows
    state = prefill(graphdef, params, cfg, drafter, dparams, tokens[:1], lengths[:1], key, gamma,
                    capacity)
    return share_rows(state, tokens.shape[0])


@partial(jax.jit, static_argnames=_STATIC)
def _fused(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp, max_new, eos_id, gamma,
           capacity=None, shared=False):
    state = shared_prefill(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, gamma,
                           capacity, shared)
    step = lambda s: speculative_step(graphdef, params, cfg, drafter, dparams, s, sp, max_new,
                                      eos_id, gamma)[0]
    return jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)


_prefill_jit = jax.jit(prefill, static_argnames=("graphdef", "cfg", "drafter", "gamma", "capacity"))
_draft_jit = jax.jit(draft_phase, static_argnames=("drafter", "gamma"), donate_argnames=("state",))
_verify_jit = jax.jit(verify_phase, static_argnames=("graphdef", "cfg", "drafter", "eos_id"),
                      donate_argnames=("state",))


def check_room(cfg: ModelConfig, lengths, max_new: int, gamma: int) -> None:
    """γ and max_new in range, and a prompt that leaves the context at least one token."""
    if not 1 <= gamma <= 32:
        raise UserError(f"gamma must be between 1 and 32, got {gamma}.")
    if max_new < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {max_new}.")
    longest = int(np.max(np.asarray(lengths)))
    if longest >= cfg.n_ctx:
        raise UserError(f"The prompt is {longest} tokens long but the model's context holds "
                        f"{cfg.n_ctx}, leaving no room to generate; shorten it.")


def speculative_generate(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                         sp: SamplingParams, max_new: int, eos_id: int, gamma: int,
                         capacity: int | None = None) -> SpecState:
    """Fused driver: the whole generation in one jitted `lax.while_loop`."""
    check_room(cfg, lengths, max_new, gamma)
    return _fused(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp,
                  jnp.int32(max_new), eos_id, gamma, capacity)


class Programs(NamedTuple):
    """The step-wise driver's three compiled programs (aot.py)."""

    prefill: Any
    draft: Any
    verify: Any


def compile_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                   sp: SamplingParams, eos_id: int, gamma: int,
                   capacity: int | None = None) -> tuple[Programs, float]:
    """Compile the step-wise driver ahead of time: (programs, seconds spent compiling).

    Already-compiled programs come back at once (0 s): only the static arguments and the
    shapes decide, so a new seed, temperature or prompt of the same bucket reuses them."""
    pre, s1 = compiled(_prefill_jit, dict(graphdef=graphdef, cfg=cfg, drafter=drafter,
                                          gamma=gamma, capacity=capacity),
                       dict(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key))
    state = pre.out_info
    dr, s2 = compiled(_draft_jit, dict(drafter=drafter, gamma=gamma),
                      dict(dparams=dparams, state=state, sp=sp))
    ve, s3 = compiled(_verify_jit, dict(graphdef=graphdef, cfg=cfg, drafter=drafter, eos_id=eos_id),
                      dict(params=params, dparams=dparams, state=state, drafted=dr.out_info[0],
                           sp=sp, max_new=jax.ShapeDtypeStruct((), jnp.int32)))
    return Programs(pre, dr, ve), s1 + s2 + s3


def speculative_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                       sp: SamplingParams, max_new: int, eos_id: int, gamma: int,
                       capacity: int | None = None, programs: Programs | None = None):
    """Step-wise driver: yields (StepTrace, SpecState, timings) after every round.

    Give it `compile_rounds`' programs to keep compiling out of round 1's timings; without
    them it compiles (or finds) them first, before any round is timed."""
    check_room(cfg, lengths, max_new, gamma)
    if programs is None:
        programs, _ = compile_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                                     sp, eos_id, gamma, capacity)
    state = programs.prefill(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key)
    max_new = jnp.int32(max_new)
    while not bool(jnp.all(state.done)):
        t0 = time.perf_counter()
        drafted, state = programs.draft(dparams=dparams, state=state, sp=sp)
        jax.block_until_ready(drafted)
        t1 = time.perf_counter()
        state, trace = programs.verify(params=params, dparams=dparams, state=state, drafted=drafted,
                                       sp=sp, max_new=max_new)
        jax.block_until_ready(state.length)
        t2 = time.perf_counter()
        yield trace, state, {"draft_s": t1 - t0, "verify_s": t2 - t1}


def state_counters(state: SpecState, rows: int | None = None) -> tuple[list[int], int, int]:
    """A finished loop's counters, its first `rows` rows (default all) together: the
    acceptance histogram, tokens generated and drafts proposed (trace.metrics' inputs)."""
    keep = slice(None, rows)
    return (np.asarray(state.hist)[keep].sum(0).tolist(), int(np.sum(state.n_new[keep])),
            int(np.sum(state.drafted[keep])))


def state_metrics(state: SpecState) -> dict:
    """trace.metrics from a finished loop's counters, every row together."""
    return metrics(*state_counters(state))


def generated(state: SpecState, prompt_lengths) -> list[list[int]]:
    """Each row's generated ids (prompt stripped)."""
    seq, start, n = np.asarray(state.seq), np.asarray(prompt_lengths), np.asarray(state.n_new)
    return [seq[b, start[b]:start[b] + n[b]].tolist() for b in range(len(start))]
