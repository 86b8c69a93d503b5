"""Exercise 7, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: copy what followed the match with a plain slice, context[j + 1 : j + 1 + γ].
When the match sits near the end, fewer than γ tokens follow it and the slice silently stops
at the end of the context: a short draft, where the rule wraps around with period L − 1 − j.
"""


def lookup(context: list[int], gamma: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        suffix = context[L - n :]
        for j in range(n - 1, L - 1):  # earliest first; j <= L - 2
            if context[j - n + 1 : j + 1] == suffix:
                return context[j + 1 : j + 1 + gamma]  # runs out at the end: the mistake
    return []
