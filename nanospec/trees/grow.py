"""How drafters grow token trees: the shared part (the drafters compute the laws, this picks).

A drafter grows a static `Tree` depth by depth: it computes its law at every node of depth
d − 1 (a draft-model or EAGLE pass over the tree so far, an MTP module, a Medusa head), then
`pick_children` fills depth d from those laws, either

- top:    the k-th child of a node is the k-th most likely token of the node's law (its law
          at T = 1: trees/loop.py says why). The choice is deterministic, so each child
          is a point mass, node_q = one-hot(x) — exact at any temperature (Medusa's trees); or
- sample: each child is an independent draw from its parent's law, node_q = that law
          (SpecInfer's trees; duplicates among siblings are allowed, and needed for exactness).

Which drafters grow trees is said here, not in the drafters: `propose_tree` and `commit_tree`
are generic functions with one implementation per drafter class (functools.singledispatch), so
drafters.py knows nothing of trees. To let a new drafter grow trees, register both for it:

    propose_tree(drafter, dparams, dstate, seq, length, key, sp, tree, top)
        -> tokens (B, N), node_q (B, N, V), dstate
    commit_tree(drafter, dparams, dstate, hidden, emitted, start, length) -> dstate

`commit_tree` sees the accepted path as a chain (the target's features along it, the emitted
tokens); by default it is the drafter's own `commit`.

What this file deliberately leaves out: choosing the tree's shape (the caller passes a `Tree`)
and sampling siblings without replacement (trees/tree.py explains why node_q would have to change).
"""

from functools import singledispatch
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import rollback
from nanospec.drafters import Drafter, DraftModel, tail
from nanospec.heads.drafters import (
    EagleDrafter,
    MedusaDrafter,
    MTPDrafter,
    one_token_rows,
    zeros_like_output,
)
from nanospec.model import forward
from nanospec.sampling import fold_keys, row_keys, sample, sampling_probs
from nanospec.trees.tree import Tree, tree_positions


class Grown(NamedTuple):  # what the draft phase hands to the verify phase
    tokens: jax.Array  # (B, N) int32: node tokens, tokens[:, 0] = the last committed token
    node_q: jax.Array  # (B, N, V) the law each node's token was drawn from (one-hot for `top`)


def sibling_rank(tree: Tree) -> np.ndarray:
    """(N,) each node's index among its siblings: (-1, 0, 0, 1) -> [0, 0, 1, 0]."""
    rank = np.zeros(tree.size, np.int32)
    for row in tree.children:
        for i, c in enumerate(row[row >= 0]):
            rank[c] = i
    return rank


def plant(seq, length, tree: Tree, vocab_size: int) -> Grown:
    """An empty tree: the root holds the last committed token, every other node is unset."""
    B = seq.shape[0]
    root = seq[jnp.arange(B), length - 1]  # (B,)
    tokens = jnp.zeros((B, tree.size), jnp.int32).at[:, 0].set(root)
    return Grown(tokens, jnp.zeros((B, tree.size, vocab_size), jnp.float32))


def parent_index(tree: Tree) -> np.ndarray:
    """(N,) each node's parent, the root its own (so gathers stay in range)."""
    return np.maximum(np.asarray(tree.parents), 0)


def pick_children(key, grown: Grown, q_nodes, tree: Tree, depth: int, top: bool) -> Grown:
    """Fill the nodes at `depth` from their parents' laws q_nodes (B, N, V).

    top: the k-th child of a node is the k-th most likely token of its law (a point mass);
    sample: every child is an independent draw from its parent's law (so node_q = that law).
    Node c of row b draws with fold_in(fold_in(key, c), b): rows never share randomness.
    """
    parents = parent_index(tree)
    at_depth = jnp.asarray(tree.depth == depth)  # (N,)
    law = q_nodes[:, parents]  # (B, N, V): each node's parent's law
    if top:
        width = int(tree.children.shape[1])
        _, best = jax.lax.top_k(law, width)  # (B, N, width)
        x = jnp.take_along_axis(best, jnp.asarray(sibling_rank(tree))[None, :, None], axis=2)[
            ..., 0
        ]
        q = jax.nn.one_hot(x, law.shape[-1], dtype=jnp.float32)
    else:
        node_keys = jax.vmap(lambda c: fold_keys(key, c))(jnp.arange(tree.size))
        draw = lambda k, probs: jax.vmap(sample)(row_keys(k, probs.shape[0]), probs)  # (B,)
        x = jax.vmap(draw, in_axes=(0, 1), out_axes=1)(node_keys, law)  # (B, N)
        q = law
    tokens = jnp.where(at_depth[None], x, grown.tokens)
    node_q = jnp.where(at_depth[None, :, None], q, grown.node_q)
    return Grown(tokens, node_q)


@singledispatch
def propose_tree(drafter: Drafter, dparams, dstate, seq, length, key, sp, tree: Tree, top: bool):
    """Grow `tree` for every row: (tokens (B, N), node_q (B, N, V), dstate)."""
    raise NotImplementedError(f"{drafter.name} cannot grow token trees")


def grows_trees(drafter: Drafter) -> bool:
    """Whether `propose_tree` has an implementation for this drafter."""
    return propose_tree.dispatch(type(drafter)) is not propose_tree.dispatch(object)


@singledispatch
def commit_tree(drafter: Drafter, dparams, dstate, hidden, emitted, start, length):
    """After a tree round: the drafter sees the accepted path as a chain (its `commit`)."""
    return drafter.commit(dparams, dstate, hidden, emitted, start, length)


@propose_tree.register
def _draft_model(drafter: DraftModel, dparams, cache, seq, length, key, sp, tree, top):
    """The draft model: one pass over [root, nodes] per depth.

    Each pass sees the tree grown so far through the ancestor mask; nodes not yet filled
    hold junk that no filled node can see. The cache comes back holding every committed
    token; the tree's nodes lie beyond, in node order, until `commit_tree`.

    subtle: unlike a chain, a tree round needs no second-last token in its block (a
    one-token prompt has none): the cache's slots below the root all hold committed tokens
    — `init` read the whole prompt, `commit_tree` re-reads all that a round emitted — so
    it is rolled forward to the root's slot, past the chain's invariant (drafters.DraftModel).
    """
    grown = plant(seq, length, tree, drafter.cfg.vocab_size)
    cache = rollback(cache, length - 1)
    positions = tree_positions(length - 1, tree)  # (B, N)
    mask = jnp.asarray(tree.ancestor_mask)  # (N, N)
    written = cache
    for d in range(1, tree.max_depth + 1):
        logits, _, written = forward(
            drafter.graphdef, dparams, grown.tokens, positions, cache, block_mask=mask
        )
        q_nodes = sampling_probs(logits, sp)  # (B, N, V): the law after each node
        grown = pick_children(fold_keys(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q, rollback(written, length)


@commit_tree.register
def _draft_model_commit(drafter: DraftModel, dparams, cache, hidden, emitted, start, length):
    """Re-read the emitted tokens (positions start+1..) over the tree's slots: the cache then
    holds every committed token (rolled back to the chain's invariant, drafters.DraftModel)."""
    W = emitted.shape[1]
    positions = (start + 1)[:, None] + jnp.arange(W)  # (B, W)
    _, _, cache = forward(drafter.graphdef, dparams, emitted, positions, rollback(cache, start + 1))
    return rollback(cache, tail(length))


@propose_tree.register
def _medusa(drafter: MedusaDrafter, dparams, feat, seq, length, key, sp, tree, top):
    """Head d's law is the same at every node of depth d − 1 (heads ignore the path); a
    one-token prompt's row is one step behind (MedusaDrafter.features)."""
    heads, target = drafter.parts(dparams)
    w = drafter.output_layer(target)
    feats = drafter.features(heads, target, feat, length)  # (B, K, C)
    q_heads = sampling_probs(drafter.draft_logits(w, feats), sp)  # (B, K, V)
    q_nodes = q_heads[:, np.minimum(tree.depth, drafter.hc.depth - 1)]  # (B, N, V)
    grown = plant(seq, length, tree, drafter.hc.vocab_size)
    for d in range(1, tree.max_depth + 1):
        grown = pick_children(fold_keys(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q, feat


@propose_tree.register
def _mtp(drafter: MTPDrafter, dparams, feat, seq, length, key, sp, tree, top):
    """Module d reads, at each node of depth d − 1, its parent's representation and the
    node's own token (the root: the target's feature and the last committed token); a
    one-token prompt's row is one step behind (MTPDrafter.module)."""
    grow = lambda one, _: _mtp_grow(drafter, dparams, feat, seq, length, key, sp, tree, top, one)
    no_tree = zeros_like_output(lambda: grow(None, None))
    tokens, node_q = one_token_rows(length, lambda c: grow(None, c), grow, no_tree)
    return tokens, node_q, feat


def _mtp_grow(drafter: MTPDrafter, dparams, feat, seq, length, key, sp, tree, top, one):
    heads, target = drafter.parts(dparams)
    w = drafter.output_layer(target)
    grown = plant(seq, length, tree, drafter.hc.vocab_size)
    B, N = grown.tokens.shape
    h_nodes = jnp.zeros((B, N, feat.shape[-1]))
    q_nodes = jnp.zeros(grown.node_q.shape)
    rows = None if one is None else one[:, None]  # (B, 1): against (B, N) nodes
    for d in range(1, tree.max_depth + 1):
        h_in = (
            jnp.broadcast_to(feat[:, None], h_nodes.shape)
            if d == 1
            else h_nodes[:, parent_index(tree)]
        )
        h, out = drafter.module(heads, target, d - 1, h_in, grown.tokens, rows)  # (B, N, C)
        here = jnp.asarray(tree.depth == d - 1)[None, :, None]
        h_nodes = jnp.where(here, h, h_nodes)
        q_nodes = jnp.where(here, sampling_probs(drafter.draft_logits(w, out), sp), q_nodes)
        grown = pick_children(fold_keys(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q


@propose_tree.register
def _eagle(drafter: EagleDrafter, dparams, state, seq, length, key, sp, tree, top):
    """The root's law comes from h_{L−2}; then one pass over the tree's pairs per depth:
    node c feeds (f̂ at its parent, its token) at position L−2+depth(c) and outputs h at c.

    A one-token prompt's row is one step behind (EagleDrafter.chain): the root's law is the
    target's on f₀, and its children feed the real pairs (f₀, their token) at position 0."""
    grow = lambda one, _: _eagle_grow(drafter, dparams, state, seq, length, key, sp, tree, top, one)
    no_tree = zeros_like_output(lambda: grow(None, None))
    tokens, node_q = one_token_rows(length, lambda c: grow(None, c), grow, no_tree)
    return tokens, node_q, state


def _eagle_grow(drafter: EagleDrafter, dparams, state, seq, length, key, sp, tree, top, one):
    head, target = drafter.parts(dparams)
    cache, h_root = state
    grown = plant(seq, length, tree, drafter.hc.vocab_size)
    B, N = grown.tokens.shape
    hs = jnp.zeros((B, N, h_root.shape[-1])).at[:, 0].set(h_root)
    q_root = drafter.law(dparams, h_root, sp)  # (B, V)
    if one is not None:
        f0 = drafter.first_feature(dparams, seq)  # (B, C)
        p1 = sampling_probs(drafter.draft_logits(drafter.output_layer(target), f0), sp)
        q_root = jnp.where(one[:, None], p1, q_root)
        first = one[:, None, None] & jnp.asarray(tree.depth[1:] == 1)[None, :, None]  # (B, N-1, 1)
    q_nodes = jnp.zeros(grown.node_q.shape).at[:, 0].set(q_root)
    parents = parent_index(tree)[1:]
    positions = tree_positions(length - 2, tree)[:, 1:]  # (B, N-1)
    mask = jnp.asarray(tree.ancestor_mask[1:, 1:])
    for d in range(1, tree.max_depth + 1):
        if d > 1:  # the nodes of depth d − 1 now have their tokens: compute their h
            x_in = drafter.step_input(dparams, hs[:, parents], grown.tokens[:, 1:])  # (B, N-1, W)
            if one is not None:  # the root's children: the real pair (f₀, their token)
                f = jnp.broadcast_to(f0[:, None], (B, N - 1, f0.shape[-1]))
                x_in = jnp.where(first, drafter.pair_input(dparams, f, grown.tokens[:, 1:]), x_in)
            h, _ = head.layer(x_in, positions, cache, block_mask=mask)  # (B, N-1, width)
            here = jnp.asarray(tree.depth[1:] == d - 1)[None, :, None]
            hs = hs.at[:, 1:].set(jnp.where(here, h, hs[:, 1:]))
            q_nodes = q_nodes.at[:, 1:].set(
                jnp.where(here, drafter.law(dparams, h, sp), q_nodes[:, 1:])
            )
        grown = pick_children(fold_keys(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q
