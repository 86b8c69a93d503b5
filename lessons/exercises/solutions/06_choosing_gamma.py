"""Exercise 6, a reference solution (try it yourself first: ../06_choosing_gamma.py)."""


def best_gamma(alpha: float, c: float, r: list[float], gammas: list[int]) -> int:
    def speedup(gamma: int, r_gamma: float) -> float:
        tokens = sum(alpha**i for i in range(gamma + 1))  # the sum, not (1 − α^{γ+1})/(1 − α):
        return tokens / (gamma * c + r_gamma)  # it is finite at α = 1 too

    return max(zip(gammas, r), key=lambda gr: speedup(*gr))[0]
