"""Speculative speculative decoding (SSD): draft the next round while this one is verified.

Kumar, Dao & May, "Speculative Speculative Decoding" (ICLR 2026). In ordinary speculation the
drafter waits while the target verifies. SSD keeps it busy: while the target judges round T,
the drafter guesses how round T will end and drafts round T+1 for each guess. A round with γ
drafts ends in one of (γ+1)·V *outcomes* (k, t*): k drafts accepted, then one token t* — the
residual's correction when k < γ (never the rejected x_{k+1}: the residual has no mass there),
the bonus when k = γ. The guesses and their drafts form the *speculation cache*.

In the round of speculative.py, SSD is a proposer and a hook; the judge is the chain's:

1. the proposer (`SSDProposer.propose`): the round's drafts come from the cache when the last
   round's outcome is in it (a hit: no drafting latency at all), else from a backup drafter
   (a miss): the draft model just in time (`neural`) or prompt lookup (`fast`);
2. the judge: ONE target pass and the ordinary verify rule (verify.py), against the law q each
   draft was actually drawn from — while, independently, the hook (`SSDProposer.after_round`,
   which calls `build`) fills the cache for the next round: for each k, the F_k tokens the
   draft model finds likeliest at position k+1 (x_{k+1} left out), and for each such branch
   (k, t*) γ drafts from the context [committed, x₁..x_k, t*]. All branches of all rows are
   one batch.

Why it stays exact: which branches are cached depends only on the draft side (the committed
text, this round's drafts, the draft key), never on the target's randomness in this round; so
given the outcome, a cached branch's drafts are still a fresh sample from the law q stored with
them, and the verify rule is exact for drafts from any law it is told (verify.py). A miss's
backup drafts are verified against their own law the same way. Nothing in the rule changes.

How many t* to cache per k (the fan-out), and the settings users give: ssd/fanout.py.

Saguaro sampling (the paper's sampler, "sampler_x" in its code): draw each draft from
q' ∝ q with its F+1 likeliest tokens scaled by C ∈ (0, 1]. The draft then proposes the tokens
the cache will guess a little less often, so when a draft is rejected the residual
max(0, p − q') puts more mass on them: more hits, for some acceptance. The drafts are verified
against q' — the law they came from — so this too is exact. C = 1 is plain sampling.

On one device everything runs in sequence (exact, no overlap): the cache costs Σ F_k times a
round's drafting. Its payoff needs the drafter on hardware of its own, where `build` runs
while the target verifies.

What this file deliberately leaves out: EAGLE as the primary drafter, a fan-out that differs
after hits and misses (the reference code's fan_out_list_miss), trees.
"""

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import KVCache, repeat_rows, rollback, run_if
from nanospec.drafters import DraftModel, PromptLookup, take_rows
from nanospec.errors import UserError
from nanospec.model import forward
from nanospec.proposers import Proposal, Proposer
from nanospec.rounds import StepTrace, round_keys
from nanospec.sampling import SamplingParams, fold_keys
from nanospec.speculative import SpecState, Speculator
from nanospec.ssd.fanout import parse_fanout
from nanospec.trace import SCHEMA

BACKUPS = ("neural", "fast")


class SSDState(NamedTuple):
    """The drafter's state in SSD: its own KV cache and the speculation cache."""

    draft: KVCache  # the draft model's cache (DraftModel's invariant)
    t: jax.Array  # (B, K) int32: branch j guesses outcome (branch_k[j], t[b, j])
    drafts: jax.Array  # (B, K, γ) int32: the drafts for the round after that outcome
    q: jax.Array  # (B, K, γ, V) the law each of them was drawn from
    outcome: jax.Array  # (B, 2) int32: how the last round ended, (k, t*); (-1, -1) before any


class Ahead(NamedTuple):
    """What a round's hook cached for the NEXT round (a StepTrace's `ahead`)."""

    branch_k: jax.Array  # (K,) the k each branch guesses ...
    branch_t: jax.Array  # (B, K) ... and its t*


def saguaro(q: jax.Array, f, c: float, f_max: int | None = None) -> jax.Array:
    """q with its f+1 likeliest tokens scaled by c, renormalised: the law drafts are drawn from.

    The f+1: the draft itself and the f corrections the cache will guess. `f` may be traced
    (the fan-out of the draft's position); `f_max` (default f) bounds it. Worked example:
    q = [.5 .3 .2], f = 0, c = .5 -> [.25 .3 .2] / .75 = [.333 .4 .267].

    >>> [round(float(x), 3) for x in saguaro(jnp.array([.5, .3, .2]), 0, .5)]
    [0.333, 0.4, 0.267]
    """
    V = q.shape[-1]
    width = min((f if f_max is None else f_max) + 1, V)
    _, top = jax.lax.top_k(q, width)  # (..., width): the likeliest first
    ranked = jnp.arange(width) <= f  # which of them are scaled
    scaled = jnp.any(jax.nn.one_hot(top, V, dtype=bool) & ranked[:, None], axis=-2)  # (..., V)
    q = jnp.where(scaled, c * q, q)
    return q / jnp.sum(q, axis=-1, keepdims=True)


def outcome_keys(
    logits: jax.Array, drafts: jax.Array, branch_k: np.ndarray, branch_rank: np.ndarray
) -> jax.Array:
    """The t* of every branch: at position k+1 the draft model's likeliest tokens, x_{k+1} left
    out for k < γ (a rejected draft is never its own correction), ranked by logits.

    logits (B, γ+1, V) the draft model over [last, x₁..x_γ]; drafts (B, γ). Branch j caches
    the (branch_rank[j]+1)-th likeliest token at k = branch_k[j]. Ranking by logits, not by the
    sampling law, keeps the order at temperature 0, where the law is one-hot.
    """
    B, G1, V = logits.shape
    out = jnp.arange(V) == jnp.pad(drafts, ((0, 0), (0, 1)), constant_values=-1)[..., None]
    scores = jnp.where(out, -jnp.inf, logits)  # (B, γ+1, V)
    _, ids = jax.lax.top_k(scores, int(branch_rank.max()) + 1)  # (B, γ+1, F_max)
    return ids[:, branch_k, branch_rank]  # (B, K)


def lookup(branch_k: np.ndarray, t: jax.Array, outcome: jax.Array):
    """Is the last outcome (k, t*) cached, and in which branch? -> (hit (B,), branch (B,))."""
    match = (jnp.asarray(branch_k)[None, :] == outcome[:, :1]) & (t == outcome[:, 1:])  # (B, K)
    return jnp.any(match, axis=1), jnp.argmax(match, axis=1)


@dataclass(frozen=True)
class SSDProposer(Proposer):
    """Drafts from the speculation cache, or the backup on a miss; its hook builds the next
    round's cache. Its state is an SSDState."""

    drafter: DraftModel  # the primary drafter: it drafts the cache (and a neural backup)
    gamma: int
    fanout: tuple[int, ...]  # F_0..F_γ: tokens t* cached for each k accepted
    saguaro_c: float = 1.0  # C: scale of the F+1 likeliest draft tokens (1: plain sampling)
    backup: str = "neural"  # a miss drafts with the draft model, or "fast": prompt lookup
    vocab_size: int = 0
    predrafts = True

    def settings(self) -> dict:
        return {
            "gamma": self.gamma,
            "fanout": list(self.fanout),
            "saguaro_c": self.saguaro_c,
            "backup": self.backup,
        }

    def kv_models(self) -> tuple:  # its own draft cache, and one per branch
        return self.drafter.kv_models() * (1 + len(self.branch_k))

    @property
    def depth(self) -> int:
        return self.gamma

    @property
    def block(self) -> int:
        """Slots past the committed length a round may write: a branch after k = γ drafts γ
        more beyond [x₁..x_γ, t*] (cache.capacity's slack)."""
        return 2 * self.gamma + 1

    def check(self) -> None:
        if len(self.fanout) != self.gamma + 1 or min(self.fanout) < 0 or sum(self.fanout) < 1:
            raise UserError(
                f"The fan-out needs one count per k = 0..{self.gamma}, each at "
                f"least 0 and one branch in all; got {list(self.fanout)}."
            )
        if max(self.fanout) > self.vocab_size - 1:
            raise UserError(
                f"A fan-out of {max(self.fanout)} exceeds the {self.vocab_size - 1} "
                f"tokens a correction can be."
            )
        if not 0 < self.saguaro_c <= 1:
            raise UserError(f"Saguaro's C must be in (0, 1], got {self.saguaro_c}.")
        if self.backup not in BACKUPS:
            raise UserError(f"Unknown backup {self.backup!r}; choose neural or fast.")

    @property
    def branch_k(self) -> np.ndarray:  # (K,) static: the k each branch guesses
        return np.repeat(np.arange(self.gamma + 1), self.fanout)

    @property
    def branch_rank(self) -> np.ndarray:  # (K,) static: 0 for the likeliest t* at its k, ...
        return np.concatenate([np.arange(f) for f in self.fanout]).astype(int)

    def tilt(self, q, i):
        """Saguaro's law for draft i (its correction is cached F_i wide), or q itself at C = 1."""
        if self.saguaro_c == 1.0:
            return q
        return saguaro(q, jnp.asarray(self.fanout)[i], self.saguaro_c, max(self.fanout))

    def init(self, dparams, tokens, lengths, hidden, capacity) -> SSDState:
        """The draft model's cache, and an empty speculation cache (round 1 always misses)."""
        B, K, V = tokens.shape[0], len(self.branch_k), self.vocab_size
        return SSDState(
            self.drafter.init(dparams, tokens, lengths, hidden, capacity=capacity),
            jnp.full((B, K), -1, jnp.int32),
            jnp.zeros((B, K, self.gamma), jnp.int32),
            jnp.zeros((B, K, self.gamma, V), jnp.float32),
            jnp.full((B, 2), -1, jnp.int32),
        )

    def propose(self, dparams, s: SSDState, seq, length, key, sp: SamplingParams):
        """The cached branch that matches the last outcome, or the backup's drafts on a miss."""
        B = seq.shape[0]
        hit, branch = lookup(self.branch_k, s.t, s.outcome)
        rows = jnp.arange(B)
        cached = (s.drafts[rows, branch], s.q[rows, branch], s.draft)

        def backup(carry):  # only rows that missed keep these
            drafts, q, cache = carry
            if self.backup == "neural":
                d, dq, cache = self.drafter.propose(
                    dparams, cache, seq, length, fold_keys(key, 0), sp, self.gamma, self.tilt
                )
            else:
                d, dq, _ = PromptLookup(self.vocab_size, skip_unmatched=False).propose(
                    (), (), seq, length, key, sp, self.gamma
                )
            return (jnp.where(hit[:, None], drafts, d), jnp.where(hit[:, None, None], q, dq), cache)

        # subtle: the backup runs only if some row missed (run_if); a neural backup also
        # rewrites the draft cache from length − 2 on, which `build` re-reads anyway.
        drafts, q, cache = run_if(~jnp.all(hit), backup, cached)
        n_draft = jnp.full((B,), self.gamma, jnp.int32)
        return Proposal(drafts, q, n_draft, hit), s._replace(draft=cache)

    def build(self, dparams, state: SpecState, proposal: Proposal, sp: SamplingParams) -> SSDState:
        """The speculation cache for the next round, from the draft side alone (no target
        output): one draft pass over [last, x₁..x_γ] picks the outcomes, then every branch
        drafts γ tokens from its own context, all branches of all rows in one batch."""
        key = fold_keys(round_keys(state.key, state.step)[0], 1)  # not the backup's
        s, B, G = state.dstate, *proposal.drafts.shape
        k, K = self.branch_k, len(self.branch_k)
        last = take_rows(state.seq, state.length - 1, 1)  # (B, 1)
        block = jnp.concatenate([last, proposal.drafts], axis=1)  # (B, γ+1)
        positions = (state.length - 1)[:, None] + jnp.arange(G + 1)  # (B, γ+1)
        d = self.drafter
        logits, _, cache = forward(
            d.graphdef, dparams, block, positions, rollback(s.draft, state.length - 1)
        )
        t = outcome_keys(logits, proposal.drafts, k, self.branch_rank)  # (B, K)
        # Branch j's context: the committed tokens, x₁..x_k, then t* at position length + k.
        write = lambda row, x, start: jax.lax.dynamic_update_slice(row, x, (start,))
        seq = jax.vmap(write)(state.seq, proposal.drafts, state.length)  # (B, S)
        seq = jnp.repeat(seq, K, axis=0)  # (B·K, S)
        where = (state.length[:, None] + jnp.asarray(k)[None, :]).reshape(-1)  # (B·K,)
        seq = seq.at[jnp.arange(B * K), where].set(t.reshape(-1))
        branch_cache = repeat_rows(cache, K)
        drafts, q, _ = d.propose(
            dparams, branch_cache, seq, where + 1, key, sp.repeat(K), G, self.tilt
        )
        V = q.shape[-1]
        return s._replace(draft=cache, t=t, drafts=drafts.reshape(B, K, G), q=q.reshape(B, K, G, V))

    def after_round(
        self, dparams, before: SpecState, proposal: Proposal, sp, state: SpecState, trace: StepTrace
    ):
        """The hook: the next round's cache, built from what the judge saw (`before`) and the
        drafts — never from the verdict, which only says which branch the next round looks
        up (the outcome). That independence is what lets the two run at once (devices.py)."""
        cache = self.build(dparams, before, proposal, sp)
        v = trace.verdict
        outcome = jnp.stack([v.n_accepted, v.token], axis=1)
        return (
            state._replace(dstate=cache._replace(outcome=outcome)),
            trace._replace(ahead=Ahead(jnp.asarray(self.branch_k), cache.t)),
        )

    def events(self, trace: StepTrace, tok, round_idx: int, events: list[dict]) -> list[dict]:
        """Each row's round starts with an `ssd` event: where its drafts came from, the
        outcome the next round looks up, and the branches cached for it."""
        hit, branch_t = np.asarray(trace.cached), np.asarray(trace.ahead.branch_t)
        branch_k, v = np.asarray(trace.ahead.branch_k), trace.verdict
        k, token = np.asarray(v.n_accepted), np.asarray(v.token)
        out, seen = [], set()
        for e in events:
            b = e["row"]
            if b not in seen:  # the row's first event: say where its drafts came from
                seen.add(b)
                out.append(
                    {
                        "schema": SCHEMA,
                        "round": round_idx,
                        "row": b,
                        "type": "ssd",
                        "hit": bool(hit[b]),
                        "source": "cache" if hit[b] else "backup",
                        "outcome": [int(k[b]), int(token[b])],
                        "cache": [
                            [int(j), int(x), tok.token_str(int(x))]
                            for j, x in zip(branch_k, branch_t[b])
                        ],
                    }
                )
            out.append(e)
        return out


@dataclass(frozen=True, kw_only=True)
class SSDSpeculator(Speculator):
    """Chain speculation whose next round is drafted during this one's verify: the chain's
    judge, SSD's proposer, and its hook.

        ssd = SSDSpeculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=4,
                            eos_id=eos, fanout=(2, 2, 2, 2, 2))  # F = 2 for k = 0..4
        state, stats = ssd.run(params, dparams, tokens, lengths, key, sp, max_new=32)
    """

    drafter: DraftModel
    fanout: tuple[int, ...]  # F_0..F_γ: tokens t* cached for each k accepted
    saguaro_c: float = 1.0  # C: scale of the F+1 likeliest draft tokens (1: plain sampling)
    backup: str = "neural"  # a miss drafts with the draft model, or "fast": prompt lookup

    def __post_init__(self):
        self.proposer.check()  # a bad fan-out is refused when the loop is made

    @property
    def proposer(self) -> SSDProposer:
        return SSDProposer(
            self.drafter, self.gamma, self.fanout, self.saguaro_c, self.backup, self.cfg.vocab_size
        )

    @property
    def hooks(self) -> tuple:
        return (self.proposer,)

    @property
    def branch_k(self) -> np.ndarray:
        return self.proposer.branch_k

    @property
    def branch_rank(self) -> np.ndarray:
        return self.proposer.branch_rank


def ssd_loop(drafter: DraftModel, dparams, fixed: dict, options) -> SSDSpeculator:
    """SSD's loop builder for the method table (methods.py): γ and SSD's settings from
    `options`; a geometric fan-out reads its temperature."""
    o = options.ssd
    fanout = parse_fanout(o.fanout, options.gamma, options.temperature)
    return SSDSpeculator(
        drafter=drafter,
        gamma=options.gamma,
        fanout=fanout,
        saguaro_c=o.saguaro_c,
        backup=o.backup,
        **fixed,
    )
