"""Exercise 4, a reference solution (try it yourself first: ../04_kv_rollback.py)."""

import numpy as np


def verify_and_rollback(target, cache, last: int, drafts: list[int]):
    start = cache.length  # (1,): the cache holds the text but `last`
    logits, cache = target([last, *drafts], cache)  # one pass; the length grows by γ + 1
    choice = np.argmax(logits, axis=-1)  # (γ + 1,) the target's token after each block token
    n = 0
    while n < len(drafts) and drafts[n] == choice[n]:
        n += 1
    # Keep `last` and the n accepted drafts; the new token leads the next block.
    return n, int(choice[n]), cache._replace(length=start + n + 1)
