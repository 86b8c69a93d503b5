"""Exercise 7, a reference solution (try it yourself first: ../07_prompt_lookup.py)."""


def lookup(context: list[int], gamma: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if L <= n:
            continue
        suffix = context[L - n :]
        for j in range(n - 1, L - 1):  # earliest first; j <= L - 2
            if context[j - n + 1 : j + 1] == suffix:
                period = L - 1 - j
                return [context[j + 1 + i % period] for i in range(gamma)]
    return []
