"""Checks for exercises 1 and 7: the greedy loop and prompt lookup, against the reference.

Exercise 1 runs the learner's loop on two toy "models" — lookup tables over the last two
tokens, the draft agreeing with the target about 70% of the time — and compares its text with
greedy decoding and its number of target passes with what a speculative loop needs. Exercise 7
is compared with the library's own `nanospec.drafters.lookup` on hundreds of short random
contexts over small alphabets (so n-grams repeat often).
"""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.drafters import lookup as reference_lookup
from nanospec.exercises.learner import Failure, plain

SEQ = 48  # the padded row the library's lookup reads


def _reference(contexts, gamma: int, max_ngram: int, min_ngram: int) -> list[list[int]]:
    """The library's drafts for each context ([] where nothing matched), in one batched call."""
    seq = np.zeros((len(contexts), SEQ), np.int32)
    for b, c in enumerate(contexts):
        seq[b, : len(c)] = c
    lengths = jnp.array([len(c) for c in contexts], jnp.int32)
    row = lambda s, n: reference_lookup(s, n, gamma, max_ngram, min_ngram)
    drafts, matched = jax.jit(jax.vmap(row))(jnp.asarray(seq), lengths)
    return [d.tolist() if m > 0 else [] for d, m in zip(np.asarray(drafts), np.asarray(matched))]


def _contexts(rng, count: int) -> list[list[int]]:
    return [
        rng.integers(0, int(rng.integers(2, 7)), int(rng.integers(2, 30))).tolist()
        for _ in range(count)
    ]


def check_lookup(lookup):
    """Exercise 7: the docstring's example, no match, then 600 random contexts."""
    for context, gamma, want, what in (
        ([7, 8, 9, 7, 8], 4, [9, 7, 8, 9], "the docstring's example"),
        ([1, 2, 3], 4, [], "no match"),
    ):
        got = _call(lookup, context, gamma, 3, 1)
        if got != want:
            raise Failure(
                f"{what}, lookup({context}, {gamma}, 3, 1), should give {want}; yours "
                f"gives {got}." + _lookup_hint(got, context, gamma, 3, 1)
            )
    yield "the docstring's example gives [9, 7, 8, 9]"
    yield "returns [] when nothing matches"
    rng = np.random.default_rng(0)
    for gamma, max_ngram, min_ngram in ((4, 3, 1), (1, 2, 1), (7, 4, 2), (3, 1, 1)):
        contexts = _contexts(rng, 150)
        for context, want in zip(contexts, _reference(contexts, gamma, max_ngram, min_ngram)):
            got = _call(lookup, list(context), gamma, max_ngram, min_ngram)
            if got != want:
                raise Failure(
                    f"lookup({context}, γ = {gamma}, max_ngram = {max_ngram}, "
                    f"min_ngram = {min_ngram}) should give {want}; yours gives {got}."
                    + _lookup_hint(got, context, gamma, max_ngram, min_ngram)
                )
    yield "matches nanospec.drafters.lookup on 600 random contexts"


def _call(lookup, context, gamma, max_ngram, min_ngram):
    """The learner's drafts as plain ints; a division by zero is the suffix matching itself."""
    try:
        out = plain(lookup(context, gamma, max_ngram, min_ngram))
    except Failure as failure:
        if "ZeroDivisionError" not in str(failure):
            raise
        raise Failure(
            f"{failure} (on lookup({context}, {gamma}, {max_ngram}, {min_ngram})). The "
            f"period L − 1 − j is 0 only when j = L − 1, where the 'occurrence' is the "
            f"suffix itself: an earlier one must end by index L − 2."
        ) from None
    if isinstance(out, tuple):
        raise Failure(f"lookup must return a list of ints; yours returned a tuple, {out}.")
    return out


def _lookup_hint(got, context, gamma, max_ngram, min_ngram) -> str:
    """Name the usual mistake: a short slice past the end, the suffix matching itself, the
    latest occurrence instead of the earliest; else say where the match is."""
    L = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        ends = [
            j
            for j in range(n - 1, L - 1)
            if L > n and context[j - n + 1 : j + 1] == context[L - n :]
        ]
        if not ends:
            continue
        j, period = ends[0], L - 1 - ends[0]
        want = [context[j + 1 + i % period] for i in range(gamma)]
        if isinstance(got, list) and 0 < len(got) < gamma and got == want[: len(got)]:
            return (
                f" Only {period} tokens follow the match {context[L - n :]} (it ends at index "
                f"{j}), so a slice reads past the end of the context and stops short: wrap "
                f"around, drafts[i] = context[j + 1 + i % (L − 1 − j)]."
            )
        if got == []:
            return (
                f" The last {n} tokens {context[L - n :]} occurred before, ending at index {j}: "
                f"if you matched the suffix with itself (ending at index L − 1 = {L - 1}), "
                f"search only j ≤ L − 2, and try shorter n-grams before giving up."
            )
        latest = [context[ends[-1] + 1 + i % (L - 1 - ends[-1])] for i in range(gamma)]
        if got == latest and len(ends) > 1:
            return (
                f" You copied after the latest occurrence of {context[L - n :]} (ending at "
                f"index {ends[-1]}); copy after the earliest (ending at index {j})."
            )
        return (
            f" The longest suffix that occurred before is {context[L - n :]} (n = {n}), "
            f"earliest ending at index {j}, so the drafts start at context[{j + 1}] = "
            f"{context[j + 1]}."
        )
    if got:
        return (
            f" No n-gram of the last {min_ngram} to {max_ngram} tokens occurred earlier "
            f"(ending by index L − 2 = {L - 2}), so there is nothing to copy: return []."
        )
    return ""


class Toy:
    """A toy model: the next token is a lookup table over the last two tokens; calls counted,
    and each pass's tokens kept, so that a wasted pass can be named."""

    def __init__(self, table: np.ndarray, limit: int = 10**9, case: str = ""):
        self.table, self.calls, self.inputs = table, 0, []
        self.limit, self.case = limit, case  # past `limit` calls the loop is told it never ends

    def next(self, tokens: list[int]) -> int:
        return int(self.table[tokens[-2] if len(tokens) > 1 else 0, tokens[-1]])

    def all_next(self, tokens: list[int]) -> list[int]:  # one pass: the token after each prefix
        self.calls += 1
        self.inputs.append(tuple(int(t) for t in tokens))
        if self.calls > self.limit:
            raise Failure(
                f"{self.case}, your loop called target {self.calls} times and had still not "
                f"returned: a round that writes no token repeats forever. Every round ends "
                f"with the target's own token, the correction or, when all drafts agree, "
                f"the bonus (the last entry of the same pass)."
            )
        return [self.next(tokens[: i + 1]) for i in range(len(tokens))]


def _toys(V: int = 40, agree: float = 0.7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = rng.integers(0, V, (V, V))
    draft = np.where(rng.random((V, V)) < agree, target, rng.integers(0, V, (V, V)))
    return target, draft


def _passes_needed(target: Toy, draft: Toy, prompt, gamma: int, max_new: int) -> int:
    """Target passes a speculative loop makes: one per round of up to γ drafts."""
    out, rounds = [], 0
    while len(out) < max_new:
        rounds += 1
        for _ in range(min(gamma, max_new - len(out) - 1)):
            if draft.next(prompt + out) != target.next(prompt + out):
                break
            out.append(target.next(prompt + out))
        out.append(target.next(prompt + out))
    return rounds


CASES = (([3], 1, 5), ([1, 2], 3, 30), ([5, 9, 2], 6, 30), ([4], 4, 1))  # prompt, γ, max_new
PROBE = ([1, 2], 3, 30)  # a case every loop is run on again with a perfect draft, to name a mistake


def check_greedy_loop(greedy_speculative):
    """Exercise 1: greedy text exactly, max_new respected, one target pass per round."""
    t_table, d_table = _toys()
    cases = [
        (t_table, d_table, "a draft that agrees about 70% of the time"),
        (t_table, t_table, "a perfect draft"),
        (t_table, (t_table + 1) % 40, "a useless draft"),
    ]
    for table, dtable, name in cases:
        for prompt, gamma, max_new in CASES:
            case = f"with {name}, prompt {prompt}, γ = {gamma} and {max_new} new tokens"
            target, draft = Toy(table, 4 * max_new + 8, case), Toy(dtable)
            want = [target.next(prompt)]
            while len(want) < max_new:
                want.append(target.next(prompt + want))
            got = plain(
                greedy_speculative(target.all_next, draft.next, list(prompt), gamma, max_new)
            )
            _check_text(got, want, prompt, gamma, name)
            needed = _passes_needed(Toy(table), Toy(dtable), prompt, gamma, max_new)
            if target.calls > needed:
                raise Failure(
                    f"with {name}, γ = {gamma}, {max_new} new tokens, you called target "
                    f"{target.calls} times; a speculative loop needs {needed} (one pass "
                    f"per round)." + _passes_hint(greedy_speculative, target, needed)
                )
    gammas = sorted({gamma for _, gamma, _ in CASES})
    yield (
        f"writes exactly the greedy text, max_new tokens, with good, perfect and useless "
        f"drafts, γ = {', '.join(map(str, gammas[:-1]))} and {gammas[-1]}"
    )
    yield "makes one target pass per round, and not one more than the rounds need"


def _passes_hint(greedy_speculative, target: Toy, needed: int) -> str:
    """Which wasted pass it is: the same tokens scored twice, a round that leaves out the bonus,
    fewer than γ drafts scored a pass, or one pass outside the rounds. A run with a perfect
    draft tells the middle two apart: each pass then writes γ + 1 tokens; γ, all of them drafts,
    without the bonus; fewer, or γ from γ − 1 drafts, when drafts are scored short."""
    once = (
        " Make one call per round, over context + drafts: it gives the target's token after "
        "every draft, so the correction and the bonus both come from that one pass."
    )
    prompt, gamma, max_new = PROBE
    perfect = Toy(_toys()[0], limit=4 * max_new + 8)
    if len(set(target.inputs)) == len(target.inputs):
        try:
            greedy_speculative(
                perfect.all_next, Toy(perfect.table).next, list(prompt), gamma, max_new
            )
        except Failure:  # with this draft it never finishes, or raises: nothing to read
            return once
    if any(len(set(t.inputs)) < len(t.inputs) for t in (target, perfect)):
        return (
            " You called target twice on the same tokens: one pass over context + drafts "
            "already gives the target's token after each of them, the correction where a "
            "draft disagrees and, when all agree, the bonus (its last entry): reuse it."
        )
    steps = Counter(len(b) - len(a) for a, b in zip(perfect.inputs, perfect.inputs[1:]))
    step = steps.most_common(1)[0][0] if steps else gamma + 1  # tokens written per pass
    drafted = len(perfect.inputs[0]) - len(prompt) if perfect.inputs else gamma  # in round 1
    if step == gamma == drafted:
        return (
            f" With a perfect draft (γ = {gamma}) each of your passes wrote only the "
            f"{gamma} drafts: when all γ drafts agree, the same pass's last entry is the "
            f"bonus token. Add it (it costs no extra pass)."
        )
    if step <= gamma:
        return (
            f" With a perfect draft (γ = {gamma}) your passes wrote {step} token"
            f"{'s' * (step != 1)} each, not γ + 1 = {gamma + 1}: draft γ tokens, then score "
            f"all of a round's drafts with ONE call to target."
        )
    if target.calls == needed + 1:
        return (
            " That is one pass more than the rounds: a call outside them (on the prompt "
            "before the loop, say) costs a whole pass, and the rounds' own passes already "
            "score every token they write."
        )
    return once


def _check_text(got, want, prompt, gamma: int, name: str) -> None:
    if not isinstance(got, list) or not all(isinstance(x, (int, np.integer)) for x in got):
        raise Failure(f"greedy_speculative must return a list of ints; yours returned {got!r}.")
    if len(got) != len(want):
        if len(got) == len(prompt) + len(want) and got[: len(prompt)] == prompt:
            advice = "return only the new tokens, not the prompt before them"
        elif len(got) < len(want):
            advice = "keep going until max_new new tokens are written"
        else:
            advice = "stop at max_new — the last round may need fewer drafts"
        raise Failure(
            f"asked for {len(want)} new tokens (prompt {prompt}, γ = {gamma}), yours "
            f"returned {len(got)}: {advice}."
        )
    if got != want:
        i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        raise Failure(
            f"with {name} (prompt {prompt}, γ = {gamma}) your text differs from greedy "
            f"decoding at new token {i + 1}: yours is {got[i]}, the target's greedy "
            f"choice is {want[i]}. Keep drafts only while they equal the target's "
            f"choice, then add the target's own token."
        )
