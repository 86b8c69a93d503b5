"""The speculative loop: draft γ tokens, verify them in one target pass, commit, repeat.

Read `reference.py` first: the same algorithm as one plain Python loop. This file is the
fast version. A round is put together from parts, so that a new way to draft is a plug-in:

- the *proposer* drafts (step 1 of the README's five) and learns from each verdict what the
  target saw (proposers.py: `Chain` drafts γ in a row with any drafter; trees/loop.py grows
  token trees, ssd/ pre-drafts from a speculation cache);
- the *judge* runs ONE target pass over the proposal and applies the verify rule to it
  (steps 2–5: p₁..p_{γ+1}, accept or reject each draft, the residual's or the bonus token).
  `ChainJudge` holds the rule (verify.py) as a value, so a test can swap in a broken one;
- *hooks* run after the round's commit (SSD builds the next round's cache in one, ssd/).

`Speculation.draft` and `Speculation.settle` below are the round body, written once for every
method; `Speculator` is chain speculation assembled from those parts. `prefill`, `step`,
`run` (fused `lax.while_loop`) and `rounds` (step by step, traced) come from rounds.Loop.

In vLLM's words, a round emits the *accepted* drafts x₁..x_n, then one more token: the
*recovered* token (drawn from the residual at the first rejection) or the *bonus* token (drawn
from p_{γ+1} when every draft was accepted).

Static vs traced — what recompiles: the loop object's fields (target and drafter graph and
config, γ, EOS, cache capacity), batch size and prompt bucket are static; tokens, lengths,
max_new_tokens, the sampling params and the key are traced (changing temperature never
recompiles).

Cache invariant: the target's KV cache holds every committed token except the last one, which
leads the next verify block; so after a round the cache length is simply `length - 1` and the
KV of rejected drafts sits in stale slots that no query can see (cache.py).
"""

from collections.abc import Callable
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
from nanospec.proposers import Chain, Proposal
from nanospec.rounds import Loop, StepTrace, prefill_target, prob_of, round_keys, top_tokens
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.trace import events_from_step
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


class Judged(NamedTuple):
    """What one target pass and the verify rule decided, along the accepted path."""

    p: jax.Array  # (B, W, V) the target's laws over the verified block
    verdict: Any  # verify.Verdict (a chain) or trees.tree.TreeVerdict
    drafts: jax.Array  # (B, depth) the drafts along the path (the first n_accepted count)
    hidden: jax.Array  # (B, depth+1, C) the target's features along [last, path...]
    cache: KVCache  # the target's cache with the path in slots start.. (rolled back by commit)
    n_draft: jax.Array  # (B,) int32: drafts judged (a chain's cut to the room left: at most γ)


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
        raise UserError(
            f"The prompt is {longest} tokens long but the model's context holds "
            f"{cfg.n_ctx}, leaving no room to generate; shorten it."
        )


def exact_rule(key, proposal: Proposal, p, n_draft) -> Verdict:
    """The verify rule (verify.py) on every row's drafts, each against the law it was drawn
    from — whoever proposed them, however (a cache hit or a miss, a model or a lookup)."""
    return verify(key, proposal.drafts, proposal.q, p, n_draft)


@dataclass(frozen=True)
class ChainJudge:
    """The target's side of a chain round: ONE pass over [last, x₁..x_γ] -> p₁..p_{γ+1}, then
    `rule` on them. The rule is a value: tests/statistical/test_ssd.py and lesson 18 judge
    with a broken one to show that the law tests catch it."""

    rule: Callable = exact_rule  # (key, proposal, p, n_draft) -> verify.Verdict

    def __call__(self, loop, params, state: SpecState, proposal: Proposal, sp, key) -> Judged:
        live = ~state.done
        n_draft = jnp.minimum(proposal.n_draft, room_for_drafts(loop.cfg, state.length))
        width = proposal.drafts.shape[1] + 1
        last = take_rows(state.seq, state.length - 1, 1)  # (B, 1)
        block = jnp.concatenate([last, proposal.drafts], axis=1)  # (B, γ+1)
        positions = (state.length - 1)[:, None] + jnp.arange(width)  # (B, γ+1)
        logits, hidden, cache = target_pass(
            loop.graphdef,
            params,
            block,
            positions,
            state.cache,
            n_draft,
            live,
            loop.drafter.varies_length,
        )
        made = state.n_new[:, None] + jnp.arange(width)  # tokens before each p
        p = sampling_probs(logits, sp, made)  # (B, γ+1, V)
        verdict = self.rule(key, proposal, p, n_draft)
        return Judged(p, verdict, proposal.drafts, hidden, cache, n_draft)

    def record(
        self, loop, state: SpecState, proposal: Proposal, j: Judged, emitted, n_emit
    ) -> StepTrace:
        """The round as a StepTrace (XLA drops it in the fused loop, where nothing reads it)."""
        v, p, B, G = j.verdict, j.p, emitted.shape[0], proposal.drafts.shape[1]
        q_token = proposal.q[jnp.arange(B), jnp.minimum(v.n_accepted, G - 1), v.token]
        live = ~state.done
        return StepTrace(
            live,
            state.length,
            proposal.drafts,
            j.n_draft,
            v,
            n_emit,
            emitted,
            top_tokens(proposal.q),
            top_tokens(p),
            top_tokens(v.extra_probs),
            prob_of(v.extra_probs, v.token),
            p[jnp.arange(B), v.n_accepted, v.token],
            jnp.where(v.is_bonus, 0.0, q_token),
            live & proposal.cached,
        )

    def events(self, loop, trace: StepTrace, tok, round_idx: int, seconds) -> list[dict]:
        return events_from_step(trace, tok, round_idx, seconds)


@dataclass(frozen=True, kw_only=True)
class Speculation(Loop):
    """The round, written once: a proposer, a judge and post-round hooks put together.

    A subclass says which parts it is made of — `proposer`, `judge` and (if any) `hooks`,
    each a static value — and nothing else: see `Speculator` below, trees/loop.py, ssd/.
    """

    graphdef: Any  # the target's
    cfg: ModelConfig  # the target's
    drafter: Drafter
    eos_id: int
    capacity: int | None = None  # cache slots (cache.capacity); default: the whole context
    shared: bool = False  # every row holds the same prompt: prefill it once (rounds.share_rows)

    @property
    def hooks(self) -> tuple:
        """What runs after the round's commit: each hook's `after_round(dparams, before,
        proposal, sp, state, trace) -> (state, trace)`, `before` the state the judge saw, and
        its `events(trace, tok, round_idx, events) -> events`. None here; SSD builds its next
        cache in one (ssd/loop.py)."""
        return ()

    @property
    def depth(self) -> int:  # the most drafts one round can accept
        return self.proposer.depth

    @property
    def block(self) -> int:  # slots past the committed length one round may write
        return self.proposer.block

    @property
    def cache_size(self) -> int:  # positions in every KV cache of the run (serving: per row)
        return self.capacity or full_capacity(self.cfg, self.block)

    @property
    def predrafts(self) -> bool:
        return self.proposer.predrafts

    def settings(self) -> dict:
        return self.proposer.settings()

    def kv_models(self) -> tuple:
        return (self.cfg, *self.proposer.kv_models())

    def check(self, lengths, max_new: int) -> None:
        check_room(self.cfg, lengths, max_new, self.depth)
        self.proposer.check()

    def prefill(self, params, dparams, tokens, lengths, key) -> SpecState:
        """Cache the prompt in target and proposer; the last prompt token waits for round 1."""
        B = tokens.shape[0]
        _, hidden, cache, seq = prefill_target(
            self.graphdef, params, self.cfg, tokens, self.cache_size
        )
        dstate = self.proposer.init(dparams, tokens, lengths, hidden, self.cache_size)
        return SpecState(
            seq,
            lengths,
            rollback(cache, lengths - 1),
            dstate,
            jnp.zeros(B, jnp.int32),
            jnp.zeros(B, bool),
            jnp.int32(0),
            key,
        )

    def draft(self, dparams, state: SpecState, sp: SamplingParams):
        """Step 1: the proposer drafts, with this round's draft key (rounds.round_keys)."""
        key, _ = round_keys(state.key, state.step)
        proposal, dstate = self.proposer.propose(
            dparams, state.dstate, state.seq, state.length, key, sp
        )
        return proposal, state._replace(dstate=dstate)

    def judge_and_commit(
        self, params, dparams, state: SpecState, proposal, sp: SamplingParams, max_new
    ):
        """Steps 2–5 and the commit: the judge's ONE target pass and verify rule, then the
        accepted drafts and the recovered or bonus token appended, and the proposer told."""
        _, key = round_keys(state.key, state.step)
        j = self.judge(self, params, state, proposal, sp, key)
        v, B = j.verdict, j.drafts.shape[0]
        emitted = jnp.concatenate([j.drafts, jnp.zeros((B, 1), jnp.int32)], axis=1)
        emitted = emitted.at[jnp.arange(B), v.n_accepted].set(v.token)  # [x₁..x_n, token]
        new, n_emit = self.commit(state, j.cache, v.n_accepted, emitted, max_new)
        dstate = self.proposer.update(
            dparams, state.dstate, j.hidden, emitted, state.length - 1, new.length
        )
        trace = self.judge.record(self, state, proposal, j, emitted, n_emit)
        return new._replace(dstate=dstate), trace

    def settle(self, params, dparams, state: SpecState, proposal, sp: SamplingParams, max_new):
        """The round after its drafts: judge and commit, then run the hooks. -> (state, trace)."""
        new, trace = self.judge_and_commit(params, dparams, state, proposal, sp, max_new)
        for hook in self.hooks:
            new, trace = hook.after_round(dparams, state, proposal, sp, new, trace)
        return new, trace

    def events(self, trace, tok, round_idx: int, seconds=None) -> list[dict]:
        """One round's trace (device arrays) -> its events, row by row (trace.py)."""
        events = self.judge.events(self, trace, tok, round_idx, seconds)
        for hook in self.hooks:
            events = hook.events(trace, tok, round_idx, events)
        return events

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
        return state._replace(
            seq=seq, length=length, cache=cache, n_new=n_new, done=done, step=state.step + 1
        ), n_emit


@dataclass(frozen=True, kw_only=True)
class Speculator(Speculation):
    """Chain speculation: γ drafts in a row, verified in one pass over γ+1 tokens.

    spec = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=4, eos_id=eos)
    state, stats = spec.run(params, dparams, tokens, lengths, key, sp, max_new=32)
    """

    gamma: int
    judge: ChainJudge = ChainJudge()

    @property
    def proposer(self) -> Chain:
        return Chain(self.drafter, self.gamma)
