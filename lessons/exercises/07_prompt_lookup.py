"""Exercise 7 — a prompt-lookup drafter.

Prompt lookup drafts with no model at all: if the last few tokens appeared before in the text,
guess that what followed them then follows them again. Given the committed tokens `context`
(a list of L ints):

1. for n = max_ngram, max_ngram − 1, …, min_ngram (longest first), look for an earlier
   occurrence of the last n tokens: an index j with n − 1 ≤ j ≤ L − 2 and
   context[j − n + 1 : j + 1] == context[L − n :];
2. take the longest n that has one, and its EARLIEST occurrence (the smallest j);
3. propose γ tokens from what followed it, wrapping around with period L − 1 − j so the
   drafts never read past the end: drafts[i] = context[j + 1 + i % (L − 1 − j)].

If no n ≥ min_ngram matches, return [] (no drafts: the round is a plain decode step).

    context = [7, 8, 9, 7, 8]  (L = 5), γ = 4, max_ngram = 3, min_ngram = 1
    n = 3: [9, 7, 8] never occurred before. n = 2: [7, 8] also ends at j = 1.
    period = 5 − 1 − 1 = 3, so the drafts are [9, 7, 8, 9].

Check it:   nanospec exercise check 7
Read after: nanospec/drafters.py (`lookup`, `PromptLookup`), lesson 11.
"""


def lookup(context: list[int], gamma: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """The γ drafted tokens copied from earlier in `context`, or [] if nothing matched."""
    raise NotImplementedError("write lookup")
