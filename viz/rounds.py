"""Trace events -> `Round`s: one speculative round as plain Python values the UI can show.
Also reading a trace file for replay, and saving one.

The speculative loop's events (nanospec/trace.py, schema 2) are flat: draft, draft, ..., verify,
accept, reject, discard, ..., resample-or-bonus, round_end. This file groups one round's events
into a `Round` and checks that a recorded trace makes sense, so a bad file is one clear
`UserError` before the UI opens, never a traceback in the middle of an animation.

Worked example (γ = 3, the draft proposed ' Paris', ' and', ' the'):

    draft ×3 -> verify -> accept ' Paris', reject ' and', discard ' the' -> resample ' is'
    Round(accepted=1, judged=2, extra=Extra("resample", ' is', ...), emitted_text=" Paris is")

An SSD round (nanospec/ssd/loop.py) also carries its `ssd` event as `Round.ssd`, a `Speculation`:
where this round's drafts came from, how the round ended, and the cache it built for the next
round; other methods' rounds (and traces from before SSD) have `ssd = None`.

What this file deliberately leaves out: rows other than row 0 (the visualiser follows one
sequence; `nanospec generate --num-samples` traces still replay, showing their first row), and
token trees: a tree trace is refused with a pointer to `nanospec generate --tree ... --show`,
which prints each tree and its verdicts.
"""

import time
from dataclasses import dataclass
from pathlib import Path

from nanospec.errors import UserError
from nanospec.trace import read_jsonl, run_end, write_jsonl

JUDGED = ("accept", "reject", "discard")


@dataclass(frozen=True)
class Draft:
    index: int  # 1..γ
    token: int
    text: str
    q: float  # q(x): the law the draft sampled this token from
    q_top: tuple  # ((id, text, prob), ...) the draft's most likely tokens at this position


@dataclass(frozen=True)
class Judgement:
    kind: str  # "accept" | "reject" | "discard"
    p: float | None  # p(x) under the target (None for a discarded draft: never judged)
    u: float | None  # the uniform draw; accept iff u < p/q
    ratio: float | None  # p(x) / q(x)


@dataclass(frozen=True)
class Extra:
    kind: str  # "resample" (drawn from the residual) | "bonus" (drawn from p_{γ+1})
    token: int
    text: str
    prob: float  # its probability under the law it was drawn from: the residual, or p for a bonus
    p: float | None  # p(y): the target's probability of it here (None in a schema 1 trace)
    q: float | None  # q(y): the draft's (a resample only; None for a bonus or in schema 1)
    top: tuple  # the most likely tokens of the law it was drawn from

    @property
    def residual(self) -> float | None:
        """Its probability under the residual norm(max(0, p − q)) (a resample only)."""
        return self.prob if self.kind == "resample" else None


@dataclass(frozen=True)
class Speculation:
    """SSD's side of one round (the trace's `ssd` event). Mind the tenses: `hit` looks back,
    `outcome` is now, `cache` looks ahead. Round 1 of tests/viz/data/capital-ssd.jsonl:

        Speculation(hit=False, source="backup", outcome=(0, 1519),
                    cache=((0, 1519, ' Par'), (0, 1972, ' Athens'), (1, 1462, 'akar'), ...))

    Round 1 had no cache to draft from (a miss: the backup drafted); it accepted no draft and
    ended with ↻ ' Par' (id 1519), which is branch 0 of the cache it built — so round 2 drafts
    from that branch, and round 2's own Speculation has hit=True.
    """

    hit: bool  # THIS round's drafts came from the cache the LAST round built (round 1: never)
    source: str  # "cache" (a hit) or "backup" (a miss: the backup drafter drafted them)
    outcome: tuple[int, int]  # how THIS round ended: (k drafts accepted, then token t*)
    cache: tuple[tuple[int, int, str], ...]  # built during THIS round for the NEXT: (k, t*, text)

    @property
    def branch(self) -> int | None:
        """The cache entry matching this round's outcome — the one the next round drafts
        from — or None: the next round is a miss."""
        return next((j for j, (k, t, _) in enumerate(self.cache) if (k, t) == self.outcome), None)


def speculation_from_event(e: dict) -> Speculation:
    """An `ssd` event -> a Speculation; a malformed one is a ValueError (or KeyError)."""
    outcome, cache = e["outcome"], e["cache"]
    well_formed = (
        _is(e["hit"], bool)
        and e["source"] in ("cache", "backup")
        and len(outcome) == 2
        and all(_is(x, int) for x in outcome)
        and all(len(c) == 3 and _is(c[0], int) and _is(c[1], int) for c in cache)
    )
    if not well_formed:
        raise ValueError("its ssd event is malformed")
    return Speculation(
        e["hit"],
        e["source"],
        (outcome[0], outcome[1]),
        tuple((int(k), int(t), str(text)) for k, t, text in cache),
    )


@dataclass(frozen=True)
class Round:
    index: int  # 0-based round number
    drafts: tuple[Draft, ...]  # γ proposals (none when the drafter had nothing to propose)
    p: tuple[float, ...]  # p(x₁) .. p(x_γ): the target's probability of each draft
    p_top: tuple  # γ+1 lists: the target's most likely tokens at each verified position
    judgements: tuple[Judgement, ...]  # one per draft
    extra: Extra  # the one token the target adds every round
    accepted: int  # n: drafts accepted this round
    emitted: tuple[int, ...]  # tokens committed (n + 1, cut short by EOS or the length limit)
    emitted_text: str
    draft_ms: float
    verify_ms: float
    events: tuple  # the raw events, for summarize() and for saving the trace
    ssd: Speculation | None = None  # SSD's cache and where the drafts came from (else None)

    @property
    def gamma(self) -> int:
        return len(self.drafts)

    @property
    def judged(self) -> int:
        """Drafts the verify rule looked at: the accepted ones and the first rejection."""
        return min(self.accepted + 1, self.gamma)

    @property
    def cut_short(self) -> bool:
        """True when EOS or the length limit kept fewer tokens than were accepted + 1."""
        return len(self.emitted) < self.accepted + 1


def _top(lst) -> tuple:
    return tuple((int(i), str(t), float(p)) for i, t, p in lst)


def _is(value, kind) -> bool:
    """JSON's types: a float field may hold an int; a bool is never a number."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float) if kind is float else kind)


def _maybe(x) -> float | None:
    return None if x is None else float(x)


def _one(by_type: dict, *kinds: str) -> dict:
    found = [e for k in kinds for e in by_type.get(k, [])]
    if len(found) != 1:
        raise ValueError(f"expected one {' or '.join(kinds)} event, found {len(found)}")
    return found[0]


def extra_from_event(e: dict) -> Extra:
    """A resample or bonus event -> an Extra (a resample's own probability is the residual's)."""
    resample = e["type"] == "resample"
    prob = float(e["residual"] if resample else e["p"])
    return Extra(
        e["type"],
        int(e["token"]),
        str(e["text"]),
        prob,
        _maybe(e.get("p")),
        _maybe(e.get("q")) if resample else None,
        _top(e["top"]),
    )


def round_from_events(events: list[dict]) -> Round:
    """One round's events (one row, in the order events_from_step writes them) -> a Round."""
    by_type: dict[str, list[dict]] = {}
    for e in events:
        by_type.setdefault(e["type"], []).append(e)
    drafts = sorted(by_type.get("draft", []), key=lambda e: e["index"])
    judged = sorted((e for t in JUDGED for e in by_type.get(t, [])), key=lambda e: e["index"])
    verify = _one(by_type, "verify")
    extra = _one(by_type, "resample", "bonus")
    end = _one(by_type, "round_end")
    g = len(drafts)
    # g = 0 is a round with nothing to verify (prompt lookup found no match): a decode step.
    consistent = (
        len(judged) == g
        and len(verify["p"]) == g
        and len(verify["p_top"]) == g + 1
        and _is(end["drafted"], int)
        and end["drafted"] == g
    )
    if not consistent:
        raise ValueError("draft, verify, judgement and round_end events disagree about γ")
    if not _is(end["accepted"], int) or not 0 <= end["accepted"] <= g:
        raise ValueError(f"round_end says {end['accepted']!r} drafts were accepted")
    return Round(
        index=int(end["round"]),
        drafts=tuple(
            Draft(int(e["index"]), int(e["token"]), str(e["text"]), float(e["q"]), _top(e["q_top"]))
            for e in drafts
        ),
        p=tuple(float(x) for x in verify["p"]),
        p_top=tuple(_top(lst) for lst in verify["p_top"]),
        judgements=tuple(
            Judgement(e["type"], _maybe(e.get("p")), _maybe(e.get("u")), _maybe(e.get("ratio")))
            for e in judged
        ),
        extra=extra_from_event(extra),
        accepted=int(end["accepted"]),
        emitted=tuple(int(t) for t in end["emitted"]),
        emitted_text=str(end["emitted_text"]),
        draft_ms=float(end["draft_ms"]),
        verify_ms=float(end["verify_ms"]),
        events=tuple(events),
        ssd=speculation_from_event(_one(by_type, "ssd")) if "ssd" in by_type else None,
    )


@dataclass
class Recording:
    """A whole run: its run_start event, its compile event (once known; None in traces that
    predate it) and the rounds recorded so far (they grow when live)."""

    start: dict
    rounds: list[Round]
    compile: dict | None = None

    @property
    def compile_ms(self) -> float | None:
        return float(self.compile["ms"]) if self.compile else None

    def events(self) -> list[dict]:
        """Every event, in the order a trace file stores them (run_end is added on save)."""
        head = [self.start] + ([self.compile] if self.compile else [])
        return head + [e for r in self.rounds for e in r.events]


def recording_from_events(events: list[dict], where: str = "the trace") -> Recording:
    """A complete trace -> a Recording; anything malformed or cut short is one UserError."""
    start = dict(events[0])
    kinds = {
        "prompt": str,
        "method": str,
        "gamma": int,
        "temperature": float,
        "top_k": int,
        "top_p": float,
        "seed": int,
    }
    for field, kind in kinds.items():
        if field not in start:
            raise UserError(
                f"{where}: its run_start event lacks {field!r}; is it a nanospec trace?"
            )
        if not _is(start[field], kind):
            raise UserError(f"{where}: its run_start event has {field} = {start[field]!r}.")
    if "tree" in start:
        raise UserError(
            f"{where} traces a token tree; the visualiser animates chains of drafts, "
            f"so print this run with `nanospec generate --tree ... --show` instead."
        )
    if events[-1].get("type") != "run_end":
        raise UserError(f"{where} has no run_end event at its end: it looks truncated.")
    groups: dict[int, list[dict]] = {}
    for n, e in enumerate(events[1:-1], 2):
        if e.get("row", 0) == 0 and "round" in e:
            if not isinstance(e["round"], int) or e["round"] < 0:
                raise UserError(f"{where}: event {n} has round {e['round']!r}, not a round number.")
            groups.setdefault(e["round"], []).append(e)
    rounds = []
    for r, evs in sorted(groups.items()):
        try:
            rounds.append(round_from_events(evs))
        except (KeyError, TypeError, ValueError) as err:
            detail = f"missing {err}" if isinstance(err, KeyError) else str(err) or "malformed"
            problem = f"{where}: round {r + 1} is incomplete or malformed ({detail})."
            raise UserError(problem) from None
    if not rounds:
        raise UserError(f"{where} holds no rounds: nothing to replay.")
    if [r.index for r in rounds] != list(range(len(rounds))):
        raise UserError(
            f"{where}: its rounds are not numbered 1..{len(rounds)}; rounds are missing."
        )
    compiles = [e for e in events if e.get("type") == "compile"]
    if compiles and not _is(compiles[0].get("ms"), float):
        raise UserError(f"{where}: its compile event has ms = {compiles[0].get('ms')!r}.")
    return Recording(start, rounds, compiles[0] if compiles else None)


def load_recording(path) -> Recording:
    """Read a trace file written by `nanospec generate --trace` or by the demo's save key."""
    return recording_from_events(read_jsonl(path), where=str(path))


def save_recording(recording: Recording, folder: Path) -> Path:
    """Write the recording as a trace (run_end added) to a new time-stamped file in `folder`
    (made if missing)."""
    events = recording.events()
    Path(folder).mkdir(parents=True, exist_ok=True)
    events.append(run_end(events))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = Path(folder) / f"nanospec-trace-{stamp}.jsonl", 1
    while path.exists():  # two saves in one second keep both
        n += 1
        path = Path(folder) / f"nanospec-trace-{stamp}-{n}.jsonl"
    write_jsonl(path, events)
    return path
