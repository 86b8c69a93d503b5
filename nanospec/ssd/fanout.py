"""How many outcomes SSD caches per k — the fan-out — and SSD's settings as users give them.

ssd/loop.py caches, for each k = 0..γ drafts accepted, the F_k corrections t* the draft model finds
likeliest. `uniform`: F for every k. `geometric`: under the i.i.d. model of lesson 08 each draft
is accepted with probability α, independently, and a round stops at its first rejection, so it
ends after exactly k accepts with P(k) = α^k (1 − α) for k < γ, and with the bonus with
P(γ) = α^γ. If caching F tokens at k misses with probability F^(−β) (a power law, β fitted from
measured hit rates), spending a fixed budget to minimise misses gives F_k ∝ P(k)^(1/(1+β)).

α here is the per-draft acceptance probability, estimated as lesson 08 does (measure/bench.py
`iid_acceptance`: accepted / (accepted + rejections)), not the reported acceptance rate
(accepted / drafted), which also counts the drafts after a rejection that were never judged
and so understates α (0.81 against 0.92 on the shipped pair at T = 1).

What this file deliberately leaves out: fitting α and β (measure/ssd_hits.py measures them) and
a fan-out that adapts during a run.
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


def geometric_fanout(budget: int, alpha: float, beta: float, gamma: int) -> tuple[int, ...]:
    """Split `budget` branches over k = 0..γ as F_k ∝ P(k)^(1/(1+β)), P(k) = α^k (1 − α) for
    k < γ and α^γ for k = γ: the i.i.d. model's law of how a round ends, α the per-draft
    acceptance probability (largest remainders; every k keeps at least one branch).

    Minimising the expected miss rate Σ_k P(k)·F_k^(−β) under Σ F_k = budget (a Lagrange
    multiplier) gives that exponent: a steeper power law (large β) spreads the budget.

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
    p = np.where(k < gamma, alpha**k * (1 - alpha), alpha**gamma)  # P(k), summing to 1
    w = p ** (1 / (1 + beta))
    share = (budget - (gamma + 1)) * w / w.sum()  # one each first, the rest by weight
    f = 1 + np.floor(share).astype(int)
    for i in np.argsort(-(share - np.floor(share)))[: budget - f.sum()]:
        f[i] += 1
    return tuple(int(x) for x in f)


# The geometric fan-out's defaults for the shipped pair (γ = 4, facts prompts): (α̂, β), greedy
# and at T = 1, from `python -m nanospec.measure.ssd_hits` (docs/results.md, "Speculative
# speculative decoding"), which prints both after its table 1. α̂ = bench.iid_acceptance of the
# uniform F = 1 run's acceptance histogram: 16 prompts × 64 tokens, at T = 1 each prompt 16
# times, seed 0; 255 rounds greedy, 3,975 at T = 1. Re-measured 2026-12-06 by running those
# two cells (`ssd_hits.measure` as main calls it; CPU, jax 0.10.2): α̂ = 0.915 and 0.918, where
# the acceptance rate, which the fan-out used before, is 0.787 and 0.811 (the same runs' hit
# rates, 83.7% and 70.4%, match docs/results.md). β: the miss power law fitted to the hit
# rates of F = 1..4 (2026-12-05), which the fan-out does not change.
SHIPPED_ALPHA_BETA = {"greedy": (0.915, 1.68), "sampled": (0.918, 0.37)}


def parse_fanout(text: str, gamma: int, temperature: float = 1.0) -> tuple[int, ...]:
    """--fanout: "F" (F for every k), "F0,F1,..,Fγ" (one per k) or "geometric:BUDGET" (α and β
    measured on the shipped pair, greedy or sampled as `temperature` says).

    >>> parse_fanout("2", 3), parse_fanout("3,1,1,2", 3)
    ((2, 2, 2, 2), (3, 1, 1, 2))
    """
    try:
        if text.startswith("geometric:"):
            alpha, beta = SHIPPED_ALPHA_BETA["greedy" if temperature == 0 else "sampled"]
            return geometric_fanout(int(text.split(":", 1)[1]), alpha, beta, gamma)
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
