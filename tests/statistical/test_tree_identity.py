"""Token trees are exact: the text a tree round commits follows the target's law.

Layer 1 — exact identity, no sampling. Under one parent with target law p, m siblings are tried
in turn; `sibling_outcome` (the rule `verify_tree_row` applies, minus the uniforms) gives the
probability each sibling is accepted given the earlier ones were rejected, and the residual left
at the end. The law of the token that leaves the parent is then, summed over sibling tuples xs,

    P(y) = Σ_xs P(xs) · [ Σ_k Π_{j<k} (1 − a_j) · a_k · 1{x_k = y} + Π_j (1 − a_j) · r_m(y) ].

With V = 5 and m = 1..3 the sum is enumerated exactly, in float64: every tuple of i.i.d. draws
from q (5^m), the deterministic top-m tuple (point masses), and draws without replacement with
node_q updated. Hypothesis draws (p, q) from Dirichlets with small and large concentration,
sparse supports, q with zeros where p has mass, p == q, one-hot and truncated laws. Threshold:
|P − p| < 1e-9 everywhere; no randomness, so the false-failure probability is 0. The known
counterexample (without replacement, node_q not updated) is shown to fail.

Layer 2 — Monte Carlo on the real jitted `verify_tree`. A synthetic target and drafter over
V = 4: laws p(next | prefix) and q(next | prefix) are fixed random tables for every prefix of up
to 4 tokens. Each row drafts a depth-2 tree (children i.i.d. from q at their parent, or the
parent's top-k tokens as point masses), verifies it, commits path + correction/bonus, and
repeats until 3 tokens are committed (a round commits at most 3, so the bonus shows up). The
exact law of 3 tokens is the target's chain rule (64 cells). N = 200,000 rows per test, Pearson
chi-square with cells of expected count < 5 pooled, threshold p-value > 1e-6: the false-failure
probability is 1e-6 per test (seeds are fixed, so CI is deterministic).

Layer 3 — power. The same N and test reject two broken walks with p-values below 1e-12: siblings
all tested against the parent's p (the residual not carried from one sibling to the next), and
the residual replaced by p (the correction resampled from p).
"""

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nanospec.trees.tree
from nanospec.compat import enable_x64
from nanospec.sampling import sample
from nanospec.trees.tree import Tree, gather_path, sibling_laws, sibling_outcome, verify_tree
from nanospec.verify import residual
from tests.statistical.laws import chi_square_pvalue
from tests.statistical.test_verify_identity import acceptance_probability, laws

TOL = 1e-9

# ---------------------------------------------------------------- layer 1: exact enumeration

OUTCOMES = jax.jit(jax.vmap(sibling_outcome, in_axes=(None, 0, 0)))  # over sibling tuples


def leaving_law(p: np.ndarray, node_qs: np.ndarray, xs: np.ndarray, weights: np.ndarray):
    """Law of the token leaving the parent: xs (T, m) tuples with probabilities weights (T,)
    and laws node_qs (T, m, V). Everything in float64."""
    with enable_x64(True):
        accept, final = map(np.asarray, OUTCOMES(p, node_qs, xs))  # (T, m), (T, V)
    rejected_before = np.cumprod(np.concatenate([np.ones_like(accept[:, :1]), 1 - accept], 1), 1)
    law = weights * rejected_before[:, -1] @ final  # every sibling rejected: the residual
    for k in range(xs.shape[1]):
        np.add.at(law, xs[:, k], weights * rejected_before[:, k] * accept[:, k])
    return law


def iid_law(p, q, m):
    xs = np.array(list(itertools.product(range(len(p)), repeat=m)))  # (V^m, m)
    return leaving_law(p, np.broadcast_to(q, xs.shape + q.shape), xs, q[xs].prod(axis=1))


def top_m_law(p, q, m):
    xs = np.argsort(-q, kind="stable")[None, :m]  # (1, m): a deterministic drafter's top-m
    return leaving_law(p, np.eye(len(p))[xs], xs, np.ones(1))


def without_replacement_law(p, q, m, update_node_q=True):
    """Distinct siblings: sibling k is drawn from q with siblings 0..k-1 removed."""
    xs = np.array([t for t in itertools.permutations(range(len(p)), m)])  # (T, m)
    drawn_from = np.empty(xs.shape + (len(p),))
    for k in range(m):
        qk = np.tile(q, (len(xs), 1))
        qk[np.arange(len(xs))[:, None], xs[:, :k]] = 0
        total = qk.sum(1, keepdims=True)
        drawn_from[:, k] = np.where(total > 0, qk / np.where(total > 0, total, 1), 0)
    weights = drawn_from[np.arange(len(xs))[:, None], np.arange(m), xs].prod(axis=1)
    node_qs = drawn_from if update_node_q else np.broadcast_to(q, drawn_from.shape)
    return leaving_law(p, node_qs, xs, weights)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_siblings_leave_the_parent_with_law_p(data):
    p, q = data.draw(laws(V=5)), data.draw(laws(V=5))
    if data.draw(st.booleans()):
        q = p.copy()  # p == q: the first sibling is always accepted
    m = data.draw(st.integers(1, 3))
    np.testing.assert_allclose(iid_law(p, q, m), p, atol=TOL, err_msg="i.i.d. siblings")
    np.testing.assert_allclose(top_m_law(p, q, m), p, atol=TOL, err_msg="top-m point masses")
    full_support = 0.5 * q + 0.5 / len(q)  # m distinct draws need m tokens with mass
    np.testing.assert_allclose(
        without_replacement_law(p, full_support, m),
        p,
        atol=TOL,
        err_msg="without replacement, node_q updated",
    )


def test_without_replacement_and_stale_node_q_is_not_exact():
    """trees/tree.py's counterexample: p = [0 .2 .8], q = [.9 .1 0] -> token 1 every time."""
    p, q = np.array([0.0, 0.2, 0.8]), np.array([0.9, 0.1, 0.0])
    np.testing.assert_allclose(
        without_replacement_law(p, q, 2, update_node_q=False), [0, 1, 0], atol=TOL
    )
    np.testing.assert_allclose(without_replacement_law(p, q, 2), p, atol=TOL)  # the fix


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_sibling_acceptance_is_what_accept_reject_accepts(data):
    """sibling_outcome's min(1, r/q) is the measure of the uniforms `accept_reject` accepts."""
    p, q = data.draw(laws(V=5)), data.draw(laws(V=5))
    xs = np.array(data.draw(st.lists(st.integers(0, 4), min_size=3, max_size=3)))
    q = 0.5 * q + 0.5 / len(q)  # every x has q(x) > 0, as for drawn tokens
    node_qs = np.broadcast_to(q, (3, 5))
    with enable_x64(True):
        rs, _ = map(np.asarray, sibling_laws(p, node_qs, np.ones(3, bool)))
        accept, _ = sibling_outcome(p, node_qs, xs)
    measured = acceptance_probability(rs[np.arange(3), xs], q[xs])
    np.testing.assert_allclose(accept, measured, atol=1e-12)


# ------------------------------------------------------- layer 2: Monte Carlo, the real walk

V = 4
M = 3  # committed tokens compared with the target's chain rule
N = 200_000
THRESHOLD = 1e-6
POWER = 1e-12
# A prefix of length l with base-V code c is row OFFSET[l] + c of a law table.
OFFSET = np.concatenate([[0], np.cumsum(V ** np.arange(5))])  # lengths 0..4: up to 2 + depth 2
TREES = {
    "2x2": Tree.from_branching((2, 2)),
    "3x1": Tree.from_branching((3, 1)),
    "ragged": Tree((-1, 0, 0, 0, 1, 1, 3)),  # 3 candidates; two, none and one children
}


def world(seed: int = 0):
    """(p_table, q_table), each (341, V): the target's and the drafter's law after every prefix.

    Peaked target laws; the drafter is half target, half noise, and in a quarter of the
    prefixes misses the target's favourite token entirely (q = 0 where p has mass).
    """
    rng = np.random.default_rng(seed)
    n = OFFSET[-1]
    p = rng.dirichlet(np.full(V, 0.7), n)
    q = 0.5 * p + 0.5 * rng.dirichlet(np.full(V, 0.7), n)
    holes = np.flatnonzero(rng.random(n) < 0.25)
    q[holes, p[holes].argmax(1)] = 0.0
    return p.astype(np.float32), (q / q.sum(1, keepdims=True)).astype(np.float32)


def target_law(p_table: np.ndarray) -> np.ndarray:
    """P(t1 t2 t3) by the chain rule, indexed by the base-V code t1·16 + t2·4 + t3."""
    p = p_table.astype(np.float64)
    t = np.array(list(itertools.product(range(V), repeat=M)))  # (64, 3)
    return (
        p[OFFSET[0], t[:, 0]]
        * p[OFFSET[1] + t[:, 0], t[:, 1]]
        * p[OFFSET[2] + V * t[:, 0] + t[:, 1], t[:, 2]]
    )


def draft_tree(key, committed, length, tree: Tree, top_k: bool, p_table, q_table):
    """Every node's token, node_q and target law for rows whose prefix is committed[:, :length]."""
    n = committed.shape[0]
    code = jnp.zeros(n, jnp.int32)
    for j in range(M):
        code = jnp.where(j < length, code * V + committed[:, j], code)
    offset = jnp.asarray(OFFSET)
    lens, codes = [length], [code]
    tokens, node_q = [jnp.zeros(n, jnp.int32)], [jnp.zeros((n, V))]  # the root is never tested
    for c in range(1, tree.size):
        par = tree.parents[c]
        q = q_table[offset[lens[par]] + codes[par]]  # (n, V) the drafter's law at the parent
        if top_k:  # deterministic: the parent's sibling-rank-th most likely token, a point mass
            rank = c - int(tree.children[par, 0])
            x = jnp.argsort(-q, axis=-1)[:, rank]
            q = jax.nn.one_hot(x, V)
        else:  # i.i.d. from q at the parent, whatever the earlier siblings drew
            x = sample(jax.random.fold_in(key, c), q)
        tokens.append(x)
        node_q.append(q)
        lens.append(lens[par] + 1)
        codes.append(codes[par] * V + x)
    p = jnp.stack([p_table[offset[l] + cd] for l, cd in zip(lens, codes)], axis=1)  # (n, N, V)
    return jnp.stack(tokens, 1), jnp.stack(node_q, 1), p


@partial(jax.jit, static_argnames=("tree", "top_k", "n"))
def generate(key, p_table, q_table, tree: Tree, top_k: bool, n: int):
    """n independent rows: tree rounds until M tokens are committed. Returns (n, M) tokens and
    the first round's verdict."""
    committed, length = jnp.zeros((n, M), jnp.int32), jnp.zeros(n, jnp.int32)
    rows = jnp.arange(n)
    for rnd in range(M):  # every round commits at least one token
        key_draft, key_verify = jax.random.split(jax.random.fold_in(key, rnd))
        tokens, node_q, p = draft_tree(
            key_draft, committed, jnp.minimum(length, M - 1), tree, top_k, p_table, q_table
        )
        v = verify_tree(key_verify, tokens, node_q, p, tree)
        if rnd == 0:
            first = v
        drafts = gather_path(tokens, v.path)[:, 1:]  # (n, D) accepted tokens, then repeats
        emitted = jnp.concatenate([drafts, drafts[:, :1]], 1).at[rows, v.n_accepted].set(v.token)
        for s in range(M):
            j = s - length  # slot s takes the round's j-th token, if it has one
            take = (j >= 0) & (j <= v.n_accepted)
            committed = committed.at[:, s].set(
                jnp.where(take, emitted[rows, jnp.clip(j, 0, tree.max_depth)], committed[:, s])
            )
        length = length + v.n_accepted + 1
    return committed, first


def law_pvalue(shape: str, top_k: bool, seed: int, n: int = N):
    p_table, q_table = world()
    committed, first = generate(jax.random.key(seed), p_table, q_table, TREES[shape], top_k, n)
    cells = np.asarray(committed) @ (V ** np.arange(M - 1, -1, -1))
    return chi_square_pvalue(cells, target_law(p_table)), first


@pytest.mark.parametrize("top_k", [False, True], ids=["iid", "top_k"])
@pytest.mark.parametrize("shape", TREES)
def test_tree_rounds_commit_the_target_law(shape, top_k):
    pvalue, first = law_pvalue(shape, top_k, seed=1)
    assert pvalue > THRESHOLD, f"{shape}, top_k={top_k}: p-value {pvalue:.3g}"
    # The test exercises every branch of the walk, many times over:
    n_acc, depth1 = np.asarray(first.n_accepted), np.asarray(first.path[:, 1])
    assert np.mean(n_acc == 0) > 0.01  # every root candidate rejected: a correction
    assert np.mean(first.is_bonus) > 0.05  # a leaf reached: a bonus token
    assert np.mean(depth1 == TREES[shape].children[0, 1]) > 0.02  # a second sibling accepted


def _siblings_all_tested_against_p(r, qs, valid):
    """Treats each sibling as a fresh one-step test against the parent's p, with one residual
    at the end: forgets that rejecting a sibling changes the law the next one must target."""
    return jnp.broadcast_to(r, qs.shape), jnp.where(valid[0], residual(r, qs[0]), r)


def _residual_is_p(p, q):
    return p  # every rejection resamples from p: over-produces what the drafter proposes


BROKEN = {
    "residual_not_carried_between_siblings": ("sibling_laws", _siblings_all_tested_against_p),
    "correction_from_p": ("residual", _residual_is_p),
}


@pytest.mark.parametrize("name", BROKEN)
def test_the_tree_law_test_rejects_a_broken_walk(break_with, name):
    break_with(nanospec.trees.tree, *BROKEN[name])
    pvalue, _ = law_pvalue("2x2", top_k=False, seed=2)
    assert pvalue < POWER, f"{name} slipped through: p-value {pvalue:.3g}"
