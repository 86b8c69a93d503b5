"""Speculative decoding with token trees: grow a tree of drafts, verify it in ONE target pass.

A tree round is the round of speculative.py with two of its parts replaced:

1. the proposer (`TreeProposer`) fills a static `Tree` (tree.py) depth by depth (grow.py). Each node's
            children come from the drafter's law at that node, either `top` (its k most likely
            tokens, deterministic, so each child is a point mass: Medusa's trees) or `sample`
            (k i.i.d. draws from that law: SpecInfer's trees);
2. the judge (`TreeJudge`) has the target score every node at once (the block is the tree's tokens, the mask its
            ancestor matrix, positions start + depth); tree.verify_tree accepts at most one
            child per level (recursive rejection sampling) and draws the correction or bonus
            token; the accepted path's K/V move to consecutive slots (tree.compact_path), so
            the cache looks as if the path had been a chain.

The round body and `commit` are the chain's (speculative.Speculation): the accepted path is
appended exactly as a chain's accepted drafts are. Statistics count rounds by accepted depth.
What this file deliberately leaves out: dynamic trees that reshape per round (EAGLE-2).
"""

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from nanospec.drafters import Drafter
from nanospec.errors import UserError
from nanospec.model import forward
from nanospec.proposers import Proposer
from nanospec.rounds import prob_of, top_tokens
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.speculative import Judged, SpecState, Speculation
from nanospec.trees.grow import Grown, commit_tree, grows_trees, propose_tree
from nanospec.trees.trace import events_from_tree_step
from nanospec.trees.tree import Tree, compact_path, gather_path, tree_positions, verify_tree

RANKING = SamplingParams.make(1.0)  # top-k siblings are ranked by the drafter's plain softmax


class TreeTrace(NamedTuple):
    """Everything one tree round decided, as fixed-shape arrays (trees/trace.py reads them)."""

    live: jax.Array  # (B,) bool: the row took part in this round
    start: jax.Array  # (B,) int32: committed length before the round
    tokens: jax.Array  # (B, N): node 0 is the last committed token, the rest were drafted
    q_x: jax.Array  # (B, N) each node's probability under the law it was drafted from
    p_x: jax.Array  # (B, N) ... and under the target's law at its parent
    path: jax.Array  # (B, D+1) accepted nodes from the root (tree.TreeVerdict)
    n_accepted: jax.Array  # (B,) accepted drafted nodes = depth reached
    token: jax.Array  # (B,) the correction or bonus token
    is_bonus: jax.Array  # (B,) the path ended at a leaf: `token` was drawn from p there
    n_emitted: jax.Array  # (B,) tokens appended (cut short by EOS, max_new or the context)
    emitted: jax.Array  # (B, D+1) the appended tokens (valid up to n_emitted)
    extra_top: tuple  # (ids, probs) each (B, TOP): the law `token` was drawn from
    token_prob: jax.Array  # (B,) `token`'s probability under that law
    token_p: jax.Array  # (B,) ... and under the target's p at the node where the path stopped
    n_draft: jax.Array  # (B,) int32: drafts proposed per row, counted as the tree's depth

    def counts(self):
        """(live, drafts proposed, accepted, all accepted, cached) for rounds.RoundStats."""
        return self.live, self.n_draft, self.n_accepted, self.is_bonus, jnp.zeros_like(self.live)


@dataclass(frozen=True)
class TreeProposer(Proposer):
    """The drafter grows `tree` every round, with `top`-k or sampled siblings."""

    drafter: Drafter
    tree: Tree
    top: bool = True

    @property
    def depth(self) -> int:  # the most drafts one round can accept
        return self.tree.max_depth

    @property
    def block(self) -> int:
        return self.tree.size + 1

    def check(self) -> None:
        if not grows_trees(self.drafter):
            raise UserError(
                f"{self.drafter.name} proposes a single continuation; token trees "
                f"need a drafter with a law at every node (draft, medusa, eagle or mtp)."
            )
        most, depth = self.drafter.max_gamma, self.tree.max_depth
        if most is not None and depth > most:
            raise UserError(
                f"{self.drafter.name} has {most} heads, so a tree can be at most "
                f"{most} deep; this one is {depth}."
            )

    def settings(self) -> dict:
        return {
            "tree": list(self.tree.parents),
            "tree_nodes": self.tree.size,
            "siblings": "top" if self.top else "sample",
        }

    def init(self, dparams, tokens, lengths, hidden, capacity):
        return self.drafter.init(dparams, tokens, lengths, hidden, capacity=capacity)

    def propose(self, dparams, pstate, seq, length, key, sp: SamplingParams):
        """The drafter grows the tree. subtle: `top` siblings are point masses, so WHICH tokens
        they are is free (exactness only needs node_q to be what was used: one-hot). Ranked
        by the sampling law, greedy decoding would make every sibling after the first an
        arbitrary zero-probability token (the law is one-hot), and top-k / top-p cuts would
        tie the tail at zero the same way; ranked by the drafter's softmax at T = 1 (the same
        order where the sampling law is not zero), the second child is the drafter's real
        second guess (before this, greedy 2,1,1,1 trees accepted exactly what a γ = 4 chain did:
        docs/results.md, "Why the code is shaped as it is")."""
        tokens, node_q, pstate = propose_tree(
            self.drafter,
            dparams,
            pstate,
            seq,
            length,
            key,
            RANKING if self.top else sp,
            self.tree,
            self.top,
        )
        return Grown(tokens, node_q), pstate

    def update(self, dparams, pstate, hidden, emitted, start, length):
        return commit_tree(self.drafter, dparams, pstate, hidden, emitted, start, length)


@dataclass(frozen=True)
class TreeJudge:
    """The target's side of a tree round: one pass over the whole tree, the walk, and the
    accepted path's compaction."""

    tree: Tree

    def __call__(self, loop, params, state: SpecState, grown: Grown, sp, key) -> Judged:
        start = state.length - 1  # the root's position (and slot: the cache holds length - 1)
        logits, hidden, cache = forward(
            loop.graphdef,
            params,
            grown.tokens,
            tree_positions(start, self.tree),
            state.cache,
            block_mask=jnp.asarray(self.tree.ancestor_mask),
        )
        made = state.n_new[:, None] + jnp.asarray(self.tree.depth)  # tokens before each p
        p = sampling_probs(logits, sp, made)  # (B, N, V)
        v = verify_tree(key, grown.tokens, grown.node_q, p, self.tree)
        path_tokens = gather_path(grown.tokens, v.path)  # (B, D+1): the root first
        n_draft = jnp.full(start.shape, self.tree.max_depth, jnp.int32)
        return Judged(
            p,
            v,
            path_tokens[:, 1:],
            gather_path(hidden, v.path),
            compact_path(cache, start, v.path, self.tree),
            n_draft,
        )

    def record(self, loop, state: SpecState, grown: Grown, j: Judged, emitted, n_emit) -> TreeTrace:
        """The round as a TreeTrace (XLA drops it in the fused loop, where nothing reads it)."""
        v, p, B = j.verdict, j.p, emitted.shape[0]
        rows, parents = jnp.arange(B)[:, None], jnp.maximum(jnp.asarray(self.tree.parents), 0)
        stop = jnp.take_along_axis(v.path, v.n_accepted[:, None], axis=1)[:, 0]  # (B,) last node
        q_x = jnp.take_along_axis(grown.node_q, grown.tokens[..., None], axis=2)[..., 0]
        return TreeTrace(
            ~state.done,
            state.length,
            grown.tokens,
            q_x,
            p[rows, parents[None, :], grown.tokens],
            v.path,
            v.n_accepted,
            v.token,
            v.is_bonus,
            n_emit,
            emitted,
            top_tokens(v.extra_probs),
            prob_of(v.extra_probs, v.token),
            p[jnp.arange(B), stop, v.token],
            j.n_draft,
        )

    def events(self, loop, trace: TreeTrace, tok, round_idx: int, seconds) -> list[dict]:
        return events_from_tree_step(trace, tok, round_idx, self.tree, seconds)


@dataclass(frozen=True, kw_only=True)
class TreeSpeculator(Speculation):
    """Token-tree speculation: `tree` drafted per round, `top`-k or sampled siblings.

    subtle: near the context's end the tree keeps its full depth; tokens it accepts past the
    end are cut like those past max_new (Speculation.commit), which leaves the law of what is
    kept unchanged. Its block (the tree from the root's slot, in the target and in the draft
    model) fits in tree.size + 1 slack slots.
    """

    tree: Tree
    top: bool = True

    @property
    def proposer(self) -> TreeProposer:
        return TreeProposer(self.drafter, self.tree, self.top)

    @property
    def judge(self) -> TreeJudge:
        return TreeJudge(self.tree)
