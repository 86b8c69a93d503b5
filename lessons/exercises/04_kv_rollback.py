"""Exercise 4 — verify with a KV cache, then roll the cache back.

The target keeps a KV cache: the keys and values of every token it has read, so a pass reads
only the new ones. nanospec's loop keeps one invariant (lesson 07): the cache holds every
committed token but the last one, `last`, which leads the next verify block. One greedy round:

1. ONE target pass over the block [last, drafts[0], …, drafts[γ − 1]]: `target(block, cache)`
   writes the block's keys and values at slots cache.length … cache.length + γ and returns
   (logits, cache), the cache's length grown by γ + 1. Row i of logits (γ + 1, V) scores the
   token after block[i]: row i judges drafts[i] (counted from 0, as the list is), and row γ
   gives the bonus after drafts[γ − 1].
2. The greedy verify rule: accept drafts[i] while it equals the argmax of row i; the first that
   does not is replaced by that argmax (all γ accepted: the argmax of row γ, the bonus).
3. Roll back so the invariant holds again. The text grew by n + 1 tokens (n accepted drafts,
   then the target's token), and the cache must hold all of it but that new last token.
   Nothing needs erasing: slots at or past cache.length are masked out of attention (weight
   zero), and the next block overwrites them. Set the length: `cache._replace(length=...)`
   (cache.length is an array of shape (1,), one row), or `nanospec.cache.rollback(cache,
   length)`.

Return (n_accepted, token, cache).

    text [.. 5, 7]: the cache holds [.. 5] (length 10), last = 7, drafts [2, 4, 9]
    logits, cache = target([7, 2, 4, 9], cache)  -> argmax per row [2, 4, 1, 8], length 14
    2 and 4 accepted, 9 rejected: n = 2, token = 1, and the text is [.. 5, 7, 2, 4, 1]
    the cache must hold [.. 5, 7, 2, 4]: length 10 + 2 + 1 = 13 (9's slot is now stale)

The checker runs rounds on a tiny random model and compares your cache with a fresh pass over
the text after every round (lesson 07 checks the cache's length after every round, and its
keys and values against a fresh pass once, after the run).

Check it:   nanospec exercise check 4
Read after: nanospec/cache.py (`rollback`), nanospec/speculative.py (`commit`), lesson 07.
"""

from collections.abc import Callable

from nanospec.cache import KVCache


def verify_and_rollback(
    target: Callable, cache: KVCache, last: int, drafts: list[int]
) -> tuple[int, int, KVCache]:
    """target(tokens, cache) -> (logits (len(tokens), V), cache); cache holds the text but
    `last`; drafts: γ ints. Returns (n_accepted, token, the rolled-back cache)."""
    raise NotImplementedError("write verify_and_rollback")
