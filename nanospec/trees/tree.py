"""Token trees: draft several candidates per position and verify them all in one target pass.

A chain of γ drafts dies at its first rejection. A tree hedges: the root (the last committed
token) has several candidate children, each may have children of its own, and the target scores
every node at once — each node attends only to its ancestors (`Tree.ancestor_mask`, passed to
the model as `block_mask`, with positions start + depth). Verification walks down from the root
(SpecInfer's multi-step rejection sampling): at each node, try its children in sibling order

1. accept child c (token x) with probability min(1, ρ(x) / q_c(x)), where ρ starts as p at the
   node and q_c is the law x was drawn from (`node_q`);
2. accepted: move to c, ρ ← p at c, and go on with c's children;
3. rejected: ρ ← residual(ρ, q_c) = norm(max(0, ρ − q_c)), and try the next sibling;
4. every child rejected: sample the correction token from ρ; reached a leaf: the bonus from p.

Worked example (top-2 point masses, so q_c = one-hot): p = [.5 .3 .2], siblings 0 then 1.
Sibling 0 accepted with p(0) = .5 -> P(0) = .5. Rejected: ρ = [0 .6 .4]. Sibling 1 accepted
with .6 -> P(1) = .5·.6 = .3. Rejected: ρ = [0 0 1] -> P(2) = .5·.4 = .2. Exactly p, and a
chain (sibling 0 alone) would have moved on only half the time instead of 80%.

Why it is exact: one sibling test is ordinary speculative sampling with target ρ — it emits a
token with law ρ (verify.py's proof), either x itself or, after rejection, a draw from the
residual. So instead of drawing from the residual we may run the same test again with the next
sibling, *provided that sibling's token has law q_c given everything seen so far* (earlier
siblings' tokens and their rejections). Siblings drawn i.i.d. from the drafter's q qualify
with q_c = q: they are independent of the earlier uniforms. Deterministic siblings (top-k)
qualify with q_c = one-hot(x). By induction over siblings, the token leaving a node has law p at
that node; by induction over depth, the committed path has the target's chain-rule law.

When it is NOT exact: siblings drawn *without replacement* (e.g. to avoid duplicates) while
node_q still says q. Example: p = [0 .2 .8], q = [.9 .1 0], two siblings. Sibling 0 is token 0
90% of the time and is always rejected; ρ = [0 1/9 8/9]. Then the second sibling is certainly
token 1, but the rule tests it as a 10% long shot: min(1, (1/9)/.1) = 1, always accepted. Token
1 comes out every time instead of 20%. The fix is node_q = q with earlier siblings removed.

Shapes are fixed (children padded with -1, masks instead of branches), so `verify_tree` runs
inside jit and a `lax.while_loop` with no host sync. The tree itself is static: a frozen,
hashable dataclass whose derived arrays are numpy constants.

What this file deliberately leaves out: building trees from a drafter (drafters own that),
dynamic trees that reshape per round (EAGLE-2), and choosing a tree shape from acceptance rates.
"""

from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from operator import mul
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import KVCache, write_rows
from nanospec.sampling import row_keys, sample
from nanospec.verify import accept_reject, leading_run, residual

MAX_NODES = 64  # one verify pass scores every node; past this a tree costs more than it saves


@dataclass(frozen=True)
class Tree:
    parents: tuple[int, ...]  # parents[i] is node i's parent; node 0 is the root, parents[0] = -1

    def __post_init__(self):
        parents = tuple(int(i) for i in self.parents)
        object.__setattr__(self, "parents", parents)  # lists in, a hashable tuple kept
        n = len(parents)
        if n < 2:
            raise ValueError("A token tree needs the root and at least one drafted node.")
        if n > MAX_NODES:
            raise ValueError(f"A token tree may have at most {MAX_NODES} nodes, not {n}.")
        if parents[0] != -1:
            raise ValueError("Node 0 is the root and must have parent -1.")
        for i in range(1, n):
            if not 0 <= parents[i] < i or parents[i] < parents[i - 1]:
                raise ValueError(
                    f"Nodes must be in breadth-first order (0 <= parent < child, "
                    f"parents non-decreasing), but node {i} has parent {parents[i]}."
                )

    @classmethod
    def chain(cls, gamma: int) -> "Tree":
        """γ drafts in a row: verifying this tree is ordinary speculative decoding."""
        if not 1 <= gamma < MAX_NODES:
            raise ValueError(f"A chain needs 1 <= gamma <= {MAX_NODES - 1}, not {gamma}.")
        return cls((-1,) + tuple(range(gamma)))

    @classmethod
    def from_branching(cls, widths) -> "Tree":
        """Every node at depth d gets widths[d] children: (2, 2, 1) -> 1 + 2 + 4 + 4 = 11 nodes."""
        widths = tuple(int(w) for w in widths)
        if not widths or min(widths) < 1:
            raise ValueError(f"Branching needs one or more widths, each positive, not {widths}.")
        if 1 + sum(accumulate(widths, mul)) > MAX_NODES:  # nodes per level: 2, 2·2, 2·2·1, ...
            raise ValueError(f"Branching {widths} gives more than {MAX_NODES} nodes.")
        parents, level = [-1], [0]
        for w in widths:
            nxt = []
            for node in level:
                for _ in range(w):
                    nxt.append(len(parents))
                    parents.append(node)
            level = nxt
        return cls(tuple(parents))

    @property
    def size(self) -> int:
        return len(self.parents)

    @cached_property
    def depth(self) -> np.ndarray:  # (N,) int32: the root is at depth 0
        d = np.zeros(self.size, np.int32)
        for i in range(1, self.size):
            d[i] = d[self.parents[i]] + 1
        return _constant(d)

    @property
    def max_depth(self) -> int:
        return int(self.depth[-1])  # BFS order: the last node is among the deepest

    @cached_property
    def children(self) -> np.ndarray:  # (N, max_children) int32, sibling order, padded with -1
        kids = [[c for c in range(self.size) if self.parents[c] == i] for i in range(self.size)]
        out = np.full((self.size, max(map(len, kids))), -1, np.int32)
        for i, ks in enumerate(kids):
            out[i, : len(ks)] = ks
        return _constant(out)

    @cached_property
    def ancestor_mask(self) -> np.ndarray:  # (N, N) bool: node i sees j iff j is i or its ancestor
        m = np.eye(self.size, dtype=bool)
        for i in range(1, self.size):
            m[i] |= m[self.parents[i]]  # parents come first, so their rows are already complete
        return _constant(m)


def _constant(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)  # shared by every trace that uses this tree: nobody may edit it
    return a


class TreeVerdict(NamedTuple):  # shapes for one row; `verify_tree` adds a leading batch axis B
    n_accepted: jax.Array  # () int32: accepted drafted nodes = depth reached, 0..max_depth
    path: jax.Array  # (max_depth+1,) int32: nodes from the root; repeats the last after n_accepted
    token: jax.Array  # () int32: the correction (every child rejected) or bonus (a leaf) token
    is_bonus: jax.Array  # () bool: the path ended at a leaf, so `token` came from p there
    extra_probs: jax.Array  # (V,) the law `token` was drawn from


def sibling_laws(rho: jax.Array, qs: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The law each sibling is tested against, and the law left once all are rejected.

    rho (V,) the target's law at the parent, ρ_0 = p; qs (K, V) each sibling's node_q; valid
    (K,) bool masks padding. rhos[k] = ρ_k, the law after siblings 0..k-1 were rejected.
    Padded siblings leave ρ unchanged.
    """

    def step(rho, q_valid):
        q, ok = q_valid
        return jnp.where(ok, residual(rho, q), rho), rho

    final, rhos = jax.lax.scan(step, rho, (qs, valid))
    return rhos, final  # (K, V), (V,)


def sibling_outcome(p: jax.Array, node_qs: jax.Array, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For siblings xs (m,) with laws node_qs (m, V) under a parent with target law p (V,):
    the probability each is accepted given the earlier ones were rejected, and the final residual.

    This is the rule `verify_tree_row` applies, without the randomness: the exactness tests
    enumerate sibling tuples with it. p = [.5 .3 .2], top-2 point masses on 0 then 1 ->
    accept [.5 .6], final residual [0 0 1].
    """
    rhos, final = sibling_laws(p, node_qs, jnp.ones(xs.shape, bool))
    m = jnp.arange(xs.shape[0])
    rho_x, q_x = rhos[m, xs], node_qs[m, xs]
    return jnp.where(q_x > 0, jnp.minimum(1.0, rho_x / jnp.where(q_x > 0, q_x, 1.0)), 0.0), final


def verify_tree_row(
    key: jax.Array, tokens: jax.Array, node_q: jax.Array, p: jax.Array, tree: Tree
) -> TreeVerdict:
    """Walk one row's tree from the root, accepting at most one child per level.

    tokens (N,) int32 (tokens[0] is the root, never tested); node_q (N, V) the law each node's
    token was drawn from given its earlier siblings; p (N, V) the target's law after each node.
    """
    children = jnp.asarray(tree.children)  # (N, K)
    key_u, key_extra = jax.random.split(key)
    # One uniform per drafted node: each node is tested at most once. For a chain this is
    # exactly verify_row's draw, so the two give identical verdicts under the same key.
    u = jax.random.uniform(key_u, (tree.size - 1,))  # (N-1,) node c uses u[c - 1]

    def descend(carry, _):
        node, alive, extra = carry
        kids = children[node]  # (K,)
        valid = (kids >= 0) & alive
        kid = jnp.maximum(kids, 0)  # padding reads the root (and u[-1]); `valid` masks it
        x, qs = tokens[kid], node_q[kid]  # (K,), (K, V)
        rhos, rho_left = sibling_laws(p[node], qs, valid)  # (K, V), (V,)
        k = jnp.arange(kid.shape[0])
        accepted = accept_reject(u[kid - 1], rhos[k, x], qs[k, x]) & valid  # (K,)
        # subtle: the residual chain rhos does not depend on the uniforms, so every sibling is
        # tested at once; the first accepted one wins and later verdicts are simply ignored,
        # exactly as if the walk had stopped testing there.
        winner = kid[jnp.minimum(leading_run(~accepted), kid.shape[0] - 1)]
        moved = jnp.any(accepted)
        stopped = alive & ~moved  # every child rejected, or a leaf (no children to try)
        extra = jnp.where(stopped, rho_left, extra)
        return (jnp.where(moved, winner, node), alive & moved, extra), node

    # max_depth + 1 steps: the last one always stops, at a leaf if nothing was rejected before.
    init = (jnp.int32(0), jnp.bool_(True), jnp.zeros_like(p[0]))
    (node, _, extra_probs), path = jax.lax.scan(descend, init, length=tree.max_depth + 1)
    n_accepted = jnp.asarray(tree.depth)[node]
    is_bonus = children[node, 0] < 0  # stopped at a leaf: rho_left was p at the leaf, untouched
    token = sample(key_extra, extra_probs)
    return TreeVerdict(n_accepted, path.astype(jnp.int32), token, is_bonus, extra_probs)


def verify_tree(
    key: jax.Array, tokens: jax.Array, node_q: jax.Array, p: jax.Array, tree: Tree
) -> TreeVerdict:
    """`verify_tree_row` for a batch: tokens (B, N), node_q (B, N, V), p (B, N, V).

    Row b uses fold_in(key, b), so its verdict does not depend on the rest of the batch.
    `tree` is static: under jit pass it with static_argnames="tree" (it is hashable).
    """
    row = lambda k, t, q, pb: verify_tree_row(k, t, q, pb, tree)
    return jax.vmap(row)(row_keys(key, tokens.shape[0]), tokens, node_q, p)


def tree_positions(start: jax.Array, tree: Tree) -> jax.Array:
    """Position of every node: the root's position plus its depth. start (B,) -> (B, N)."""
    return start[:, None] + jnp.asarray(tree.depth)[None, :]


def gather_path(x: jax.Array, path: jax.Array) -> jax.Array:
    """The path's entries of per-node values: x (B, N, ...), path (B, D+1) -> (B, D+1, ...)."""
    return jax.vmap(lambda xb, pb: xb[pb])(x, path)


def compact_path(cache: KVCache, start: jax.Array, path: jax.Array, tree: Tree) -> KVCache:
    """Move the accepted path's K/V to consecutive slots, as if it had been run as a chain.

    The tree pass wrote node i of row b at slot start[b] + i; afterwards node path[d] must sit
    at slot start[b] + d (its position). Example: start 1, path [0 2 4] moves slots 3 -> 2 and
    5 -> 3. The length is untouched: the caller rolls back to start + n_accepted + 1.
    """

    H = cache.k[0].shape[0] // start.shape[0]

    def moved(b, buf):  # row b's path, (H, D+1, Dh), from buf (B·H, S, Dh)
        window = jax.lax.dynamic_slice(buf, (b * H, start[b], 0), (H, tree.size, buf.shape[2]))
        # subtle: the whole window is read before anything is written, so overlapping moves are
        # safe (and path[d] >= d, so even an in-place sweep from d = 0 up would be). Like
        # write_block, both calls clamp the start: callers keep start + N <= capacity.
        return window[:, path[b]]

    compact = lambda buf: write_rows(buf, moved, start)
    return cache._replace(k=tuple(map(compact, cache.k)), v=tuple(map(compact, cache.v)))
