"""The statistics the checker needs: a chi-square p-value, total variation, a law as text.

Every sampled check states its false-failure probability: a correct function fails a
chi-square check only if its p-value falls below DELTA, the test's level (δ in
lessons/NOTATION.md), which happens with probability DELTA.
"""

import numpy as np
from jax.scipy.special import gammaincc

from nanospec.teach import tv

DELTA = 1e-6  # δ: a correct function fails one sampled check by chance once in a million


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's goodness-of-fit p-value of `counts` against the law `probs`.

    An outcome the law gives no mass but that was seen is impossible: p-value 0.

    >>> round(chi2_pvalue(np.array([50, 50]), np.array([.5, .5])), 3)
    1.0
    """
    counts = np.asarray(counts, float)
    expected = counts.sum() * np.asarray(probs, float)
    support = expected > 0
    if np.any(counts[~support] > 0):
        return 0.0
    stat = np.sum((counts[support] - expected[support]) ** 2 / expected[support])
    df = int(support.sum()) - 1
    return float(gammaincc(df / 2, stat / 2)) if df > 0 else 1.0


def show(law) -> str:
    """[.5 .3 .2]-style text of a law, two decimals, as the lessons write them."""
    return (
        "["
        + " ".join(
            f"{x:.2f}".replace("0.", ".", 1) if x < 1 else f"{x:.2f}"
            for x in np.asarray(law, float)
        )
        + "]"
    )


def differs(
    what: str, counts: np.ndarray, law: np.ndarray, name: str = "", outcome: str = "token"
) -> str | None:
    """None if `counts` fit `law` (p-value ≥ DELTA), else a sentence saying how they differ;
    `name` ("p[0]") says which of the exercise's laws `law` is, and `outcome` what its
    outcomes are ("token", or "n_accepted =" for a count of drafts)."""
    counts = np.asarray(counts, float)
    if chi2_pvalue(counts, law) >= DELTA:
        return None
    seen = counts / counts.sum()
    worst = int(np.argmax(np.abs(seen - law)))
    return (
        f"{what} should have the law {name + ' = ' if name else ''}{show(law)} but came "
        f"out {show(seen)} over "
        f"{int(counts.sum()):,} draws (total variation {tv(seen, law):.3f}; {outcome} "
        f"{worst}: {seen[worst]:.1%} instead of {law[worst]:.1%}; a correct rule fails this check "
        f"by chance with probability {DELTA:g})"
    )
