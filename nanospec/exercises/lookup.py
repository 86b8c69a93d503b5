"""Checks for exercise 7: prompt lookup, against the library's own drafter.

The learner's `lookup` is compared with `nanospec.drafters.lookup` on hundreds of short random
contexts over small alphabets (so n-grams repeat often), after the docstring's example and a
context with no match.
"""

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.drafters import lookup as reference_lookup
from nanospec.exercises.learner import Failure, plain

SEQ = 48  # the padded row the library's lookup reads


def _reference(contexts, gamma: int, max_ngram: int, min_ngram: int) -> list[list[int]]:
    """The library's drafts for each context ([] where nothing matched), in one batched call."""
    seq = np.zeros((len(contexts), SEQ), np.int32)
    for b, c in enumerate(contexts):
        seq[b, : len(c)] = c
    lengths = jnp.array([len(c) for c in contexts], jnp.int32)
    row = lambda s, n: reference_lookup(s, n, gamma, max_ngram, min_ngram)
    drafts, matched = jax.jit(jax.vmap(row))(jnp.asarray(seq), lengths)
    return [d.tolist() if m > 0 else [] for d, m in zip(np.asarray(drafts), np.asarray(matched))]


def _contexts(rng, count: int) -> list[list[int]]:
    return [
        rng.integers(0, int(rng.integers(2, 7)), int(rng.integers(2, 30))).tolist()
        for _ in range(count)
    ]


def check_lookup(lookup):
    """Exercise 7: the docstring's example, no match, then 600 random contexts."""
    for context, gamma, want, what in (
        ([7, 8, 9, 7, 8], 4, [9, 7, 8, 9], "the docstring's example"),
        ([1, 2, 3], 4, [], "no match"),
    ):
        got = _call(lookup, context, gamma, 3, 1)
        if got != want:
            raise Failure(
                f"{what}, lookup({context}, {gamma}, 3, 1), should give {want}; yours "
                f"gives {got}." + _lookup_hint(got, context, gamma, 3, 1)
            )
    yield "the docstring's example gives [9, 7, 8, 9]"
    yield "returns [] when nothing matches"
    rng = np.random.default_rng(0)
    for gamma, max_ngram, min_ngram in ((4, 3, 1), (1, 2, 1), (7, 4, 2), (3, 1, 1)):
        contexts = _contexts(rng, 150)
        for context, want in zip(contexts, _reference(contexts, gamma, max_ngram, min_ngram)):
            got = _call(lookup, list(context), gamma, max_ngram, min_ngram)
            if got != want:
                raise Failure(
                    f"lookup({context}, γ = {gamma}, max_ngram = {max_ngram}, "
                    f"min_ngram = {min_ngram}) should give {want}; yours gives {got}."
                    + _lookup_hint(got, context, gamma, max_ngram, min_ngram)
                )
    yield "matches nanospec.drafters.lookup on 600 random contexts"


def _call(lookup, context, gamma, max_ngram, min_ngram):
    """The learner's drafts as plain ints; a division by zero is the suffix matching itself."""
    try:
        out = plain(lookup(context, gamma, max_ngram, min_ngram))
    except Failure as failure:
        if "ZeroDivisionError" not in str(failure):
            raise
        raise Failure(
            f"{failure} (on lookup({context}, {gamma}, {max_ngram}, {min_ngram})). The "
            f"period L − 1 − j is 0 only when j = L − 1, where the 'occurrence' is the "
            f"suffix itself: an earlier one must end by index L − 2."
        ) from None
    if isinstance(out, tuple):
        raise Failure(f"lookup must return a list of ints; yours returned a tuple, {out}.")
    return out


def _lookup_hint(got, context, gamma, max_ngram, min_ngram) -> str:
    """Name the usual mistake: a short slice past the end, the suffix matching itself, the
    latest occurrence instead of the earliest; else say where the match is."""
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        ends = [
            j
            for j in range(n - 1, L - 1)
            if L > n and context[j - n + 1 : j + 1] == context[L - n :]
        ]
        if not ends:
            continue
        j, period = ends[0], L - 1 - ends[0]
        want = [context[j + 1 + i % period] for i in range(gamma)]
        if isinstance(got, list) and 0 < len(got) < gamma and got == want[: len(got)]:
            return (
                f" Only {period} tokens follow the match {context[L - n :]} (it ends at index "
                f"{j}), so a slice reads past the end of the context and stops short: wrap "
                f"around, drafts[i] = context[j + 1 + i % (L − 1 − j)]."
            )
        if got == []:
            return (
                f" The last {n} tokens {context[L - n :]} occurred before, ending at index {j}: "
                f"if you matched the suffix with itself (ending at index L − 1 = {L - 1}), "
                f"search only j ≤ L − 2, and try shorter n-grams before giving up."
            )
        latest = [context[ends[-1] + 1 + i % (L - 1 - ends[-1])] for i in range(gamma)]
        if got == latest and len(ends) > 1:
            return (
                f" You copied after the latest occurrence of {context[L - n :]} (ending at "
                f"index {ends[-1]}); copy after the earliest (ending at index {j})."
            )
        return (
            f" The longest suffix that occurred before is {context[L - n :]} (n = {n}), "
            f"earliest ending at index {j}, so the drafts start at context[{j + 1}] = "
            f"{context[j + 1]}."
        )
    if got:
        return (
            f" No n-gram of the last {min_ngram} to {max_ngram} tokens occurred earlier "
            f"(ending by index L − 2 = {L - 2}), so there is nothing to copy: return []."
        )
    return ""
