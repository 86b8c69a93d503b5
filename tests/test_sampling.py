"""sampling_probs: the one place logits become the law we sample from.

Known-answer cases worked out by hand, invariants (a distribution, support inside the top-k),
that changing a sampling setting never recompiles, and that the shortlist cut (`_truncate`)
is the cut a sort of the whole vocabulary finds, bit for bit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.extend.core import ClosedJaxpr, Jaxpr

from nanospec.sampling import (
    GREEDY,
    SHORTLIST,
    SamplingParams,
    _cut,
    _truncate,
    sample_rows,
    sampling_probs,
)

LOGITS = jnp.array([2.0, 1.0, 0.0, -1.0])


def test_worked_example_from_the_docstring():
    p = sampling_probs(LOGITS, SamplingParams.make(1.0))
    np.testing.assert_allclose(p, [0.6439, 0.2369, 0.0871, 0.0321], atol=1e-4)
    p = sampling_probs(LOGITS, SamplingParams.make(1.0, top_k=2))
    np.testing.assert_allclose(p, [0.7311, 0.2689, 0, 0], atol=1e-4)
    p = sampling_probs(LOGITS, SamplingParams.make(1.0, top_k=2, top_p=0.7))
    np.testing.assert_allclose(p, [1, 0, 0, 0], atol=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_p():
    # probs .644 .237 .087 .032: 0.85 needs the first two (.881), 0.9 needs three (.968)
    p = sampling_probs(LOGITS, SamplingParams.make(1.0, top_p=0.85))
    assert (np.asarray(p) > 0).tolist() == [True, True, False, False]
    p = sampling_probs(LOGITS, SamplingParams.make(1.0, top_p=0.9))
    assert (np.asarray(p) > 0).tolist() == [True, True, True, False]


def test_temperature_sharpens_and_flattens():
    cold = sampling_probs(LOGITS, SamplingParams.make(0.5))
    hot = sampling_probs(LOGITS, SamplingParams.make(2.0))
    np.testing.assert_allclose(cold, jax.nn.softmax(LOGITS / 0.5), rtol=1e-6)
    assert cold[0] > sampling_probs(LOGITS, SamplingParams.make(1.0))[0] > hot[0]


def test_temperature_zero_is_one_hot_argmax_and_first_index_wins_ties():
    np.testing.assert_array_equal(sampling_probs(LOGITS, GREEDY), [1, 0, 0, 0])
    np.testing.assert_array_equal(sampling_probs(jnp.array([0.0, 3.0, 3.0]), GREEDY), [0, 1, 0])


def test_ties_at_the_top_k_cut_are_all_kept():
    p = sampling_probs(jnp.array([1.0, 1.0, 1.0, 0.0]), SamplingParams.make(1.0, top_k=2))
    np.testing.assert_allclose(p, [1 / 3, 1 / 3, 1 / 3, 0], atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-8, 8), min_size=2, max_size=12),
    st.floats(0.05, 3.0),
    st.integers(0, 12),
    st.floats(0.05, 1.0),
)
def test_result_is_a_distribution_supported_inside_the_top_k(logits, t, k, top_p):
    logits = jnp.array(logits, jnp.float32)
    p = np.asarray(sampling_probs(logits, SamplingParams.make(t, k, top_p)), np.float64)
    assert p.min() >= 0 and abs(p.sum() - 1) < 1e-5
    assert p[int(jnp.argmax(logits))] > 0  # the most likely token always survives
    if k > 0:
        # The cut ranks probabilities (ties are kept together), so compare in that space:
        # logits [0, 1e-9] are one float32 probability, 0.5 each, and both survive top-1.
        probs = np.asarray(jax.nn.softmax(logits / jnp.float32(t)))
        kth = np.sort(probs)[::-1][min(k, len(logits)) - 1]
        assert np.all(p[probs < kth] == 0)


def test_changing_settings_does_not_recompile(compile_afresh):
    f = jax.jit(sampling_probs)
    for sp in (
        SamplingParams.make(1.0),
        SamplingParams.make(0.3, 5, 0.9),
        GREEDY,
        SamplingParams.make(2.0, 0, 0.5),
    ):
        f(LOGITS, sp)
    assert f._cache_size() == 1


def test_sample_rows_matches_the_law_and_never_draws_zero_mass():
    probs = jnp.tile(jnp.array([0.5, 0.3, 0.2, 0.0]), (20000, 1))
    draws = np.asarray(sample_rows(jax.random.key(0), probs))
    freq = np.bincount(draws, minlength=4) / len(draws)
    # N = 20000: each frequency has sd <= 0.0036; 0.02 is > 5 sd (false failure < 1e-6)
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.2, 0.0], atol=0.02)
    assert freq[3] == 0


def test_a_rows_draw_does_not_depend_on_the_rest_of_the_batch():
    key = jax.random.key(1)
    p = jax.nn.softmax(jax.random.normal(jax.random.key(2), (4, 30)))
    alone = sample_rows(key, p[:2])
    together = sample_rows(key, p)
    np.testing.assert_array_equal(alone, together[:2])


@pytest.mark.parametrize("bad", [{"top_p": 0.0}, {"top_p": 1.5}, {"temperature": -1.0}])
def test_the_cli_rejects_out_of_range_settings(bad):
    from nanospec.cli import check_sampling
    from nanospec.errors import UserError

    kw = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, **bad}
    with pytest.raises(UserError):
        check_sampling(**kw)


def test_settings_per_row_give_each_row_exactly_its_own_law():
    """The serving engine's rows each carry their own settings (sampling_probs per row)."""
    logits = jax.random.normal(jax.random.key(3), (5, 2, 64)) * 3
    rows = [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.0, 3, 0.5)]
    per_row = SamplingParams(*(jnp.asarray(x) for x in zip(*rows)))
    got = sampling_probs(logits, per_row)
    for b, setting in enumerate(rows):
        alone = sampling_probs(logits[b : b + 1], SamplingParams.make(*setting))
        assert jnp.array_equal(got[b : b + 1], alone), setting
    # all greedy, or no row cut: the branches skipped still give each row its law
    greedy = SamplingParams(*(jnp.asarray(x) for x in zip(*[(0.0, 0, 1.0)] * 5)))
    assert jnp.array_equal(sampling_probs(logits, greedy), sampling_probs(logits, GREEDY))


def test_a_hold_takes_its_tokens_out_before_the_temperature_and_the_cuts():
    """vLLM's min_tokens (sampling.hold), the docstring's example: min_new 2, token 0 held; a
    chain round from 1 token made has 1, 2, 3 made before its positions, so token 0 is
    impossible at the first only. Held first, then cut: top-k 1 picks the likeliest token
    that is not held (token 1), not "nothing"."""
    sp = SamplingParams.make(1.0, top_k=1, min_new=2, held=np.array([True, False, False, False]))
    p = sampling_probs(jnp.stack([LOGITS] * 3), sp, made=jnp.array([1, 2, 3]))
    np.testing.assert_array_equal(p, [[0, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]])
    warm = SamplingParams.make(1.0, min_new=2, held=np.array([True, False, False, False]))
    np.testing.assert_allclose(
        sampling_probs(LOGITS, warm, made=0), jax.nn.softmax(LOGITS.at[0].set(-jnp.inf)), rtol=1e-6
    )
    no_made = sampling_probs(LOGITS, warm)  # `made` left out: nothing held
    assert jnp.array_equal(no_made, sampling_probs(LOGITS, SamplingParams.make()))
    # per row (the engine's form): row b's hold counts row b's tokens made
    rows = SamplingParams.make(0.0, min_new=0, held=np.zeros(4, bool)).per_row(3)
    rows = rows._replace(
        min_new=jnp.array([0, 2, 5]),
        held=jnp.array([[1, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]], bool),
    )
    made = jnp.array([[0, 1], [1, 2], [3, 4]])  # (B, 2 positions)
    got = sampling_probs(jnp.broadcast_to(LOGITS, (3, 2, 4)), rows, made)
    assert np.asarray(got).argmax(-1).tolist() == [[0, 0], [1, 0], [2, 2]]


# The shortlist: V = 3000 rows whose cuts land on both sides of the SHORTLIST (256) likeliest.
V = 3000
SHAPES = {  # name: logits (V,); a flat law's top-p cut needs the sort, a peaked one's does not
    "flat": jax.random.normal(jax.random.key(4), (V,)),
    "peaked": jax.random.normal(jax.random.key(5), (V,)) * 6,
    "ties": jnp.round(jax.random.normal(jax.random.key(6), (V,)) * 3),  # runs of equal probs
    "peaked-ties": jnp.round(jax.random.normal(jax.random.key(7), (V,)) * 3) * 3,
}


@jax.jit
def _cut_by_sorting(probs, top_k, top_p):
    """The law from a sort of the whole vocabulary: the algorithm before the shortlist, with
    top_p = 1 meaning no top-p cut (before, rounding in the cumsum could drop the far tail)."""
    n = probs.shape[-1]
    desc = -jnp.sort(-probs, axis=-1)  # (..., V) largest first
    k = jnp.where(top_k > 0, jnp.minimum(top_k, n), n)
    in_top_k = jnp.arange(n) < k
    kept_mass = jnp.sum(jnp.where(in_top_k, desc, 0.0), axis=-1, keepdims=True)
    before = (jnp.cumsum(desc, axis=-1) - desc) / kept_mass  # the mass ranked above each token
    keep_sorted = in_top_k & ((before < top_p) | (top_p >= 1))
    n_keep = jnp.sum(keep_sorted, axis=-1, keepdims=True)
    threshold = jnp.take_along_axis(desc, n_keep - 1, axis=-1)
    kept = jnp.where(probs >= threshold, probs, 0.0)
    return kept / jnp.sum(kept, axis=-1, keepdims=True)


def _fits(probs, top_k, top_p):
    """Per row: whether the cut is found in the shortlist (True) or needs the sort."""
    k = jnp.where(jnp.asarray(top_k) > 0, top_k, probs.shape[-1])
    return np.asarray(_cut(probs, jax.lax.top_k(probs, SHORTLIST)[0], k, top_p)[1])[..., 0]


@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.999])
@pytest.mark.parametrize("top_k", [0, 1, 40, 256, 257, 3000])
def test_the_shortlist_cut_is_the_sorted_cut_bit_for_bit(top_k, top_p):
    probs = jax.nn.softmax(jnp.stack(list(SHAPES.values())), axis=-1)  # (4, V)
    got = jax.jit(_truncate)(probs, jnp.int32(top_k), jnp.float32(top_p))
    assert jnp.array_equal(got, _cut_by_sorting(probs, top_k, top_p))
    # Both paths ran: a top-k past the shortlist sorts; a top-p cut alone sorts on the flat law
    # and not on the peaked one.
    fits = _fits(probs, top_k, top_p).tolist()
    if 0 < top_k <= SHORTLIST or top_p == 1 and top_k in (0, V):
        assert all(fits)
    elif top_k == 257:
        assert not any(fits)
    else:
        assert fits[:2] == [False, True]


def test_top_p_one_keeps_every_token_of_the_top_k():
    """top_p = 1 is no top-p cut. The sort-based cut compared the rounded mass ranked above a
    token with 1, which a far-tail token's can reach: alone, the peaked law lost 1,560 of its
    3,000 tokens to top_k = V, and 15 of its top 1000 to top_k = 1000."""
    for name, logits in SHAPES.items():
        probs = np.asarray(jax.nn.softmax(logits))
        everything = np.asarray(sampling_probs(logits, SamplingParams.make(1.0, top_k=V)))
        assert np.array_equal(everything > 0, probs > 0), name
        top_1000 = np.asarray(sampling_probs(logits, SamplingParams.make(1.0, top_k=1000)))
        kth = np.sort(probs)[::-1][999]
        assert np.array_equal(top_1000 > 0, probs >= kth), name  # ties with the 1000th too


def test_a_row_that_needs_the_sort_leaves_the_others_laws_alone():
    """Per-row settings: one row's cut lies past the shortlist (the batch sorts), others'
    inside it; each row's law is still exactly the law its own settings give alone."""
    names = ["peaked", "flat", "peaked", "ties", "flat"]
    rows = [(1.0, 40, 1.0), (1.0, 1000, 1.0), (0.8, 0, 0.9), (1.0, 0, 0.999), (1.0, 0, 1.0)]
    logits = jnp.stack([jnp.stack([SHAPES[n], SHAPES[n][::-1]]) for n in names])  # (5, 2, V)
    per_row = SamplingParams(*(jnp.asarray(x) for x in zip(*rows)))
    got = jax.jit(sampling_probs)(logits, per_row)
    for b, setting in enumerate(rows):
        alone = jax.jit(sampling_probs)(logits[b : b + 1], SamplingParams.make(*setting))
        assert jnp.array_equal(got[b : b + 1], alone), setting
    probs = jax.nn.softmax(logits[:3, 0] / jnp.array([[1.0], [1.0], [0.8]]), axis=-1)
    fits = _fits(probs, jnp.array([[40], [1000], [0]]), jnp.array([[1.0], [1.0], [0.9]]))
    assert fits.tolist() == [True, False, True]


def test_vmap_over_rows_gives_the_batched_law():
    """Under vmap the cond on "every row fits" runs both branches; each row's law stays put."""
    logits = jnp.stack([SHAPES["peaked"], SHAPES["flat"], SHAPES["ties"]])
    sp = SamplingParams.make(1.0, top_k=0, top_p=0.9)
    mapped = jax.jit(jax.vmap(sampling_probs, in_axes=(0, None)))(logits, sp)
    assert jnp.array_equal(mapped, jax.jit(sampling_probs)(logits, sp))


def _primitives(jaxpr: Jaxpr, in_cond: bool = False):
    """(name, whether a cond branch encloses it) for every equation, sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name, in_cond
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if isinstance(sub, (ClosedJaxpr, Jaxpr)):
                    sub = sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub
                    yield from _primitives(sub, in_cond or eqn.primitive.name == "cond")


def test_the_full_sort_runs_only_inside_a_branch():
    """_truncate alone (sampling_probs wraps it in a cond of its own): its one cond is the
    shortlist's, and a sort of the whole vocabulary runs only in that cond's branch."""
    probs = jax.nn.softmax(jnp.stack([SHAPES["flat"]] * 2), axis=-1)
    jaxpr = jax.make_jaxpr(_truncate)(probs, jnp.int32(50), jnp.float32(0.9)).jaxpr
    sorts = [in_cond for name, in_cond in _primitives(jaxpr) if name == "sort"]
    assert sorts and all(sorts)
    assert ("top_k", False) in set(_primitives(jaxpr))  # the shortlist is always there
