"""The round being shown, step by step: which phase of which round, and what is revealed.

Pure Python over `Round`s (rounds.py) — no Textual here — so every rule of the animation can be
tested without a terminal. One round of γ drafts plays as these steps:

    DRAFT 1..γ   the draft's tokens appear one at a time, each with q(x)
    VERIFY       the target's single pass reveals p(x) at every position
    JUDGE 1..j   the verify rule marks x₁, x₂, ... ✓ accepted, up to the first ✗ rejection
                 (the tail after it is greyed · discarded at the same moment)
    EXTRA        ↻ the token resampled from the residual, or ★ the bonus token
    COMMIT       the round's tokens join the committed text

Worked example, γ = 3 and the second draft rejected: DRAFT 1, DRAFT 2, DRAFT 3, VERIFY, JUDGE 1,
JUDGE 2 (✗, and x₃ greyed), EXTRA (↻), COMMIT: 8 steps.

A `Position` is (round, step index); `forward` / `back` / `next_round` / `prev_round` move it
over the rounds recorded so far (None when there is nowhere to go). `reveal` turns a position
into a `Frame`: what each slot shows; `chart` says what the probability charts show for a slot.
"""

from dataclasses import dataclass
from enum import IntEnum

from viz.draw import num as _fmt
from viz.rounds import Round

SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


class Phase(IntEnum):  # ordered: a later phase has revealed everything an earlier one had
    DRAFT = 0
    VERIFY = 1
    JUDGE = 2
    EXTRA = 3
    COMMIT = 4


@dataclass(frozen=True)
class Step:
    round: int  # 0-based
    phase: Phase
    k: int = 0  # DRAFT: drafts shown; JUDGE: judgements shown; else 0


def steps_of(rnd: Round) -> list[Step]:
    r = rnd.index
    return (
        [Step(r, Phase.DRAFT, k) for k in range(1, rnd.gamma + 1)]
        + [Step(r, Phase.VERIFY)]
        + [Step(r, Phase.JUDGE, k) for k in range(1, rnd.judged + 1)]
        + [Step(r, Phase.EXTRA), Step(r, Phase.COMMIT)]
    )


@dataclass(frozen=True)
class Position:
    round: int = 0
    i: int = 0  # index into steps_of(rounds[round])

    def step(self, rounds: list[Round]) -> Step:
        return steps_of(rounds[self.round])[self.i]


def forward(pos: Position, rounds: list[Round]) -> Position | None:
    if pos.i + 1 < len(steps_of(rounds[pos.round])):
        return Position(pos.round, pos.i + 1)
    return Position(pos.round + 1, 0) if pos.round + 1 < len(rounds) else None


def back(pos: Position, rounds: list[Round]) -> Position | None:
    if pos.i > 0:
        return Position(pos.round, pos.i - 1)
    if pos.round == 0:
        return None
    return Position(pos.round - 1, len(steps_of(rounds[pos.round - 1])) - 1)


def at_phase(rounds: list[Round], r: int, phase: Phase) -> Position:
    """Round r (0-based) at the first step of `phase` (the JUDGE phase: its last step)."""
    steps = steps_of(rounds[r])
    matching = [i for i, s in enumerate(steps) if s.phase == phase]
    return Position(r, matching[-1] if phase == Phase.JUDGE else matching[0])


def next_round(pos: Position, rounds: list[Round]) -> Position | None:
    """The next round with every verdict shown (the most telling moment of a round)."""
    return at_phase(rounds, pos.round + 1, Phase.EXTRA) if pos.round + 1 < len(rounds) else None


def prev_round(pos: Position, rounds: list[Round]) -> Position | None:
    return at_phase(rounds, pos.round - 1, Phase.EXTRA) if pos.round > 0 else None


def last(rounds: list[Round]) -> Position:
    return Position(len(rounds) - 1, len(steps_of(rounds[-1])) - 1)


@dataclass(frozen=True)
class Slot:
    """One row of the round table: a draft (index 1..γ) or the extra token (index γ+1)."""

    index: int
    text: str | None  # None while not yet revealed
    mark: str  # hidden, drafted, accept, reject, discard, resample, bonus
    q: float | None = None
    p: float | None = None
    u: float | None = None
    ratio: float | None = None
    residual: float | None = None  # the extra token's probability under the residual (↻ only)


@dataclass(frozen=True)
class Frame:
    step: Step
    round: Round
    slots: tuple[Slot, ...]  # γ drafts, then the extra token: γ + 1 rows
    caption: str  # one sentence saying what just happened
    committed: int  # rounds whose tokens are in the committed text

    @property
    def focus(self) -> int:
        """The slot the charts follow unless the viewer moved the cursor (1-based)."""
        s = self.step
        if s.phase in (Phase.DRAFT, Phase.JUDGE):
            return s.k
        return 1 if s.phase == Phase.VERIFY else len(self.slots)


def reveal(rnd: Round, step: Step, method: str = "draft") -> Frame:
    """What the screen shows of `rnd` at `step` (`method`: the drafter, for the captions)."""
    ph, k, g = step.phase, step.k, rnd.gamma
    shown = k if ph == Phase.DRAFT else g  # drafts visible
    judged = k if ph == Phase.JUDGE else (rnd.judged if ph > Phase.JUDGE else 0)
    slots = []
    for i, (d, j) in enumerate(zip(rnd.drafts, rnd.judgements), 1):
        if i > shown:
            slots.append(Slot(i, None, "hidden"))
            continue
        p = rnd.p[i - 1] if ph >= Phase.VERIFY else None  # the verify pass scores every draft
        rejected_seen = judged > rnd.accepted  # the rejection (and so the greyed tail) is shown
        if i <= judged or (j.kind == "discard" and rejected_seen):
            slots.append(Slot(i, d.text, j.kind, d.q, p, j.u, j.ratio))
        else:
            slots.append(Slot(i, d.text, "drafted", d.q, p))
    e = rnd.extra
    extra = (
        Slot(g + 1, e.text, e.kind, q=e.q, p=e.p, residual=e.residual)
        if ph >= Phase.EXTRA
        else Slot(g + 1, None, "hidden")
    )
    return Frame(
        step,
        rnd,
        tuple(slots) + (extra,),
        caption(rnd, step, method),
        rnd.index + (ph == Phase.COMMIT),
    )


# What each drafter does to propose draft k (nanospec/drafters.py, heads/drafters.py, heads/modules.py).
PROPOSES = {
    "draft": "the draft model reads the text and samples {x} from its own law, q(x) = {q}",
    "ngram": (
        "prompt lookup copies {x} from where the last tokens occurred earlier; a copy is"
        " certain, so q(x) = {q} (a point mass)"
    ),
    "medusa": (
        "Medusa head {k}, a small block on a feature the target already computed, guesses"
        " {x} {k} token{s} past the text, blind to the drafts before it; q(x) = {q}"
    ),
    "eagle": (
        "the EAGLE head predicts the target's next feature and reads {x} from it through"
        " the target's output layer, with q(x) = {q}"
    ),
    "mtp": (
        "multi-token prediction module {k}, trained with the target, predicts {x} from the"
        " target's features and the tokens before it, with q(x) = {q}"
    ),
    "ssd": (
        "the draft model drew {x} with q(x) = {q} — ahead of time, during the last round's"
        " verify, if that round ended as it guessed (a cache hit); else just now"
    ),
}


def caption(rnd: Round, step: Step, method: str = "draft") -> str:
    ph, k, g = step.phase, step.k, rnd.gamma
    if ph == Phase.DRAFT:
        d = rnd.drafts[k - 1]
        what = PROPOSES.get(method, PROPOSES["draft"])
        return (
            f"Draft {k}/{g}: "
            + what.format(x=repr(d.text), q=_fmt(d.q), k=k, s="" if k == 1 else "s")
            + "."
        )
    if ph == Phase.VERIFY and g == 0:
        why = (
            "autoregressive decoding drafts nothing"
            if method == "ar"
            else "prompt lookup found no earlier match to copy"
            if method == "ngram"
            else "no room is left for drafts before the context's end"
        )
        return f"No drafts: {why}, so the target takes one ordinary decode step."
    if ph == Phase.VERIFY:
        return (
            f"Verify: ONE target pass scores all {g} drafts at once (and the position after"
            f" them), giving p(x) for each."
        )
    if ph == Phase.JUDGE:
        d, j = rnd.drafts[k - 1], rnd.judgements[k - 1]
        x = f"x{str(k).translate(SUB)} {d.text!r}"
        if j.kind == "accept":
            return f"{x}: u = {_fmt(j.u)} < p/q = {_fmt(j.ratio)}, so it is accepted ✓."
        tail = g - k
        rest = (
            ""
            if not tail
            else "; the draft after it is discarded ·"
            if tail == 1
            else f"; the {tail} drafts after it are discarded ·"
        )
        return f"{x}: u = {_fmt(j.u)} ≥ p/q = {_fmt(j.ratio)}, so it is rejected ✗{rest}."
    e = rnd.extra
    if ph == Phase.EXTRA and g == 0:
        return f"★ The target draws {e.text!r} from its own p, as plain decoding would."
    if ph == Phase.EXTRA:
        if e.kind == "resample":
            known = f" (p {_fmt(e.p)}, q {_fmt(e.q)})" if e.p is not None else ""
            return (
                f"↻ The target replaces it with {e.text!r}, drawn from the residual"
                f" norm(max(0, p − q)): residual {_fmt(e.prob)}{known}."
            )
        return (
            f"★ All {g} drafts accepted: the same target pass gave p at the next position,"
            f" so the bonus token {e.text!r} comes free."
        )
    made = f"{rnd.accepted} accepted + 1 {'resampled' if e.kind == 'resample' else 'bonus'}"
    note = " (cut short by the end of text or the length limit)" if rnd.cut_short else ""
    n = len(rnd.emitted)
    return f"Commit: +{n} token{'s' if n != 1 else ''} from 1 target call ({made}){note}."


@dataclass(frozen=True)
class Chart:
    """What the probability charts show for one slot of a frame."""

    title: str
    q: tuple | None  # ((id, text, prob), ...) the draft's law here, or None (unknown / hidden)
    p: tuple | None  # the target's law here
    residual: tuple | None  # norm(max(0, p − q)): shown only where a rejection needs it
    marked: int | None  # the drafted token at this slot (highlighted in q and p)
    chosen: int | None  # the token the target drew here (↻ from the residual, ★ from p)
    note: str  # one line explaining what the charts say


def _with(top: tuple | None, token: int | None, text: str, prob: float | None) -> tuple | None:
    """A top list, plus the token this slot is about when it ranks below the listed ones."""
    if top is None or token is None or prob is None or any(t[0] == token for t in top):
        return top
    return top + ((token, text, prob),)


def chart(frame: Frame, slot: int) -> Chart:
    """Charts for `slot` (1-based; γ+1 is the extra token) at this frame."""
    rnd, g = frame.round, frame.round.gamma
    ph = frame.step.phase
    s = frame.slots[slot - 1]
    e = rnd.extra
    if slot == g + 1:  # the extra token: a bonus has its own position, a resample sits on ✗
        if s.mark == "hidden":
            return Chart(
                f"extra token (slot {slot})",
                None,
                None,
                None,
                None,
                None,
                "After judging, the target adds one token of its own.",
            )
        if s.mark == "bonus":
            return Chart(
                f"★ bonus x{str(slot).translate(SUB)} = {e.text!r}",
                None,
                _with(rnd.p_top[g], e.token, e.text, e.prob),
                None,
                None,
                e.token,
                (
                    "Every draft was accepted, so the bonus token is "
                    if g
                    else "No drafts this round: the token is "
                )
                + f"drawn from the target's p{str(slot).translate(SUB)}.",
            )
        slot = rnd.accepted + 1
        s = frame.slots[slot - 1]
    d = rnd.drafts[slot - 1]
    title = f"x{str(slot).translate(SUB)} = {s.text!r}" if s.text is not None else f"slot {slot}"
    if s.mark == "hidden":
        return Chart(title, None, None, None, None, None, "Not drafted yet.")
    q = _with(d.q_top, d.token, d.text, d.q)
    p = _with(rnd.p_top[slot - 1], d.token, d.text, rnd.p[slot - 1]) if ph >= Phase.VERIFY else None
    if s.mark == "drafted":
        note = (
            "q: the draft's law; p arrives with the target's verify pass."
            if p is None
            else "p (target) and q (draft) at this position; the verdict comes next."
        )
        return Chart(title, q, p, None, d.token, None, note)
    if s.mark == "accept":
        return Chart(
            title,
            q,
            p,
            None,
            d.token,
            None,
            f"Accepted ✓: u = {_fmt(s.u)} < p/q = {_fmt(s.ratio)}; no residual needed.",
        )
    if s.mark == "discard":
        return Chart(
            title,
            q,
            p,
            None,
            d.token,
            None,
            "Discarded ·: after a rejection, later drafts are never judged.",
        )
    drawn = ph >= Phase.EXTRA
    note = f"Rejected ✗: u = {_fmt(s.u)} ≥ p/q = {_fmt(s.ratio)}. " + (
        f"↻ {e.text!r} was drawn from the residual."
        if drawn
        else "The correction is drawn from the residual next."
    )
    residual = _with(e.top, e.token, e.text, e.prob) if drawn else e.top
    return Chart(title, q, p, residual, d.token, e.token if drawn else None, note)
