"""Race mode (`nanospec demo --race`): autoregressive decoding and a speculative method, side by
side, the text growing in both panes at the speed each really runs.

    ╭─ ar · autoregressive ──────────────────╮╭─ draft · speculative γ=4 ──────────────╮
    │ The capital of France is Paris. France ││ The capital of France is Paris. France │
    │ is a neighbour                         ││ is a neighbour of France. France is a  │
    │ target calls 8 · tokens 8 · 0.06 s     ││ target calls 4 · tokens 13 · 0.06 s    │
    ╰────────────────────────────────────────╯╰────────────────────────────────────────╯
     (at the finish:) speedup ×2.10 = ar 0.30 s ÷ draft 0.14 s, end to end (median of 3, untraced)
                      tokens per target call: ar 1.00 · draft 3.56

Honesty first: run at the same time, the two would fight for the same CPU cores, and the slower
one would look slower than it is. So a thread worker (JAX never runs on the UI thread) compiles
both programs and warms each up, then works on one method at a time, alone:

1. the step-wise loop (what `nanospec generate --trace` runs) gives the rounds: which tokens
   each emitted and how long each took (draft_ms + verify_ms, synced with block_until_ready);
2. the fused loop without any trace (what `generate` and `bench` time) gives the run's real
   end-to-end time, prefill included: the median of REPEATS runs. Computing a round's trace
   (the top tokens of p and q at every position) costs the step-wise verify pass several times
   a plain one, so the traced times alone would make speculation look slower than it is.

The round times are then scaled to sum to the untraced total, and both panes replay them on
one clock, a round's tokens appearing when its cumulative time has passed:

    >>> lane = Lane("ar", "autoregressive", ends=[0.1, 0.2, 0.3], tokens=[[5], [6], [7]])
    >>> lane.shown(0.25), lane.total_s
    (2, 0.3)

A race of a fraction of a second opens in slow motion (`watchable`): one clock, so every ratio
is kept. What this file deliberately leaves out: batches, token trees, and changing settings
(quit and run again).
"""

import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field, replace

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static
from textual.worker import get_current_worker

from nanospec.errors import UserError
from viz.key_bar import KeyBar
from viz.live import LiveRun
from viz.settings import Settings
from viz.status_bar import SPINNER, settings_text

SPEEDS = tuple(2.0 ** k for k in range(-6, 5))  # ×1/64 … ×16 of real time
WATCHABLE_S = 8.0  # a race opens in slow motion, slowed (by powers of 2) to last at least this
TICK = 0.05  # the timer that moves the clock and turns the spinner
WARM_UP_ROUNDS = 2  # untimed rounds per method before timing (prefill, draft, verify all run once)
NOTE = "Each run was timed alone, untraced; the panes replay those times on one clock."
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


def watchable(seconds: float) -> float:
    """The fastest speed in SPEEDS, at most real time, at which a race of `seconds` lasts at
    least WATCHABLE_S (both panes share the clock, so slowing it keeps every ratio).

    >>> watchable(0.25), watchable(20.0)
    (0.03125, 1.0)
    """
    fitting = [x for x in SPEEDS if x <= 1 and seconds / x >= WATCHABLE_S]
    return max(fitting, default=SPEEDS[0])


def speed_text(speed: float) -> str:
    """The speed as the status bar writes it.

    >>> speed_text(0.25), speed_text(4.0)
    ('×1/4', '×4')
    """
    return f"×{speed:g}" if speed >= 1 else f"×1/{1 / speed:g}"


def counter(calls: int, tokens: int, seconds: float) -> str:
    """
    >>> counter(4, 14, 0.0512)
    'target calls 4 · tokens 14 · 0.05 s'
    """
    return f"target calls {calls} · tokens {tokens} · {seconds:.2f} s"


def verdict(ar: Lane, spec: Lane) -> str:
    """The race's result in two lines: the measured speedup, then each one's tokens per call.

    >>> print(verdict(Lane("ar", "", [0.2], [[1, 2]]), Lane("draft", "", [0.1], [[1, 2]])))
    speedup ×2.00 = ar 0.20 s ÷ draft 0.10 s, end to end (median of 3, untraced)
    tokens per target call: ar 2.00 · draft 2.00
    """
    speedup = ar.total_s / max(spec.total_s, 1e-9)
    per_call = " · ".join(f"{lane.method} {len(lane.ids()) / max(lane.rounds, 1):.2f}"
                          for lane in (ar, spec))
    slower = " · slower than ar here" if speedup < 1 else ""
    return (f"speedup ×{speedup:.2f} = ar {ar.total_s:.2f} s ÷ {spec.method} {spec.total_s:.2f} s, "
            f"end to end (median of {REPEATS}, untraced)\ntokens per target call: {per_call}{slower}")


def untraced_seconds(run: LiveRun) -> float:
    """The run end to end (prefill included) in the loop `nanospec generate` and `bench` use,
    with no trace computed: the median of REPEATS runs, after one warm-up. Same seed, same
    tokens as the traced run (decode.py), so the panes' text is this run's text."""
    from nanospec.decode import decode
    s = run.settings

    def once() -> float:
        result = decode(run.bundle, s.prompt, method=s.method, gamma=s.gamma,
                        temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=s.seed,
                        max_new=s.max_new)
        return result.stats["generate_seconds"]

    once()
    return sorted(once() for _ in range(REPEATS))[REPEATS // 2]


def round_time(events: list[dict]) -> tuple[float, list[int]]:
    """A round's measured seconds and emitted ids, from its round_end event (one row: row 0)."""
    end = next(e for e in events if e["type"] == "round_end")
    return (end["draft_ms"] + end["verify_ms"]) / 1e3, end["emitted"]


class RacePane(Vertical):
    """One method: the prompt and its text so far (scrolled to the end), and its counter line."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.text = self.count = ""  # the generated text on screen (no prompt), the counter line

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(classes="body")
        yield Static(classes="counter")

    def show(self, prompt: str, text: str, count: str) -> None:
        """Draw `text` after the prompt, and the counter line (only when either changed)."""
        if (text, count) == (self.text, self.count):
            return
        self.text, self.count = text, count
        self.query_one(".body", Static).update(Text.assemble((prompt, "bold"), text))
        self.query_one(".counter", Static).update(count)
        scroll = self.query_one(VerticalScroll)
        scroll.call_after_refresh(scroll.scroll_end, animate=False)


class RaceApp(App):
    CSS_PATH = "race.tcss"
    TITLE = "nanospec demo --race"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]  # wide: the panes side by side
    BINDINGS = [  # the key bar lists them in this order
        Binding("space", "toggle_play", "play/pause"),
        Binding("r", "restart", "restart"),
        Binding("plus,equals_sign", "speed(1)", "speed", key_display="+ -"),
        Binding("minus", "speed(-1)", "slower", show=False),
        Binding("q", "quit", "quit"),
    ]

    playing: reactive[bool] = reactive(False)
    speed: reactive[float] = reactive(1.0)

    class Timing(Message):  # compiled and warmed up; lane `index` is being timed now
        def __init__(self, index: int):
            super().__init__()
            self.index = index

    class RoundTimed(Message):
        def __init__(self, index: int, seconds: float, emitted: list[int]):
            super().__init__()
            self.index, self.seconds, self.emitted = index, seconds, emitted

    class Untraced(Message):  # lane `index`'s end-to-end time without tracing
        def __init__(self, index: int, seconds: float):
            super().__init__()
            self.index, self.seconds = index, seconds

    class Measured(Message):
        pass

    class Failed(Message):
        def __init__(self, error: str):
            super().__init__()
            self.error = error

    def __init__(self, bundle, settings: Settings, *, autoplay: bool = True, now=time.monotonic):
        """Race AR against `settings.method`; a setting the models cannot run is a UserError
        here. `now` is the clock the replay follows (a test can hand in its own)."""
        super().__init__()
        self.tok, self.settings, self.autoplay, self.now = bundle.tok, settings, autoplay, now
        self.runs = [LiveRun(bundle, replace(settings, method="ar")), LiveRun(bundle, settings)]
        self.lanes = [Lane("ar", "autoregressive"),
                      Lane(settings.method, f"speculative γ={settings.gamma}")]
        self.timing: int | None = None  # the lane being timed; None while compiling
        self.done = False  # both runs are timed: the race can play
        self.error = ""
        self.clock = 0.0  # seconds into the race
        self.started = self.last = now()  # when measuring began; the previous tick
        self.ticks = 0
        self.in_flight = 0  # worker threads still running (a quitting process waits for them)
        self._lock = threading.Lock()

    @property
    def end(self) -> float:
        return max(lane.total_s for lane in self.lanes)

    def compose(self) -> ComposeResult:
        yield Static(id="race-status")
        yield Static(NOTE, id="race-note")
        with Container(id="lanes"):
            for lane in self.lanes:
                pane = RacePane(id=f"lane-{lane.method}", classes=lane.method)
                pane.border_title = f"{lane.method} · {lane.label}"
                yield pane
        yield Static(id="race-result")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        self.set_interval(TICK, self._tick)
        self._measure()
        self._redraw()

    # ---------------------------------------------------------------- measuring (worker thread)

    @work(thread=True, exclusive=True, group="race")
    def _measure(self) -> None:
        """Compile and warm up both, then time each alone: the only place this app runs JAX."""
        worker = get_current_worker()
        with self._lock:
            self.in_flight += 1
        try:
            for run in self.runs:
                run.compile()
                warm_up = run.rounds()
                for _ in zip(range(WARM_UP_ROUNDS), warm_up):
                    pass
                warm_up.close()
            for i, run in enumerate(self.runs):
                self.post_message(self.Timing(i))
                for events in run.rounds():
                    if worker.is_cancelled:
                        return
                    self.post_message(self.RoundTimed(i, *round_time(events)))
                self.post_message(self.Untraced(i, untraced_seconds(run)))
            self.post_message(self.Measured())
        except UserError as e:
            self.post_message(self.Failed(str(e)))
        finally:
            with self._lock:
                self.in_flight -= 1

    def on_race_app_timing(self, message: Timing) -> None:
        self.timing = message.index

    def on_race_app_round_timed(self, message: RoundTimed) -> None:
        self.lanes[message.index].add(message.seconds, message.emitted)

    def on_race_app_untraced(self, message: Untraced) -> None:
        self.lanes[message.index].scale_to(message.seconds)

    def on_race_app_measured(self, _: Measured) -> None:
        self.done, self.timing, self.clock = True, None, 0.0
        self.speed = watchable(self.end)
        self.playing = self.autoplay
        self._redraw()

    def on_race_app_failed(self, message: Failed) -> None:
        self.error = message.error
        self.notify(message.error, title="nanospec", severity="error")
        self._redraw()

    # ---------------------------------------------------------------- the clock and drawing

    def _tick(self) -> None:
        self.ticks += 1
        now = self.now()
        if self.playing and self.done:
            self.clock = min(self.end, self.clock + (now - self.last) * self.speed)
            if self.clock >= self.end:
                self.playing = False  # both have finished
        self.last = now
        self._redraw()

    def show_end(self) -> None:
        """Stop at the finish line: both texts complete, the speedup shown (for --screenshot)."""
        self.playing = False
        self.clock = self.end
        self._redraw()

    def _redraw(self) -> None:
        # subtle: a tick or a worker's message can still arrive while the app shuts down, after
        # its widgets are gone; there is nothing left to draw then.
        if not self.query("#race-result") or len(self.query(RacePane)) < len(self.lanes):
            return
        prompt = self.settings.prompt
        for i, lane in enumerate(self.lanes):
            pane = self.query_one(f"#lane-{lane.method}", RacePane)
            if not self.done:
                pane.show(prompt, "", self._waiting(i))
                continue
            n = lane.shown(self.clock)
            ids = lane.ids(n)
            count = counter(n, len(ids), min(self.clock, lane.total_s))
            pane.show(prompt, self.tok.decode(t for t in ids if t != self.tok.eos_id),
                      count + (" · finished ✓" if n == lane.rounds else ""))
        finished = self.done and self.clock >= self.end
        self.query_one("#race-result", Static).update(
            verdict(*self.lanes) if finished else "")
        self.query_one("#race-status", Static).update(self._status())

    def _waiting(self, i: int) -> str:
        """A pane's counter line before the race: what the worker is doing for it."""
        if self.error:
            return "stopped"
        if self.timing is None:
            return "compiling…"
        if self.timing == i:
            return f"timing alone… {len(self.lanes[i].ids())} tokens"
        return "timed" if i < self.timing else "waiting its turn"

    def _status(self) -> Text:
        """The top line: state first, settings last (a narrow terminal cuts the end)."""
        out = Text.assemble((" race ", "reverse bold"), " ")
        if self.error:
            out.append(f"✗ {self.error}", style="bold red")
        elif not self.done:
            doing = ("compiling" if self.timing is None
                     else f"timing {self.lanes[self.timing].method}")
            out.append(f"{SPINNER[self.ticks % len(SPINNER)]} {doing}… "
                       f"{self.now() - self.started:.1f}s", style="bold yellow")
        else:
            out.append("▶ playing" if self.playing else "❚❚ paused", style="bold")
            slow = " slow motion" if self.speed < 1 else ""
            out.append(f" {speed_text(self.speed)}{slow} │ {self.clock:.2f} / {self.end:.2f} s")
        s = self.settings
        out.append(" │ ")
        shown = {"method": s.method, "gamma": s.gamma, "temperature": s.temperature,
                 "top_k": s.top_k, "top_p": s.top_p, "seed": s.seed}
        out.append(settings_text(shown), style="dim")
        out.no_wrap, out.overflow = True, "ellipsis"
        return out

    # ---------------------------------------------------------------- keys

    def key_enabled(self, action: str) -> bool:
        """The key bar greys the player's keys until both runs are timed."""
        return self.done or action in ("speed(1)", "quit")

    def watch_playing(self) -> None:
        self.last = self.now()  # time spent paused does not count

    def watch_speed(self) -> None:
        self._redraw()

    def action_toggle_play(self) -> None:
        if not self.done:
            self.bell()
            return
        if not self.playing and self.clock >= self.end:
            self.clock = 0.0  # at the finish, play races again
        self.playing = not self.playing
        self._redraw()

    def action_restart(self) -> None:
        if self.done:
            self.clock = 0.0
            self.playing = True
            self._redraw()

    def action_speed(self, delta: int) -> None:
        i = max(0, min(len(SPEEDS) - 1, SPEEDS.index(self.speed) + delta))
        self.speed = SPEEDS[i]
