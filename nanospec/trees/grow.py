"""How drafters grow token trees: the shared part (the drafters compute the laws, this picks).

A drafter grows a static `Tree` depth by depth: it computes its law at every node of depth
d − 1 (a draft-model or EAGLE pass over the tree so far, an MTP module, a Medusa head), then
`pick_children` fills depth d from those laws, either

- top:    the k-th child of a node is the k-th most likely token of the node's law (its law
          at T = 1: trees/loop.py says why). The choice is deterministic, so each child
          is a point mass, node_q = one-hot(x) — exact at any temperature (Medusa's trees); or
- sample: each child is an independent draw from its parent's law, node_q = that law
          (SpecInfer's trees; duplicates among siblings are allowed, and needed for exactness).

What this file deliberately leaves out: choosing the tree's shape (the caller passes a `Tree`)
and sampling siblings without replacement (trees/tree.py explains why node_q would have to change).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.sampling import row_keys, sample
from nanospec.trees.tree import Tree


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
        node_keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(jnp.arange(tree.size))
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
