"""Exercise 1, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: the text is right, but each draft is checked with a target pass of its own, so
speculation saves nothing — it costs a pass per token, like plain decoding. (It also drafts
one token a round, whatever γ is.)
"""


def greedy_speculative(target, draft, prompt: list[int], gamma: int, max_new: int) -> list[int]:
    out: list[int] = []
    while len(out) < max_new:
        context = prompt + out
        x = draft(context)
        choice = target(context)[-1]  # one pass for one token
        out.append(choice)
        if x == choice and len(out) < max_new:
            out.append(target(context + [x])[-1])
    return out
