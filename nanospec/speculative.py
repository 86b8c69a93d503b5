"""The speculative loop: draft γ tokens, verify them in one target pass, commit, repeat.

Read `reference.py` first: the same algorithm as one plain Python loop. This file is the
fast version, one object (`Speculator`) whose public methods are the steps of a round:

1. `draft`:  the drafter proposes x₁..x_γ and their laws q₁..q_γ (a drafter may propose fewer,
             down to none: then the round is a one-token decode step, drafters.py);
2. `verify`: ONE target pass over the block [last committed token, x₁..x_γ] gives p₁..p_{γ+1};
             the verify rule (verify.py) accepts n drafts and draws one more token;
3. `commit`: append x₁..x_n and that token, roll the target cache back to the committed length,
             and let the drafter see what the target saw (its features, the emitted tokens).

`prefill`, `step`, `run` (fused `lax.while_loop`) and `rounds` (step by step, traced) come
from rounds.Loop. Token trees (trees/loop.py) are the same round with a different `draft`
and `judge`: `verify` and `commit` are shared.

Static vs traced — what recompiles: the loop object's fields (target and drafter graph and
config, γ, EOS, cache capacity), batch size and prompt bucket are static; tokens, lengths,
max_new_tokens, the sampling params and the key are traced (changing temperature never
recompiles).

Cache invariant: the target's KV cache holds every committed token except the last one, which
leads the next verify block; so after a round the cache length is simply `length - 1` and the
KV of rejected drafts sits in stale slots that no query can see (cache.py).
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import KVCache, rollback, run_if
from nanospec.cache import capacity as cache_capacity
from nanospec.drafters import Drafter, take_rows
from nanospec.errors import UserError
from nanospec.model import ModelConfig, forward
from nanospec.rounds import Loop, StepTrace, at, prefill_target, round_keys, top_tokens
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.verify import Verdict, verify


class SpecState(NamedTuple):
    seq: jax.Array  # (B, S) int32: committed tokens; slot i holds position i
    length: jax.Array  # (B,) int32: committed tokens per row (prompt included)
    cache: KVCache  # the target's: holds length - 1 tokens
    dstate: Any  # the drafter's own state (e.g. the draft model's KV cache)
    n_new: jax.Array  # (B,) int32: tokens generated so far
    done: jax.Array  # (B,) bool
    step: jax.Array  # () int32: rounds taken (the key schedule's counter, rounds.round_keys)
    key: jax.Array  # the run's key; the serving engine keeps a key and a step per row: (B,)


class Drafted(NamedTuple):  # what the draft step hands to the verify step
    drafts: jax.Array  # (B, γ) int32
    q: jax.Array  # (B, γ, V) the law each draft was drawn from
    n_draft: jax.Array  # (B,) int32: how many of them are proposed (the rest: padding)


class Judged(NamedTuple):
    """What one target pass and the verify rule decided, along the accepted path."""

    p: jax.Array  # (B, W, V) the target's laws over the verified block
    verdict: Any  # verify.Verdict (a chain) or trees.tree.TreeVerdict
    drafts: jax.Array  # (B, depth) the drafts along the path (the first n_accepted count)
    hidden: jax.Array  # (B, depth+1, C) the target's features along [last, path...]
    cache: KVCache  # the target's cache with the path in slots start.. (rolled back by commit)


def full_capacity(cfg: ModelConfig, block: int) -> int:
    """Cache slots for a run that may go all the way to the context's end (cache.capacity)."""
    return cache_capacity(cfg.n_ctx, cfg.n_ctx, 0, block)


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


def check_room(cfg: ModelConfig, lengths, max_new: int, depth: int) -> None:
    """The drafts per round (γ, or a tree's depth) and max_new in range, and a prompt that
    leaves the context at least one token."""
    if not 1 <= depth <= 32:
        raise UserError(f"gamma must be between 1 and 32, got {depth}.")
    if max_new < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {max_new}.")
    longest = int(np.max(np.asarray(lengths)))
    if longest >= cfg.n_ctx:
        raise UserError(f"The prompt is {longest} tokens long but the model's context holds "
                        f"{cfg.n_ctx}, leaving no room to generate; shorten it.")


def check_gamma(drafter: Drafter, gamma: int) -> None:
    """Heads draft one token per head: γ cannot exceed how many they have."""
    most = drafter.max_gamma
    if most is not None and gamma > most:
        raise UserError(f"{drafter.name} has {most} heads, so gamma can be at most {most}; "
                        f"got {gamma}.")


@dataclass(frozen=True, kw_only=True)
class Speculation(Loop):
    """What chain and tree speculation share: the fields, prefill, verify's frame, commit."""

    graphdef: Any  # the target's
    cfg: ModelConfig  # the target's
    drafter: Drafter
    eos_id: int
    capacity: int | None = None  # cache slots (cache.capacity); default: the whole context
    shared: bool = False  # every row holds the same prompt: prefill it once (rounds.share_rows)

    @property
    def slots(self) -> int:
        return self.capacity or full_capacity(self.cfg, self.block)

    def prefill(self, params, dparams, tokens, lengths, key) -> SpecState:
        """Cache the prompt in target and drafter; the last prompt token waits for round 1."""
        B = tokens.shape[0]
        _, hidden, cache, seq = prefill_target(self.graphdef, params, self.cfg, tokens, self.slots)
        dstate = self.drafter.init(dparams, tokens, lengths, hidden, capacity=self.slots)
        return SpecState(seq, lengths, rollback(cache, lengths - 1), dstate,
                         jnp.zeros(B, jnp.int32), jnp.zeros(B, bool), jnp.int32(0), key)

    def verify(self, params, dparams, state: SpecState, drafted, sp: SamplingParams, max_new):
        """One target pass over the drafts, the verify rule (`judge`), and the commit."""
        j = self.judge(params, state, drafted, sp)
        B = j.drafts.shape[0]
        # The appended tokens: the accepted drafts x₁..x_n, then the residual/bonus token at n.
        emitted = jnp.concatenate([j.drafts, jnp.zeros((B, 1), jnp.int32)], axis=1)
        emitted = emitted.at[jnp.arange(B), j.verdict.n_accepted].set(j.verdict.token)
        new_state, n_emit = self.commit(state, j.cache, j.verdict.n_accepted, emitted, max_new)
        dstate = self.drafter_commit(dparams, state.dstate, j.hidden, emitted, state.length - 1,
                                     new_state.length)
        return new_state._replace(dstate=dstate), self.record(state, drafted, j, emitted, n_emit)

    def commit(self, state: SpecState, cache: KVCache, n_accepted, emitted, max_new):
        """Append [x₁..x_n, token] (`emitted`, (B, W)) and roll the target cache back.
        Returns (state, tokens appended per row). A row is done after EOS, after max_new
        tokens, or once it holds n_ctx tokens — the same three stops as autoregressive decoding.

        `cache` holds the accepted path in slots start.. (a chain's drafts are there; a tree's
        are moved there first, trees/loop.py)."""
        W = emitted.shape[1]
        live = ~state.done
        limit = jnp.minimum(max_new - state.n_new, self.cfg.n_ctx - state.length)  # (B,)
        n_emit, hit_eos = emit_count(n_accepted, emitted, limit, self.eos_id)
        n_emit = jnp.where(live, n_emit, 0)
        # Write all W slots (fixed shape); those past the new length are junk until overwritten.
        # subtle: a finished row may sit too close to the end for W slots, where the write would
        # be clamped onto committed tokens — so it writes back what is already there.
        block_out = jnp.where(live[:, None], emitted, take_rows(state.seq, state.length, W))
        write = lambda row, e, s: jax.lax.dynamic_update_slice(row, e, (s,))
        seq = jax.vmap(write)(state.seq, block_out, state.length)
        length = state.length + n_emit
        n_new = state.n_new + n_emit
        done = state.done | (live & (hit_eos | (n_new >= max_new) | (length >= self.cfg.n_ctx)))
        cache = rollback(cache, jnp.where(live, length - 1, state.cache.length))
        return state._replace(seq=seq, length=length, cache=cache, n_new=n_new, done=done,
                              step=state.step + 1), n_emit


@dataclass(frozen=True, kw_only=True)
class Speculator(Speculation):
    """Chain speculation: γ drafts in a row, verified in one pass over γ+1 tokens.

        spec = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=4, eos_id=eos)
        state, stats = spec.run(params, dparams, tokens, lengths, key, sp, max_new=32)
    """

    gamma: int

    @property
    def depth(self) -> int:  # the most drafts one round can accept
        return self.gamma

    @property
    def block(self) -> int:  # tokens in one verify pass
        return self.gamma + 1

    def check(self, lengths, max_new: int) -> None:
        check_room(self.cfg, lengths, max_new, self.gamma)
        check_gamma(self.drafter, self.gamma)

    def draft(self, dparams, state: SpecState, sp: SamplingParams):
        """The drafter proposes γ tokens (or, if its drafts vary, up to γ) with their laws."""
        key, _ = round_keys(state.key, state.step)
        d = self.drafter
        drafts, q, dstate = d.propose(dparams, state.dstate, state.seq, state.length, key, sp,
                                      self.gamma)
        n_draft = d.draft_length(state.seq, state.length, self.gamma)
        return Drafted(drafts, q, n_draft), state._replace(dstate=dstate)

    def judge(self, params, state: SpecState, drafted: Drafted, sp: SamplingParams) -> Judged:
        """ONE target pass over [last, x₁..x_γ] -> p₁..p_{γ+1}; the verify rule on them."""
        live = ~state.done
        n_draft = jnp.minimum(drafted.n_draft, room_for_drafts(self.cfg, state.length))
        last = take_rows(state.seq, state.length - 1, 1)  # (B, 1)
        block = jnp.concatenate([last, drafted.drafts], axis=1)  # (B, γ+1)
        positions = (state.length - 1)[:, None] + jnp.arange(self.gamma + 1)  # (B, γ+1)
        logits, hidden, cache = target_pass(self.graphdef, params, block, positions, state.cache,
                                            n_draft, live, self.drafter.varies_length)
        made = state.n_new[:, None] + jnp.arange(self.gamma + 1)  # tokens before each p
        p = sampling_probs(logits, sp, made)  # (B, γ+1, V)
        _, key = round_keys(state.key, state.step)
        return Judged(p, self.rule(key, drafted, p, n_draft), drafted.drafts, hidden, cache)

    def rule(self, key, drafted: Drafted, p, n_draft) -> Verdict:
        """The verify rule (verify.py) on every row's drafts, against the law they came from."""
        return verify(key, drafted.drafts, drafted.q, p, n_draft)

    def drafter_commit(self, dparams, dstate, hidden, emitted, start, length):
        return self.drafter.commit(dparams, dstate, hidden, emitted, start, length)

    def record(self, state: SpecState, drafted: Drafted, j: Judged, emitted, n_emit) -> StepTrace:
        """The round as a StepTrace (XLA drops it in the fused loop, where nothing reads it)."""
        v, p, B = j.verdict, j.p, emitted.shape[0]
        n_draft = jnp.minimum(drafted.n_draft, room_for_drafts(self.cfg, state.length))
        q_token = drafted.q[jnp.arange(B), jnp.minimum(v.n_accepted, self.gamma - 1), v.token]
        return StepTrace(~state.done, state.length, drafted.drafts, n_draft, v, n_emit, emitted,
                         top_tokens(drafted.q), top_tokens(p), top_tokens(v.extra_probs),
                         at(v.extra_probs, v.token), p[jnp.arange(B), v.n_accepted, v.token],
                         jnp.where(v.is_bonus, 0.0, q_token))

    @staticmethod
    def counts(trace: StepTrace):
        """(live, drafts proposed, accepted, all accepted) for rounds.RoundStats."""
        return trace.live, trace.n_draft, trace.verdict.n_accepted, trace.verdict.is_bonus
