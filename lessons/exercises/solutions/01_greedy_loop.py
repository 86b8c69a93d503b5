"""Exercise 1, a reference solution (try it yourself first: ../01_greedy_loop.py)."""


def greedy_speculative(target, draft, prompt: list[int], gamma: int, max_new: int) -> list[int]:
    out: list[int] = []
    while len(out) < max_new:
        context = prompt + out
        drafts: list[int] = []
        for _ in range(min(gamma, max_new - len(out) - 1)):  # leave room for the target's token
            drafts.append(draft(context + drafts))
        choice = target(context + drafts)[len(context) - 1 :]  # its token after each prefix
        n = 0
        while n < len(drafts) and drafts[n] == choice[n]:
            n += 1
        out += drafts[:n] + [choice[n]]  # accepted drafts, then the correction or bonus
    return out
