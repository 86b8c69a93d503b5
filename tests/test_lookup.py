"""Prompt lookup's matching rule (drafters.lookup) against a plain-Python reference."""

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanospec.drafters import PromptLookup, lookup


def reference(text: list[int], gamma: int, max_ngram: int, min_ngram: int):
    """The rule in words: the longest suffix (max_ngram down to min_ngram tokens) that occurs
    earlier; its earliest occurrence; the γ tokens after it, wrapping with the match's period.
    Nothing matched: repeat the last token."""
    L = len(text)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        ends = [j for j in range(n - 1, L - 1) if text[j - n + 1 : j + 1] == text[L - n :]]
        if ends:
            end = ends[0]
            return [text[end + 1 + i % (L - 1 - end)] for i in range(gamma)], n
    return [text[-1]] * gamma, 0


def run(text, gamma, max_ngram=3, min_ngram=1, capacity=24):
    seq = jnp.zeros(capacity, jnp.int32).at[: len(text)].set(jnp.array(text, jnp.int32))
    drafts, n = jax.jit(lookup, static_argnums=(2, 3, 4))(
        seq, jnp.int32(len(text)), gamma, max_ngram, min_ngram
    )
    return np.asarray(drafts).tolist(), int(n)


def test_the_docstring_example():
    a, b, c = 1, 2, 3
    assert run([a, b, c, a, b], 4, max_ngram=2) == ([c, a, b, c], 2)


def test_the_longest_match_wins_then_its_earliest_occurrence():
    # "x y" occurs twice before the end; "w x y" only at the second: the 3-gram decides.
    w, x, y, p, q, z = 1, 2, 3, 4, 5, 6
    assert run([x, y, p, w, x, y, q, z, w, x, y], 2) == ([q, z], 3)
    # Only the 2-gram "x y" matches (twice): the earliest one is followed by p.
    assert run([x, y, p, w, x, y, q, z, x, y], 2) == ([p, w], 2)


def test_nothing_matched_repeats_the_last_token():
    assert run([1, 2, 3, 4], 3) == ([4, 4, 4], 0)


def test_padding_after_the_text_is_never_read():
    # The padding is zeros; a text ending in 0 must not match a zero beyond its end.
    drafts, n = run([5, 0, 7, 0], 3, capacity=12)
    assert (drafts, n) == ([7, 0, 7], 1)


@pytest.mark.parametrize("max_ngram,min_ngram", [(3, 1), (5, 2)])
def test_agrees_with_the_reference_on_random_texts(max_ngram, min_ngram):
    rng = random.Random(0)
    for _ in range(60):
        text = [rng.randrange(4) for _ in range(rng.randint(1, 20))]
        gamma = rng.choice([1, 3, 6])
        assert run(text, gamma, max_ngram, min_ngram) == reference(
            text, gamma, max_ngram, min_ngram
        ), text


def test_the_drafter_proposes_point_masses_per_row():
    drafter = PromptLookup(vocab_size=8)
    seq = jnp.array([[1, 2, 3, 1, 2, 0, 0, 0], [4, 4, 4, 0, 0, 0, 0, 0]], jnp.int32)
    drafts, q, _ = drafter.propose((), (), seq, jnp.array([5, 3]), jax.random.key(0), None, 3)
    assert drafts.tolist() == [[3, 1, 2], [4, 4, 4]]
    np.testing.assert_array_equal(q, jax.nn.one_hot(drafts, 8))
