"""How race mode (race.py) times its two runs, and what it keeps of them.

It keeps a `Lane` per method, and the verdict at the finish. race.py's worker thread calls
these; nothing here draws.

Honesty first: run at the same time, the two would fight for the same CPU cores, and the slower
one would look slower than it is. So the worker compiles both programs and warms each up
(`warm_up`), then works on one method at a time, alone:

1. the step-wise loop (what `nanospec generate --trace` runs) gives the rounds: which tokens
   each emitted and how long each took (draft_ms + verify_ms, synced with block_until_ready;
   `round_time`);
2. the fused loop without any trace (what `generate` and `bench` time) gives the run's real
   end-to-end time, prefill included: the median of REPEATS runs (`untraced_seconds`).
   Computing a round's trace (the top tokens of p and q at every position) costs the step-wise
   verify pass several times a plain one, so the traced times alone would make speculation
   look slower than it is.

The round times are then scaled to sum to the untraced total (`Lane.scale_to`), and both panes
replay them on one clock, a round's tokens appearing when its cumulative time has passed:

    >>> lane = Lane("ar", "autoregressive", ends=[0.1, 0.2, 0.3], tokens=[[5], [6], [7]])
    >>> lane.shown(0.25), lane.total_s
    (2, 0.3)
"""

from bisect import bisect_right
from dataclasses import dataclass, field

from viz.live import LiveRun

WARM_UP_ROUNDS = 2  # untimed rounds per method before timing (prefill, draft, verify all run once)
REPEATS = 3  # untraced runs per method; the race uses their median


@dataclass
class Lane:
    """One method's timed run: when each round ended (seconds from the first round's start)
    and the token ids it emitted."""

    method: str
    label: str  # "autoregressive" or "speculative γ=4"
    ends: list[float] = field(default_factory=list)
    tokens: list[list[int]] = field(default_factory=list)

    def add(self, seconds: float, emitted: list[int]) -> None:
        self.ends.append((self.ends[-1] if self.ends else 0.0) + seconds)
        self.tokens.append(emitted)

    def scale_to(self, total: float) -> None:
        """Stretch the round times to sum to `total`, keeping their proportions.

        >>> lane = Lane("ar", "", ends=[1.0, 4.0], tokens=[[5], [6]]); lane.scale_to(2.0)
        >>> lane.ends
        [0.5, 2.0]
        """
        if self.total_s > 0:
            self.ends = [t * total / self.total_s for t in self.ends]

    @property
    def total_s(self) -> float:
        return self.ends[-1] if self.ends else 0.0

    def shown(self, clock: float) -> int:
        """How many rounds have finished `clock` seconds into the race."""
        return bisect_right(self.ends, clock)

    @property
    def rounds(self) -> int:
        return len(self.ends)

    def ids(self, rounds: int | None = None) -> list[int]:
        """The ids emitted by the first `rounds` rounds (default: all)."""
        return [t for r in self.tokens[:rounds] for t in r]


def verdict(ar: Lane, spec: Lane) -> str:
    """The race's result in two lines: the measured speedup, then each one's tokens per call.

    >>> print(verdict(Lane("ar", "", [0.2], [[1, 2]]), Lane("draft", "", [0.1], [[1, 2]])))
    speedup ×2.00 = ar 0.20 s ÷ draft 0.10 s, end to end (median of 3, untraced)
    tokens per target call: ar 2.00 · draft 2.00
    """
    speedup = ar.total_s / max(spec.total_s, 1e-9)
    per_call = " · ".join(
        f"{lane.method} {len(lane.ids()) / max(lane.rounds, 1):.2f}" for lane in (ar, spec)
    )
    slower = " · slower than ar here" if speedup < 1 else ""
    return (
        f"speedup ×{speedup:.2f} = ar {ar.total_s:.2f} s ÷ {spec.method} {spec.total_s:.2f} s, "
        f"end to end (median of {REPEATS}, untraced)\ntokens per target call: {per_call}{slower}"
    )


def warm_up(run: LiveRun) -> None:
    """Compile the run's programs and run its first WARM_UP_ROUNDS rounds, untimed."""
    run.compile()
    rounds = run.rounds()
    for _ in zip(range(WARM_UP_ROUNDS), rounds):
        pass
    rounds.close()


def round_time(events: list[dict]) -> tuple[float, list[int]]:
    """A round's measured seconds and emitted ids, from its round_end event (one row: row 0)."""
    end = next(e for e in events if e["type"] == "round_end")
    return (end["draft_ms"] + end["verify_ms"]) / 1e3, end["emitted"]


def untraced_seconds(run: LiveRun) -> float:
    """The run end to end (prefill included) in the loop `nanospec generate` and `bench` use,
    with no trace computed: the median of REPEATS runs, after one warm-up. Same seed, same
    tokens as the traced run (decode.py), so the panes' text is this run's text."""
    from nanospec.decode import decode

    s = run.settings

    def once() -> float:
        result = decode(
            run.bundle,
            s.prompt,
            method=s.method,
            gamma=s.gamma,
            temperature=s.temperature,
            top_k=s.top_k,
            top_p=s.top_p,
            seed=s.seed,
            max_new=s.max_new,
        )
        return result.stats["generate_seconds"]

    once()
    return sorted(once() for _ in range(REPEATS))[REPEATS // 2]
