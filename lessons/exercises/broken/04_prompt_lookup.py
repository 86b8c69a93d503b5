"""Exercise 4, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: copy after the LATEST earlier occurrence of the n-gram instead of the earliest.
"""


def lookup(context: list[int], gamma: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        suffix = context[L - n:]
        for j in range(L - 2, n - 2, -1):  # latest first: the mistake
            if context[j - n + 1: j + 1] == suffix:
                period = L - 1 - j
                return [context[j + 1 + i % period] for i in range(gamma)]
    return []
