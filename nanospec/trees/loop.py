"""Speculative decoding with token trees: grow a tree of drafts, verify it in ONE target pass.

A tree round is a chain round (speculative.py) with two steps replaced:

1. `draft`: the drafter fills a static `Tree` (tree.py) depth by depth (grow.py). Each node's
            children come from the drafter's law at that node, either `top` (its k most likely
            tokens, deterministic, so each child is a point mass: Medusa's trees) or `sample`
            (k i.i.d. draws from that law: SpecInfer's trees);
2. `judge`: the target scores every node at once (the block is the tree's tokens, the mask its
            ancestor matrix, positions start + depth); tree.verify_tree accepts at most one
            child per level (recursive rejection sampling) and draws the correction or bonus
            token; the accepted path's K/V move to consecutive slots (tree.compact_path), so
            the cache looks as if the path had been a chain.

`verify` and `commit` are the chain's (speculative.Speculation): the accepted path is
appended exactly as a chain's accepted drafts are. Statistics count rounds by accepted depth.
What this file deliberately leaves out: dynamic trees that reshape per round (EAGLE-2).
"""

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from nanospec.errors import UserError
from nanospec.model import forward
from nanospec.rounds import at, round_keys, top_tokens
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.speculative import Judged, SpecState, Speculation, check_room
from nanospec.trees.grow import Grown, commit_tree, grows_trees, propose_tree
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
    def depth(self) -> int:  # the most drafts one round can accept
        return self.tree.max_depth

    @property
    def block(self) -> int:
        return self.tree.size + 1

    def check(self, lengths, max_new: int) -> None:
        if not grows_trees(self.drafter):
            raise UserError(f"{self.drafter.name} proposes a single continuation; token trees "
                            f"need a drafter with a law at every node (draft, medusa, eagle or mtp).")
        most, depth = self.drafter.max_gamma, self.tree.max_depth
        if most is not None and depth > most:
            raise UserError(f"{self.drafter.name} has {most} heads, so a tree can be at most "
                            f"{most} deep; this one is {depth}.")
        check_room(self.cfg, lengths, max_new, self.tree.max_depth)

    def draft(self, dparams, state: SpecState, sp: SamplingParams):
        """The drafter grows the tree. subtle: `top` siblings are point masses, so WHICH tokens
        they are is free (exactness only needs node_q to be what was used: one-hot). Ranked
        by the sampling law, greedy decoding would make every sibling after the first an
        arbitrary zero-probability token (the law is one-hot), and top-k / top-p cuts would
        tie the tail at zero the same way; ranked by the drafter's softmax at T = 1 (the same
        order where the sampling law is not zero), the second child is the drafter's real
        second guess. Measured: greedy 2,1,1,1 trees accepted exactly what a γ = 4 chain did
        before this."""
        key, _ = round_keys(state.key, state.step)
        tokens, node_q, dstate = propose_tree(self.drafter, dparams, state.dstate, state.seq,
                                              state.length, key, RANKING if self.top else sp,
                                              self.tree, self.top)
        return Grown(tokens, node_q), state._replace(dstate=dstate)

    def judge(self, params, state: SpecState, grown: Grown, sp: SamplingParams) -> Judged:
        """One target pass over the whole tree, the walk, and the path's compaction."""
        start = state.length - 1  # the root's position (and slot: the cache holds length - 1)
        logits, hidden, cache = forward(self.graphdef, params, grown.tokens,
                                        tree_positions(start, self.tree), state.cache,
                                        block_mask=jnp.asarray(self.tree.ancestor_mask))
        made = state.n_new[:, None] + jnp.asarray(self.tree.depth)  # tokens before each p
        p = sampling_probs(logits, sp, made)  # (B, N, V)
        _, key = round_keys(state.key, state.step)
        v = verify_tree(key, grown.tokens, grown.node_q, p, self.tree)
        path_tokens = gather_path(grown.tokens, v.path)  # (B, D+1): the root first
        return Judged(p, v, path_tokens[:, 1:], gather_path(hidden, v.path),
                      compact_path(cache, start, v.path, self.tree))

    def drafter_commit(self, dparams, dstate, hidden, emitted, start, length):
        return commit_tree(self.drafter, dparams, dstate, hidden, emitted, start, length)

    def record(self, state: SpecState, grown: Grown, j: Judged, emitted, n_emit) -> TreeTrace:
        """The round as a TreeTrace (XLA drops it in the fused loop, where nothing reads it)."""
        v, p, B = j.verdict, j.p, emitted.shape[0]
        rows, parents = jnp.arange(B)[:, None], jnp.maximum(jnp.asarray(self.tree.parents), 0)
        stop = jnp.take_along_axis(v.path, v.n_accepted[:, None], axis=1)[:, 0]  # (B,) last node
        q_x = jnp.take_along_axis(grown.node_q, grown.tokens[..., None], axis=2)[..., 0]
        return TreeTrace(~state.done, state.length, grown.tokens, q_x,
                         p[rows, parents[None, :], grown.tokens], v.path, v.n_accepted, v.token,
                         v.is_bonus, n_emit, emitted, top_tokens(v.extra_probs),
                         at(v.extra_probs, v.token), p[jnp.arange(B), stop, v.token])

    def counts(self, trace: TreeTrace):
        """(live, drafts proposed = the tree's depth, accepted, all accepted) for RoundStats."""
        depth = jnp.full(trace.live.shape, self.tree.max_depth, jnp.int32)
        return trace.live, depth, trace.n_accepted, trace.is_bonus
