"""Exercise 6, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: an off-by-one in E's exponent, (1 − α^γ) / (1 − α) = 1 + α + … + α^(γ−1): γ
terms where there are γ + 1. The one missing, α^γ, is the chance that the γ-th draft is
accepted (so all γ are, and the round writes γ + 1 tokens). Short drafts lose the most by it
(relative to their E), so the choice drifts towards long ones.
"""


def best_gamma(alpha: float, c: float, r: list[float], gammas: list[int]) -> int:
    def speedup(gamma: int, r_gamma: float) -> float:
        tokens = (1 - alpha**gamma) / (1 - alpha) if alpha < 1 else gamma  # the mistake
        return tokens / (gamma * c + r_gamma)

    return max(zip(gammas, r), key=lambda gr: speedup(*gr))[0]
