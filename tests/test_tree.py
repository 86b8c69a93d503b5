"""Token trees: the static structure, the verify walk, positions/masks in the model, compaction.

Known-answer tests on a hand-drawn tree, equivalence with the chain rule of verify.py (a chain
tree gives the very same verdict under the same key), equivalence of one tree pass with running
each root-to-node path causally, and the cache after compaction. The law of what a tree round
emits is proved in tests/statistical/test_tree_identity.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec.cache import init_cache, rollback
from nanospec.model import GPT, ModelConfig, forward
from nanospec.trees.tree import (
    Tree,
    compact_path,
    gather_path,
    sibling_outcome,
    tree_positions,
    verify_tree,
    verify_tree_row,
)
from nanospec.verify import verify

ATOL = 2e-5  # float32: tree and causal passes sum in different orders
fwd = jax.jit(forward, static_argnums=0)  # compiled once per shape: 4x faster than eager here

#        0            the hand-drawn tree: node 0 is the root (last committed token);
#      / | \          1, 2, 3 are candidates for the next token; 4, 5 follow 1; 6 follows 3
#     1  2  3
#    / \     \
#   4   5     6
HAND = Tree((-1, 0, 0, 0, 1, 1, 3))


def test_hand_drawn_tree_depth_children_and_ancestors():
    assert HAND.size == 7 and HAND.max_depth == 2
    assert HAND.depth.tolist() == [0, 1, 1, 1, 2, 2, 2]
    assert HAND.children.tolist() == [
        [1, 2, 3],
        [4, 5, -1],
        [-1, -1, -1],
        [6, -1, -1],
        [-1, -1, -1],
        [-1, -1, -1],
        [-1, -1, -1],
    ]
    m = HAND.ancestor_mask.astype(int)
    assert m[5].tolist() == [1, 1, 0, 0, 0, 1, 0]  # 5 sees the root, its parent 1, and itself
    assert m[6].tolist() == [1, 0, 0, 1, 0, 0, 1]
    assert m[2].tolist() == [1, 0, 1, 0, 0, 0, 0]  # never a sibling
    assert hash(HAND) == hash(Tree([-1, 0, 0, 0, 1, 1, 3]))  # static: usable as a jit argument


def test_constructors_build_bfs_trees():
    assert Tree.chain(3).parents == (-1, 0, 1, 2)
    assert Tree.chain(3).ancestor_mask.tolist() == np.tril(np.ones((4, 4), bool)).tolist()
    t = Tree.from_branching((2, 2, 1))
    assert t.size == 1 + 2 + 4 + 4 and t.max_depth == 3
    assert t.parents[:7] == (-1, 0, 0, 1, 1, 2, 2)
    assert Tree.from_branching((3, 1)).children[:4].tolist() == [
        [1, 2, 3],
        [4, -1, -1],
        [5, -1, -1],
        [6, -1, -1],
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: Tree(()),  # empty
        lambda: Tree((-1,)),  # nothing drafted
        lambda: Tree((0, 0)),  # the root has a parent
        lambda: Tree((-1, 0, 2)),  # a parent after its child
        lambda: Tree((-1, 0, 1, 0)),  # not breadth-first
        lambda: Tree.chain(0),
        lambda: Tree.chain(64),  # 65 nodes
        lambda: Tree.from_branching(()),
        lambda: Tree.from_branching((2, 0)),
        lambda: Tree.from_branching((4, 4, 4)),  # 85 nodes
    ],
    ids=[
        "empty",
        "root-only",
        "rooted-root",
        "parent-after-child",
        "not-bfs",
        "chain0",
        "chain64",
        "no-widths",
        "zero-width",
        "too-large",
    ],
)
def test_invalid_trees_raise_one_clear_sentence(make):
    with pytest.raises(ValueError) as err:
        make()
    msg = str(err.value)
    assert msg.endswith(".") and "\n" not in msg


def test_chain_tree_gives_exactly_the_verdict_of_verify():
    """Same key, same laws: the tree walk over a chain IS ordinary speculative verification."""
    B, gamma, V = 500, 3, 5
    rng = np.random.default_rng(7)
    q = rng.dirichlet(np.full(V, 0.5), (B, gamma))  # (B, γ, V)
    p = rng.dirichlet(np.full(V, 0.5), (B, gamma + 1)).astype(np.float32)  # (B, γ+1, V)
    drafts = np.array([[rng.choice(V, p=qi) for qi in qb] for qb in q], np.int32)  # (B, γ)
    q = q.astype(np.float32)
    key = jax.random.key(7)
    chain = jax.jit(verify)(key, drafts, q, p)
    tokens = np.concatenate([np.zeros((B, 1), np.int32), drafts], axis=1)  # (B, γ+1)
    node_q = np.concatenate([np.zeros((B, 1, V), np.float32), q], axis=1)  # root's law: unused
    tree_verify = jax.jit(verify_tree, static_argnames="tree")
    tree = tree_verify(key, tokens, node_q, p, tree=Tree.chain(gamma))
    for field in ("n_accepted", "token", "is_bonus", "extra_probs"):
        np.testing.assert_array_equal(getattr(tree, field), getattr(chain, field), err_msg=field)
    n = np.asarray(tree.n_accepted)
    assert set(n.tolist()) == {0, 1, 2, 3}  # every outcome happened
    expect_path = np.minimum(np.arange(gamma + 1)[None], n[:, None])  # a chain's path is 0,1,..,n,n
    np.testing.assert_array_equal(tree.path, expect_path)


def test_walk_with_point_masses_known_answers():
    """Greedy target (one-hot p) and top-k siblings: the walk follows the target's argmaxes."""
    V = 4
    tokens = jnp.array([0, 2, 1, 3, 1, 0, 2])  # HAND's nodes
    node_q = jax.nn.one_hot(tokens, V)  # deterministic siblings
    argmax = jnp.array([1, 0, 0, 2, 3, 3, 1])  # the target's next token after each node
    p = jax.nn.one_hot(argmax, V)

    def walk(p):
        v = verify_tree_row(jax.random.key(0), tokens, node_q, p, HAND)
        return int(v.n_accepted), v.path.tolist(), int(v.token), bool(v.is_bonus)

    # the root wants 1: sibling 1 (token 2) rejected, node 2 (token 1) accepted; node 2 is a leaf
    assert walk(p) == (1, [0, 2, 2], 0, True)
    p = jax.nn.one_hot(jnp.array([2, 0, 0, 2, 3, 3, 1]), V)  # now the root wants 2, then 0
    # node 1 (token 2) accepted; its children 4 (1) and 5 (0): 4 rejected, 5 accepted, leaf -> 3
    assert walk(p) == (2, [0, 1, 5], 3, True)
    p = jax.nn.one_hot(jnp.array([0, 0, 0, 2, 3, 3, 1]), V)  # the root wants 0: nobody drafted it
    assert walk(p) == (0, [0, 0, 0], 0, False)  # the correction is 0, from p with 2, 1, 3 removed


def test_sibling_outcome_worked_example():
    accept, final = sibling_outcome(jnp.array([0.5, 0.3, 0.2]), jnp.eye(3)[:2], jnp.array([0, 1]))
    np.testing.assert_allclose(accept, [0.5, 0.6], atol=1e-6)
    np.testing.assert_allclose(final, [0, 0, 1], atol=1e-6)


def test_positions_and_gather_path():
    pos = tree_positions(jnp.array([4, 9]), HAND)
    assert pos.tolist() == [[4, 5, 5, 5, 6, 6, 6], [9, 10, 10, 10, 11, 11, 11]]
    x = jnp.arange(2 * 7 * 2).reshape(2, 7, 2)  # (B, N, 2)
    got = gather_path(x, jnp.array([[0, 3, 6], [0, 2, 2]]))
    assert got.shape == (2, 3, 2)
    assert got[:, :, 0].tolist() == [[0, 6, 12], [14, 18, 18]]


def test_compact_path_moves_the_right_slots():
    """from_branching((2, 1)): nodes 0 | 1 2 | 3 4 with 3 under 1 and 4 under 2."""
    tree = Tree.from_branching((2, 1))
    cache = init_cache(n_layer=2, n_head=1, head_dim=1, batch=2, capacity=8)
    slots = jnp.arange(8, dtype=jnp.float32)[None, :, None]  # (1, S, 1): a buffer is (B·H, S, Dh)
    filled = lambda layer: slots + jnp.array([0, 100])[:, None, None] + 1000 * layer
    cache = cache._replace(k=(filled(0), filled(1)), v=(filled(0) + 0.5, filled(1) + 0.5))
    start = jnp.array([1, 0])
    path = jnp.array([[0, 2, 4], [0, 1, 1]])  # row 0 accepted 2 then 4; row 1 stopped after 1
    out = compact_path(cache, start, path, tree)
    # row 0: nodes sit at slots 1..5; node 2 (slot 3) -> slot 2, node 4 (slot 5) -> slot 3
    assert out.k[0][0, :, 0].tolist() == [0, 1, 3, 5, 4, 5, 6, 7]
    # row 1: nodes at 0..4; node 1 (slot 1) -> slot 1 and, repeated, slot 2 (beyond the length)
    assert out.k[0][1, :, 0].tolist() == [100, 101, 101, 103, 104, 105, 106, 107]
    assert out.k[1][0, :, 0].tolist() == [1000, 1001, 1003, 1005, 1004, 1005, 1006, 1007]
    assert out.v[1][1, :, 0].tolist() == [
        1100.5,
        1101.5,
        1101.5,
        1103.5,
        1104.5,
        1105.5,
        1106.5,
        1107.5,
    ]
    assert out.length.tolist() == cache.length.tolist()


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig.tiny(vocab_size=50, n_ctx=32)
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(5)))
    return cfg, graphdef, params


def test_one_tree_pass_equals_each_path_run_causally(model):
    """Ancestor mask + depth positions: node i's logits are those of its root-to-i path."""
    cfg, g, p = model
    tree = Tree.from_branching((2, 2))
    B, L = 2, 5
    prefix = jax.random.randint(jax.random.key(1), (B, L), 0, cfg.vocab_size)
    nodes = jax.random.randint(jax.random.key(2), (B, tree.size), 0, cfg.vocab_size)  # (B, N)
    empty = GPT(cfg, nnx.Rngs(0)).empty_cache(B)
    _, _, cache = fwd(g, p, prefix, jnp.broadcast_to(jnp.arange(L), (B, L)), empty)
    start = cache.length  # the root goes to slot L, at position L
    tree_logits, _, _ = fwd(
        g, p, nodes, tree_positions(start, tree), cache, block_mask=jnp.asarray(tree.ancestor_mask)
    )  # (B, N, V)
    for d in range(tree.max_depth + 1):  # every node of one depth in one causal batch
        at_d = np.flatnonzero(tree.depth == d)
        paths = np.stack([np.flatnonzero(tree.ancestor_mask[i]) for i in at_d])  # (n_d, d+1)
        seqs = jnp.concatenate(
            [jnp.repeat(prefix, len(at_d), axis=0), nodes[:, paths].reshape(B * len(at_d), d + 1)],
            axis=1,
        )
        T = seqs.shape[1]
        full, _, _ = fwd(g, p, seqs, jnp.broadcast_to(jnp.arange(T), seqs.shape))
        np.testing.assert_allclose(
            tree_logits[:, at_d].reshape(B * len(at_d), -1),
            full[:, -1],
            atol=ATOL,
            err_msg=f"depth {d}",
        )


def test_compacted_cache_continues_like_a_causal_run(model):
    """After compact_path + rollback, decoding the next token matches a full recompute."""
    cfg, g, p = model
    tree = Tree.from_branching((2, 2))
    B, L = 2, 4
    prefix = jax.random.randint(jax.random.key(3), (B, L), 0, cfg.vocab_size)
    nodes = jax.random.randint(jax.random.key(4), (B, tree.size), 0, cfg.vocab_size)
    empty = GPT(cfg, nnx.Rngs(0)).empty_cache(B)
    _, _, cache = fwd(g, p, prefix, jnp.broadcast_to(jnp.arange(L), (B, L)), empty)
    start = cache.length
    _, _, cache = fwd(
        g, p, nodes, tree_positions(start, tree), cache, block_mask=jnp.asarray(tree.ancestor_mask)
    )
    path = jnp.array([[0, 2, 6], [0, 1, 1]])  # row 0 accepted 2 nodes, row 1 one
    n_accepted = jnp.array([2, 1])
    cache = rollback(compact_path(cache, start, path, tree), start + n_accepted + 1)
    nxt = jnp.array([[7], [8]])  # the correction / bonus token
    logits, _, _ = fwd(g, p, nxt, (start + n_accepted + 1)[:, None], cache)
    for b in range(B):
        seq = jnp.concatenate([prefix[b], nodes[b, path[b, : n_accepted[b] + 1]], nxt[b]])[None]
        full, _, _ = fwd(g, p, seq, jnp.arange(seq.shape[1])[None])
        np.testing.assert_allclose(logits[b, 0], full[0, -1], atol=ATOL, err_msg=f"row {b}")
