"""Checks for exercise 1: the greedy loop's text, and its target passes against a budget.

The learner's loop runs on two toy "models" — lookup tables over the last two tokens, the draft
agreeing with the target about 70% of the time (then a perfect and a useless draft) — and its
text is compared with greedy decoding. Its calls to target are held to the stub's budget: one
per round, with rounds as the stub's drafting rule makes them (γ drafts, or as many as still
fit), plus one, a pass over the prompt before the loop (reference.py and lesson 03 make one).
A loop over budget is told which of its passes was the extra one, read off the toys' log:
every target pass and every draft call, in order.
"""

import numpy as np

from nanospec.exercises.learner import Failure, plain

CASES = (([3], 1, 5), ([1, 2], 3, 30), ([5, 9, 2], 6, 30), ([4], 4, 1))  # prompt, γ, max_new
PROBE = ([1, 2], 3, 30)  # a case every loop is run on again with a perfect draft, to name a mistake
ONCE = (
    " Make one call per round, over context + drafts: it gives the target's token after "
    "every draft, so the correction and the bonus both come from that one pass."
)


class Toy:
    """A toy model: the next token is a lookup table over the last two tokens. A target's
    passes and a draft's calls go, in order, into one shared `log`, so that a wasted pass can
    be named; past `limit` passes the loop is told, by `endless(self)`, that it never ends."""

    def __init__(self, table: np.ndarray, log=None, limit: int = 10**9, endless=None):
        self.table, self.calls, self.inputs = table, 0, []
        self.log = [] if log is None else log  # ("t", tokens) a pass, ("d", tokens) a draft
        self.limit, self.endless = limit, endless

    def next(self, tokens) -> int:
        return int(self.table[tokens[-2] if len(tokens) > 1 else 0, tokens[-1]])

    def draft(self, tokens) -> int:  # the draft as the learner calls it: one token, logged
        self.log.append(("d", tuple(int(t) for t in tokens)))
        return self.next(tokens)

    def all_next(self, tokens) -> list[int]:  # one pass: the token after each prefix
        self.calls += 1
        self.inputs.append(tuple(int(t) for t in tokens))
        self.log.append(("t", self.inputs[-1]))
        if self.calls > self.limit:
            raise Failure(self.endless(self) if self.endless else "the loop never ended")
        return [self.next(tokens[: i + 1]) for i in range(len(tokens))]


def _toys(V: int = 40, agree: float = 0.7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = rng.integers(0, V, (V, V))
    draft = np.where(rng.random((V, V)) < agree, target, rng.integers(0, V, (V, V)))
    return target, draft


def _rounds_needed(target: Toy, draft: Toy, prompt, gamma: int, max_new: int) -> int:
    """Rounds of the stub's rule: each drafts min(γ, tokens still wanted − 1) tokens."""
    out, rounds = [], 0
    while len(out) < max_new:
        rounds += 1
        for _ in range(min(gamma, max_new - len(out) - 1)):
            if draft.next(prompt + out) != target.next(prompt + out):
                break
            out.append(target.next(prompt + out))
        out.append(target.next(prompt + out))
    return rounds


def check_greedy_loop(greedy_speculative):
    """Exercise 1: greedy text exactly, max_new respected, at most rounds + 1 target passes."""
    t_table, d_table = _toys()
    cases = [
        (t_table, d_table, "a draft that agrees about 70% of the time"),
        (t_table, t_table, "a perfect draft"),
        (t_table, (t_table + 1) % 40, "a useless draft"),
    ]
    for table, dtable, name in cases:
        for prompt, gamma, max_new in CASES:
            case = f"with {name}, prompt {prompt}, γ = {gamma} and {max_new} new tokens"
            target = Toy(
                table, limit=4 * max_new + 8, endless=_endless(case, prompt, gamma, max_new)
            )
            want = [target.next(prompt)]
            while len(want) < max_new:
                want.append(target.next(prompt + want))
            draft = Toy(dtable, target.log).draft
            got = plain(greedy_speculative(target.all_next, draft, list(prompt), gamma, max_new))
            _check_text(got, want, prompt, gamma, name)
            rounds = _rounds_needed(Toy(table), Toy(dtable), prompt, gamma, max_new)
            if target.calls > rounds + 1:
                raise Failure(
                    f"{case}, you called target {target.calls} times; the checker allows "
                    f"{rounds + 1}: one pass for each of the {rounds} rounds the stub's rule "
                    f"makes (γ drafts, or as many as still fit), plus one over the prompt."
                    + _passes_hint(greedy_speculative, target, prompt, gamma, max_new, rounds)
                )
    gammas = sorted({gamma for _, gamma, _ in CASES})
    yield (
        f"writes exactly the greedy text, max_new tokens, with good, perfect and useless "
        f"drafts, γ = {', '.join(map(str, gammas[:-1]))} and {gammas[-1]}"
    )
    yield "makes at most one target pass a round (γ drafts, or as many as still fit), plus one"


def _endless(case: str, prompt, gamma: int, max_new: int):
    """The message for a loop past its limit of passes, from what its passes were over."""

    def say(target: Toy) -> str:
        last, grown = target.inputs[-3:], len(target.inputs[-1]) - len(prompt)
        head = f"{case}, your loop called target {target.calls} times and had still not returned"
        if len(set(last)) == 1:
            return (
                f"{head}; its last {len(last)} passes were all over the same {len(last[0])} "
                f"tokens: a round that writes no token repeats forever. Every round ends with "
                f"the target's own token, the correction or, when all drafts agree, the bonus "
                f"(the last entry of the same pass)."
            )
        if grown > max_new + gamma:  # a pass is over the text and at most γ drafts
            return (
                f"{head}, and the tokens it passes to target had grown to {grown} past the "
                f"prompt, far beyond the {max_new} asked for: your text ran past max_new and "
                f"the loop missed its stop. A test like len(out) != max_new lets a round that "
                f"writes several tokens step over it: stop once len(out) ≥ max_new, and let "
                f"the last round draft only as many tokens as still fit."
            )
        return (
            f"{head} (a loop that writes a token a round needs at most {max_new + 1} passes). "
            f"Either a round writes no token (every round must end with the target's own "
            f"token) or the loop misses its stop (stop once len(out) ≥ max_new)."
        )

    return say


def _passes_hint(greedy_speculative, target: Toy, prompt, gamma, max_new, rounds) -> str:
    """Which passes were the extra ones, the first reading that fits: the same tokens scored
    twice, a prefix of the pass before scored again, a pass over a context before drafting
    from it, passes that write fewer than γ + 1 tokens (read off a run with a perfect draft),
    rounds that draft fewer tokens than still fit; else the rule itself."""
    twice = lambda toy: len(set(toy.inputs)) < len(toy.inputs)
    perfect = None if twice(target) else _perfect_run(greedy_speculative)
    if perfect is None and not twice(target):  # it never finishes, or raises: nothing to read
        return ONCE
    if twice(target) or twice(perfect[0]):
        return (
            " You called target twice on the same tokens: one pass over context + drafts "
            "already gives the target's token after each of them, the correction where a "
            "draft disagrees and, when all agree, the bonus (its last entry): reuse it."
        )
    passes = _passes(target.log, prompt, max_new)
    again = sum(kind == "again" for kind, _, _ in passes)
    if again:
        return (
            f" {again} of your passes scored again a prefix of the pass just before it, "
            f"whose entries already give the target's token after every prefix." + ONCE
        )
    for toy, said in ((target, ""), (perfect[0], " With a perfect draft,")):
        bare = _alone(toy.log)
        if bare >= 2:
            return (
                f"{said} {bare} of your {toy.calls} passes were over a context alone, before "
                f"the loop drafted from that context: the pass over context + drafts already "
                f"gives that token (its entry at the context's last position), so each round "
                f"needs only that one pass."
            )
    return (
        _perfect_hint(*perfect)
        or _rounds_hint(passes, gamma, max_new, rounds)
        or _average_hint(*perfect)
        or ONCE
    )


def _perfect_run(greedy_speculative):
    """The learner's loop on PROBE with a perfect draft: (its target, tokens written), or None."""
    prompt, gamma, max_new = PROBE
    perfect = Toy(_toys()[0], limit=4 * max_new + 8)
    try:
        out = greedy_speculative(
            perfect.all_next, Toy(perfect.table, perfect.log).draft, list(prompt), gamma, max_new
        )
    except Failure:
        return None
    out = plain(out)
    return perfect, len(out) if isinstance(out, list) else max_new


def _passes(log, prompt, max_new: int) -> list[tuple[str, int, int]]:
    """Each target pass of `log` as (kind, tokens written before it, drafts it scored). Kinds:
    "prompt", a first pass over the prompt where round 1 would draft; "again", over a prefix
    of the pass before; "bare", over a context alone, which the loop then drafts from; else
    "round", whose context is the first draft call's since the pass before (or, with no draft
    call, the pass's own tokens)."""
    out, ctx, last = [], None, None
    for i, (who, x) in enumerate(log):
        if who == "d":
            ctx = x if ctx is None else ctx
            continue
        if i == 0 and x == tuple(prompt) and max_new > 1:
            kind = "prompt"
        elif last is not None and x == last[: len(x)]:
            kind = "again"
        elif ctx is None and i + 1 < len(log) and log[i + 1] == ("d", x):
            kind = "bare"
        else:
            kind = "round"
        start = x if ctx is None else ctx
        out.append((kind, len(start) - len(prompt), len(x) - len(start)))
        ctx, last = None, x
    return out


def _alone(log) -> int:
    """Target passes over a context alone (no draft call since the pass before) that the
    loop then drafts from: passes whose one new token the next pass scores again."""
    count, drafted = 0, False
    for i, (who, x) in enumerate(log):
        if who == "t":
            count += not drafted and i + 1 < len(log) and log[i + 1] == ("d", x)
        drafted = who == "d"
    return count


def _perfect_hint(perfect: Toy, written: int) -> str | None:
    """With a perfect draft each pass of one round over context + γ drafts writes γ + 1
    tokens. Steps between its inputs that are all alike (the last aside) are what each pass
    wrote: γ, all drafts, without the bonus; fewer when drafts are scored short."""
    lengths = [len(x) for x in perfect.inputs]
    steps = [b - a for a, b in zip(lengths, lengths[1:])]
    body = steps[:-1] or steps  # the last round may be cut short
    if not body or len(set(body)) > 1 or abs(written / perfect.calls - body[0]) >= 1:
        return None  # no one count of tokens a pass: let another reading speak
    (prompt, gamma, _), step = PROBE, body[0]
    drafted = lengths[0] - len(prompt)
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
    return None


def _rounds_hint(passes, gamma: int, max_new: int, rounds: int) -> str | None:
    """More rounds than needed, from rounds that drafted fewer tokens than still fit; and
    whether the loop's first pass was the one over the prompt that the budget allows."""
    made = sum(kind == "round" for kind, _, _ in passes)
    short = [(w, d) for kind, w, d in passes if kind == "round" and d < min(gamma, max_new - w - 1)]
    if made <= rounds or not short:
        return None
    written, d = short[0]
    first = (
        " Your first pass, over the prompt before any drafting, is the one extra pass allowed."
        if passes[0][0] == "prompt"
        else ""
    )
    return (
        f"{first} Your loop made {made} rounds where {rounds} were needed: {len(short)} of "
        f"them drafted fewer tokens than still fit (the first, with {written} of {max_new} "
        f"written, drafted {d} where {min(gamma, max_new - written - 1)} fit). A round's one "
        f"pass writes its accepted drafts and one token more, so draft γ tokens a round, or, "
        f"once fewer than γ + 1 are still wanted, as many as still fit: "
        f"min(γ, tokens still wanted − 1)."
    )


def _average_hint(perfect: Toy, written: int) -> str | None:
    """Fewer tokens a pass, on average, than a perfect draft allows."""
    prompt, gamma, max_new = PROBE
    best = _rounds_needed(Toy(perfect.table), Toy(perfect.table), prompt, gamma, max_new)
    if perfect.calls <= best + 1:
        return None
    return (
        f" With a perfect draft (γ = {gamma}) your loop made {perfect.calls} target passes "
        f"for {written} tokens, {written / perfect.calls:.1f} a pass; one pass a round over "
        f"context + γ drafts writes γ + 1 = {gamma + 1} (the last round fewer)." + ONCE
    )


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
