"""Checks for exercise 6: best_gamma, the cost model's choice of γ, with no stopwatch.

A checker that timed anything would answer differently on every laptop (on a shared machine a
timing moves by a tenth or more from run to run: lesson 09, docs/results.md), so this one is
exact and deterministic. First the docstring's example, then a grid of α, c and r profiles,
each judged by the library's own formula, E from `nanospec.measure.bench.expected_tokens`
over γ·c + r (a choice within 1e-9 of the best speedup counts as the best). Last, the α, c
and r that a `nanospec bench` run measured, as recorded in docs/results.md: the model must
pick the γ that run measured fastest. The grid tells a right formula from a wrong one; the
recorded run shows the formula agrees with a stopwatch.
"""

import numpy as np

from nanospec.exercises.learner import Failure, plain
from nanospec.measure.bench import expected_tokens

ALPHAS = (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)  # 1.0 last: (1 − α^…)/(1 − α) breaks
COSTS = (0.01, 0.05, 0.1, 0.2, 0.5, 1.0)
SPAN = list(range(1, 17))
# (how r is described, gammas, r for each): an accelerator (r ≈ 1, lesson 09), an r that grows
# by an assumed 0.065 a draft (no lesson or doc prints this slope: the grid needs only an r that
# grows), a compute-bound pass, and the recorded run's own r, listed out of order so that the
# γ, not its position, must come back
PROFILES = (
    ("r = 1 at every γ (an accelerator)", SPAN, [1.0] * 16),
    ("r = 1 + 0.065·γ (growing, at an assumed slope)", SPAN, [1 + 0.065 * g for g in SPAN]),
    ("r = (γ + 1)/2 (a pass costing half a step per token)", SPAN, [(g + 1) / 2 for g in SPAN]),
    ("r = [1.87, 1.26, 1.93, 1.52, 2.15]", [7, 2, 15, 4, 10], [1.87, 1.26, 1.93, 1.52, 2.15]),
)
EXAMPLE = (0.8, 0.05, [1.1, 1.2, 1.3, 1.6], [1, 2, 4, 8])
# docs/results.md, "Speculative decoding with the draft model" (facts, 128 tokens, greedy):
# α 0.92 (0.93 at γ = 10); c measured in place, 0.086 at γ = 7 (0.067–0.142 over the five γ);
# r per γ; the fastest measured was γ = 15 (2.78× end to end, 3.21× per token after the first).
# The model picks γ = 15 with any of the five c, and with each γ's own c and α.
RECORDED = (0.92, 0.086, [1.26, 1.52, 1.87, 2.15, 1.93], [2, 4, 7, 10, 15])
RECORDED_FASTEST = 15


def speedups(alpha, c, r, gammas, tokens=expected_tokens, cost=None) -> np.ndarray:
    """The model's predicted speedup for each γ; `tokens` and `cost` swap in a mistake."""
    cost = cost or (lambda g, rg: g * c + rg)
    return np.array([tokens(alpha, g) / cost(g, rg) for g, rg in zip(gammas, r)])


# The usual mistakes, each as the speedups it computes instead.
MISTAKES = (
    (
        lambda a, c, r, gs: speedups(a, c, r, gs, lambda a, g: expected_tokens(a, g - 1)),
        (
            " Your choices match E without its last term: E = 1 + α + … + α^γ has γ + 1 terms, "
            "i.e. (1 − α^(γ+1)) / (1 − α); the last, α^γ, is the chance that the γ-th draft "
            "is accepted (so all γ are)."
        ),
    ),
    (
        lambda a, c, r, gs: speedups(a, c, r, gs, lambda a, g: expected_tokens(a, g + 1)),
        " Your choices match E with one term too many: E = 1 + α + … + α^γ, γ + 1 terms.",
    ),
    (
        lambda a, c, r, gs: speedups(a, c, r, gs, cost=lambda g, rg: rg),
        " Your choices match a model with free drafts: a round also pays γ·c for drafting.",
    ),
    (
        lambda a, c, r, gs: speedups(a, c, r, gs, cost=lambda g, rg: c + rg),
        " Your choices match a round paying c once: it drafts γ tokens, γ·c.",
    ),
    (
        lambda a, c, r, gs: speedups(a, c, r, gs, cost=lambda g, rg: g * c + rg * (g + 1)),
        (
            " Your choices match a verify pass costing r per token: r is already the whole "
            "(γ+1)-token pass over a one-token pass."
        ),
    ),
    (
        lambda a, c, r, gs: np.array([expected_tokens(a, g) for g in gs]),
        " Your choices match the most tokens per round: divide E by the round's cost, γ·c + r.",
    ),
    (
        lambda a, c, r, gs: -speedups(a, c, r, gs),
        " You took the smallest speedup, not the largest.",
    ),
)


def check_best_gamma(best_gamma):
    """Exercise 6: the docstring's example, the grid, then the recorded run."""
    cases = [EXAMPLE] + [(a, c, r, gs) for _, gs, r in PROFILES for c in COSTS for a in ALPHAS]
    got, error = [], None
    for alpha, c, r, gammas in cases:  # all first: more choices make a surer hint
        try:
            got.append(_choice(best_gamma, alpha, c, r, gammas))
        except Failure as failure:
            error = failure
            break
    bad = next((i for i, g in enumerate(got) if not _best(cases[i], g)), None)
    if bad is None and error is not None:
        if not str(error).startswith("your best_gamma raised"):
            raise error  # the stub, or not one of gammas: the case does not matter
        alpha, c = cases[len(got)][:2]
        raise Failure(
            f"with α = {alpha:g} and c = {c:g}, {str(error).rstrip('.')}." + _alpha_one(alpha)
        )
    if bad is not None:
        alpha, c, r, gammas = cases[bad]
        model = speedups(alpha, c, r, gammas)
        want = gammas[int(np.argmax(model))]
        where = (
            "the docstring's example (α = .8, c = .05, r = [1.1 1.2 1.3 1.6], γ in [1, 2, 4, 8])"
            if bad == 0
            else f"α = {alpha:g}, c = {c:g} and {_profile(r)}, γ in {_span(gammas)}"
        )
        raise Failure(
            f"with {where}, the model predicts the best γ = {want}, at "
            f"{model.max():.3f}×; you chose γ = {got[bad]}, which it predicts at "
            f"{model[gammas.index(got[bad])]:.3f}×."
            + (
                _hint(got, cases)
                or _alpha_one(alpha)
                or " Speedup = E / (γ·c + r), with E = 1 + α + … + α^γ."
            )
        )
    yield "the docstring's example gives 4"
    yield (
        f"picks the model's best γ on {len(cases) - 1} (α, c, r) cases: α = {_listed(ALPHAS)}; "
        f"c = {_listed(COSTS)}; r flat, growing, steep, and a measured list out of order"
    )
    alpha, c, r, gammas = RECORDED
    choice = _choice(best_gamma, alpha, c, r, gammas)
    if choice != RECORDED_FASTEST:
        raise Failure(
            f"with the run recorded in docs/results.md (α = {alpha}, c = {c}, r = {r} "
            f"for γ = {gammas}) you chose γ = {choice}; the model picks "
            f"{RECORDED_FASTEST}, the γ that run measured fastest."
        )
    yield (
        f"on the bench run recorded in docs/results.md (α = {alpha}, c = {c}, measured r) it "
        f"picks γ = {RECORDED_FASTEST}, the γ that run measured fastest (2.78× end to end)"
    )


def _choice(best_gamma, alpha, c, r, gammas) -> int:
    """The learner's γ, checked to be one of `gammas`."""
    with np.errstate(all="ignore"):  # 0/0 at α = 1 is answered below, not as a warning
        out = best_gamma(alpha, c, list(r), list(gammas))
    try:
        choice = int(out)
        ok = choice == out and choice in gammas
    except (TypeError, ValueError):
        ok = False
    if not ok:
        hint = (
            " That looks like a position in the list: return gammas[i]."
            if isinstance(out, (int, np.integer)) and 0 <= out < len(gammas)
            else ""
        )
        raise Failure(
            f"best_gamma must return one of gammas, {list(gammas)}: the γ itself; "
            f"yours returned {plain(out)!r}.{hint}"
        )
    return choice


def _best(case, choice: int) -> bool:
    """Whether `choice` is the model's best γ for `case`, to within 1e-9 of its speedup."""
    alpha, c, r, gammas = case
    model = speedups(alpha, c, r, gammas)
    return model[gammas.index(choice)] >= model.max() * (1 - 1e-9)


def _hint(got: list[int], cases: list) -> str:
    """The mistake whose choices equal the learner's on every case they answered, if any."""
    if all(int(np.argmax(speedups(*case))) == g for g, case in zip(got, cases)):
        return " That looks like a position in the list: return gammas[i], the γ itself."
    for speeds, hint in MISTAKES:
        if all(
            gs[int(np.argmax(speeds(a, c, r, gs)))] == g for g, (a, c, r, gs) in zip(got, cases)
        ):
            return hint
    return ""


def _alpha_one(alpha: float) -> str:
    return (
        " With α = 1 every draft is accepted and E = γ + 1; (1 − α^(γ+1)) / (1 − α) is 0/0 "
        "there: add up 1 + α + … + α^γ instead."
        if alpha == 1
        else ""
    )


def _profile(r) -> str:
    return next((name for name, _, rs in PROFILES if list(rs) == list(r)), f"r = {r}")


def _listed(values) -> str:
    """0.3, 0.5 and 1: every value, as the checks use them."""
    return ", ".join(f"{v:g}" for v in values[:-1]) + f" and {values[-1]:g}"


def _span(gammas) -> str:
    return "1..16" if list(gammas) == SPAN else str(list(gammas))
