"""Exercise 1 — the greedy speculative loop.

At temperature 0 both models are deterministic, and speculation must write exactly the text
that the target alone would write greedily — in fewer target passes. You get two models as
plain functions:

- `draft(tokens) -> int`: the draft's greedy next token after `tokens` (cheap; call it as
  often as you like);
- `target(tokens) -> list[int]`: ONE target pass over the whole list. It returns, for every
  position i, the target's greedy next token after tokens[: i + 1] — so one call scores
  every draft at once. Each call is counted: this is the cost you are saving.

Implement the loop: until `max_new` tokens are written, draft γ tokens (or, once fewer than
γ + 1 are still wanted, as many as still fit: min(γ, tokens still wanted − 1), leaving the
last place for the target's token), verify them with one target pass, keep the drafts up to
the first disagreement, then add the target's own token at that position (the correction —
or, when all agreed, the bonus token after them). Never write more than `max_new` tokens.
Return only the new tokens.

The checker counts your calls to target: it allows one for each round that rule makes, plus
one more, for a pass over the prompt before the loop like the one reference.py and lesson 03
make ("rounds + 1"). There that pass feeds the drafter; here the draft needs nothing from it,
so you may leave it out.

    prompt [1, 2], γ = 3: drafts [5, 6, 9]; target([1, 2, 5, 6, 9]) = [., 5, 6, 4, .]
    -> 5 and 6 agree, 9 does not: the round writes [5, 6, 4] for one target pass.

Check it:   nanospec exercise check 1
Read after: nanospec/reference.py (`speculative_sampling`), lesson 03.
"""

from collections.abc import Callable


def greedy_speculative(
    target: Callable[[list[int]], list[int]],
    draft: Callable[[list[int]], int],
    prompt: list[int],
    gamma: int,
    max_new: int,
) -> list[int]:
    """The max_new tokens greedy decoding with `target` writes after `prompt`."""
    raise NotImplementedError("write greedy_speculative")
