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
from nanospec.drafters import Drafter, DraftModel, take_rows
from nanospec.heads.drafters import EagleDrafter, MedusaDrafter, MTPDrafter
from nanospec.model import forward
from nanospec.sampling import fold, row_keys, sample, sampling_probs
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
        x = jnp.take_along_axis(best, jnp.asarray(sibling_rank(tree))[None, :, None], axis=2)[..., 0]
        q = jax.nn.one_hot(x, law.shape[-1], dtype=jnp.float32)
    else:
        node_keys = jax.vmap(lambda c: fold(key, c))(jnp.arange(tree.size))
        draw = lambda k, probs: jax.vmap(sample)(row_keys(k, probs.shape[0]), probs)  # (B,)
        x = jax.vmap(draw, in_axes=(0, 1), out_axes=1)(node_keys, law)  # (B, N)
        q = law
    tokens = jnp.where(at_depth[None], x, grown.tokens)
    node_q = jnp.where(at_depth[None, :, None], q, grown.node_q)
    return Grown(tokens, node_q)


def prefixed_mask(tree: Tree, n_prefix: int) -> jax.Array:
    """The ancestor mask with `n_prefix` causal tokens in front, which every node also sees.

    The draft model re-reads its last committed token before the tree's root, so its block is
    [prefix, root, nodes...]: (n_prefix + N, n_prefix + N).
    """
    n = n_prefix + tree.size
    m = np.zeros((n, n), bool)
    m[:n_prefix, :n_prefix] = np.tril(np.ones((n_prefix, n_prefix), bool))
    m[n_prefix:, :n_prefix] = True
    m[n_prefix:, n_prefix:] = tree.ancestor_mask
    return jnp.asarray(m)


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
    """The draft model: one pass over [second-last, root, nodes] per depth.

    Each pass sees the tree grown so far through the ancestor mask; nodes not yet filled
    hold junk that no filled node can see. The cache comes back holding every committed
    token; the tree's nodes lie beyond, in node order, until `commit_tree`.
    """
    grown = plant(seq, length, tree, drafter.cfg.vocab_size)
    cache = rollback(cache, length - 2)
    prev = take_rows(seq, length - 2, 1)  # (B, 1)
    positions = jnp.concatenate([(length - 2)[:, None], tree_positions(length - 1, tree)], 1)
    mask = prefixed_mask(tree, 1)  # (N+1, N+1)
    written = cache
    for d in range(1, tree.max_depth + 1):
        logits, _, written = forward(drafter.graphdef, dparams, jnp.concatenate([prev, grown.tokens], 1),
                                     positions, cache, block_mask=mask)
        q_nodes = sampling_probs(logits[:, 1:], sp)  # (B, N, V): the law after each node
        grown = pick_children(fold(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q, rollback(written, length)


@commit_tree.register
def _draft_model_commit(drafter: DraftModel, dparams, cache, hidden, emitted, start, length):
    """Re-read the emitted tokens (positions start+1..) over the tree's slots, then restore
    the invariant: every committed token but the last two."""
    W = emitted.shape[1]
    positions = (start + 1)[:, None] + jnp.arange(W)  # (B, W)
    _, _, cache = forward(drafter.graphdef, dparams, emitted, positions, rollback(cache, start + 1))
    return rollback(cache, length - 2)


@propose_tree.register
def _medusa(drafter: MedusaDrafter, dparams, feat, seq, length, key, sp, tree, top):
    """Head d's law is the same at every node of depth d − 1 (heads ignore the path)."""
    heads, target = drafter.parts(dparams)
    w = drafter.output_layer(target)
    q_heads = sampling_probs(drafter.draft_logits(w, heads(target.ln_f(feat))), sp)  # (B, K, V)
    q_nodes = q_heads[:, np.minimum(tree.depth, drafter.hc.depth - 1)]  # (B, N, V)
    grown = plant(seq, length, tree, drafter.hc.vocab_size)
    for d in range(1, tree.max_depth + 1):
        grown = pick_children(fold(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q, feat


@propose_tree.register
def _mtp(drafter: MTPDrafter, dparams, feat, seq, length, key, sp, tree, top):
    """Module d reads, at each node of depth d − 1, its parent's representation and the
    node's own token (the root: the target's feature and the last committed token)."""
    heads, target = drafter.parts(dparams)
    w = drafter.output_layer(target)
    grown = plant(seq, length, tree, drafter.hc.vocab_size)
    B, N = grown.tokens.shape
    h_nodes = jnp.zeros((B, N, feat.shape[-1]))
    q_nodes = jnp.zeros(grown.node_q.shape)
    for d in range(1, tree.max_depth + 1):
        h_in = jnp.broadcast_to(feat[:, None], h_nodes.shape) if d == 1 else h_nodes[:, parent_index(tree)]
        h, out = heads.layers[d - 1](h_in, target.wte(grown.tokens))  # every node: (B, N, C)
        here = jnp.asarray(tree.depth == d - 1)[None, :, None]
        h_nodes = jnp.where(here, h, h_nodes)
        q_nodes = jnp.where(here, sampling_probs(drafter.draft_logits(w, out), sp), q_nodes)
        grown = pick_children(fold(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q, feat


@propose_tree.register
def _eagle(drafter: EagleDrafter, dparams, state, seq, length, key, sp, tree, top):
    """The root's law comes from h_{L−2}; then one pass over the tree's pairs per depth:
    node c feeds (f̂ at its parent, its token) at position L−2+depth(c) and outputs h at c."""
    head, _ = drafter.parts(dparams)
    cache, h_root = state
    grown = plant(seq, length, tree, drafter.hc.vocab_size)
    B, N = grown.tokens.shape
    hs = jnp.zeros((B, N, h_root.shape[-1])).at[:, 0].set(h_root)
    q_nodes = jnp.zeros(grown.node_q.shape).at[:, 0].set(drafter.law(dparams, h_root, sp))
    parents = parent_index(tree)[1:]
    positions = tree_positions(length - 2, tree)[:, 1:]  # (B, N-1)
    mask = jnp.asarray(tree.ancestor_mask[1:, 1:])
    for d in range(1, tree.max_depth + 1):
        if d > 1:  # the nodes of depth d − 1 now have their tokens: compute their h
            h, _ = head.layer(drafter.step_input(dparams, hs[:, parents], grown.tokens[:, 1:]),
                              positions, cache, block_mask=mask)  # (B, N-1, width)
            here = jnp.asarray(tree.depth[1:] == d - 1)[None, :, None]
            hs = hs.at[:, 1:].set(jnp.where(here, h, hs[:, 1:]))
            q_nodes = q_nodes.at[:, 1:].set(jnp.where(
                here, drafter.law(dparams, h, sp), q_nodes[:, 1:]))
        grown = pick_children(fold(key, d), grown, q_nodes, tree, d, top)
    return grown.tokens, grown.node_q, state
