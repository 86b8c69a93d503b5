"""Exercise 4, broken on purpose (the test suite checks that the checker names the mistake).

The mistake: roll back to "where the round started, plus the accepted drafts", forgetting
that the block began with `last`, whose keys the pass wrote too. The cache loses one token a
round, and the next pass would read a text with a hole in it; the checker stops it sooner, in
round 1, on the cache's length.
"""

import numpy as np


def verify_and_rollback(target, cache, last: int, drafts: list[int]):
    start = cache.length
    logits, cache = target([last, *drafts], cache)
    choice = np.argmax(logits, axis=-1)
    n = 0
    while n < len(drafts) and drafts[n] == choice[n]:
        n += 1
    return n, int(choice[n]), cache._replace(length=start + n)  # one slot short: the mistake
