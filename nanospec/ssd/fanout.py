"""How many outcomes SSD caches per k — the fan-out — and SSD's settings as users give them.

ssd/loop.py caches, for each k = 0..γ drafts accepted, the F_k corrections t* the draft model finds
likeliest. `uniform`: F for every k. `geometric`: if a round accepts each draft with rate a,
outcome k has probability ∝ a^k (and a^γ/(1 − a) relatively more for the bonus); if caching F
tokens misses with probability F^(−r) (a power law, r fitted from measured hit rates), spending
a fixed budget to minimise misses gives F_k ∝ P(k)^(1/(1+r)).

What this file deliberately leaves out: fitting a and r (measure/ssd_hits.py measures them) and a
fan-out that adapts during a run.
"""

from dataclasses import dataclass

import numpy as np

from nanospec.errors import UserError


def uniform_fanout(f: int, gamma: int) -> tuple[int, ...]:
    """F tokens cached for every k = 0..γ: (γ+1)·F branches.

    >>> uniform_fanout(2, 3)
    (2, 2, 2, 2)
    """
    return (f,) * (gamma + 1)


def geometric_fanout(budget: int, a: float, r: float, gamma: int) -> tuple[int, ...]:
    """Split `budget` branches over k = 0..γ as F_k ∝ P(k)^(1/(1+r)), P(k) ∝ a^k (1 − a) for
    k < γ and a^γ for k = γ (largest remainders; every k keeps at least one branch).

    Minimising the expected miss rate Σ_k P(k)·F_k^(−r) under Σ F_k = budget (a Lagrange
    multiplier) gives that exponent: a steeper power law (large r) spreads the budget.

    >>> geometric_fanout(12, 0.3, 0.5, 3)  # early rejections likely: cache wide at k = 0
    (6, 3, 2, 1)
    >>> geometric_fanout(8, 0.9, 0.3, 3)  # most rounds end with the bonus (k = 3)
    (2, 2, 1, 3)
    """
    if budget < gamma + 1:
        raise UserError(
            f"A fan-out budget of {budget} cannot cover the {gamma + 1} outcomes "
            f"k = 0..{gamma}; give at least {gamma + 1}."
        )
    k = np.arange(gamma + 1)
    p = np.where(k < gamma, a**k * (1 - a), a**gamma)
    w = p ** (1 / (1 + r))
    share = (budget - (gamma + 1)) * w / w.sum()  # one each first, the rest by weight
    f = 1 + np.floor(share).astype(int)
    for i in np.argsort(-(share - np.floor(share)))[: budget - f.sum()]:
        f[i] += 1
    return tuple(int(x) for x in f)


# The geometric fan-out's defaults for the shipped pair (γ = 4, facts prompts): the acceptance
# rate a and the miss power law's r, greedy and at T = 1, measured by
# `python -m nanospec.measure.ssd_hits` (docs/results.md, "Speculative speculative decoding").
SHIPPED_A_R = {"greedy": (0.787, 1.68), "sampled": (0.811, 0.37)}


def parse_fanout(text: str, gamma: int, temperature: float = 1.0) -> tuple[int, ...]:
    """--fanout: "F" (F for every k), "F0,F1,..,Fγ" (one per k) or "geometric:BUDGET" (a and r
    measured on the shipped pair, greedy or sampled as `temperature` says).

    >>> parse_fanout("2", 3), parse_fanout("3,1,1,2", 3)
    ((2, 2, 2, 2), (3, 1, 1, 2))
    """
    try:
        if text.startswith("geometric:"):
            a, r = SHIPPED_A_R["greedy" if temperature == 0 else "sampled"]
            return geometric_fanout(int(text.split(":", 1)[1]), a, r, gamma)
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(
            f"--fanout takes F, F0,..,Fγ or geometric:BUDGET (whole numbers), got {text!r}."
        ) from None
    if len(values) == 1:
        return uniform_fanout(values[0], gamma)
    if len(values) != gamma + 1:
        raise UserError(
            f"--fanout {text} gives {len(values)} counts; γ = {gamma} needs "
            f"{gamma + 1}, one per k = 0..{gamma}."
        )
    return values


@dataclass(frozen=True)
class SSDOptions:
    """SSD's settings, as the CLI, the demo and the benchmark take them."""

    fanout: str = "1"  # parse_fanout's text: one branch per k by default
    saguaro_c: float = 1.0  # C in (0, 1]; 1 draws from q itself
    backup: str = "neural"  # what drafts after a miss: "neural" (draft model) or "fast"
