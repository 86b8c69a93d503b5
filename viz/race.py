"""Race mode (`nanospec demo --race`): autoregressive decoding against a speculative method.

The two run side by side, the text growing in both panes at the speed each really runs.

    ╭─ ar · autoregressive ──────────────────╮╭─ draft · speculative γ=4 ──────────────╮
    │ The capital of France is Paris. France ││ The capital of France is Paris. France │
    │ is a neighbour                         ││ is a neighbour of France. France is a  │
    │ target calls 8 · tokens 8 · 0.06 s     ││ target calls 4 · tokens 13 · 0.06 s    │
    ╰────────────────────────────────────────╯╰────────────────────────────────────────╯
     (at the finish:) speedup ×2.10 = ar 0.30 s ÷ draft 0.14 s, end to end (median of 3, untraced)
                      tokens per target call: ar 1.00 · draft 3.56

Each run is timed alone, untraced end to end, and both panes replay those times on one clock,
a round's tokens appearing when its measured time has passed (how, and why that is honest:
race_timing.py; each pane: race_pane.py). A race of a fraction of a second opens in slow
motion (`watchable`): one clock, so every ratio is kept. What this file deliberately leaves out:
batches, token trees, and changing settings (quit and run again).
"""

import threading
import time
from dataclasses import replace

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static
from textual.worker import get_current_worker

from nanospec.errors import UserError
from viz.key_bar import KeyBar
from viz.live import LiveRun
from viz.race_pane import RacePane, counter
from viz.race_timing import Lane, round_time, untraced_seconds, verdict, warm_up
from viz.settings import Settings
from viz.speeds import SPEED_KEYS, SPEEDS, speed_text, step_speed
from viz.status_bar import SPINNER, settings_text
from viz.toasts import Toasts

WATCHABLE_S = 8.0  # a race opens in slow motion, slowed (by powers of 2) to last at least this
TICK = 0.05  # the timer that moves the clock and turns the spinner
NOTE = "Each run was timed alone, untraced; the panes replay those times on one clock."


def watchable(seconds: float) -> float:
    """The fastest speed in SPEEDS, at most real time, at which a race of `seconds` lasts at
    least WATCHABLE_S (both panes share the clock, so slowing it keeps every ratio).

    >>> watchable(0.25), watchable(20.0)
    (0.03125, 1.0)
    """
    fitting = [x for x in SPEEDS if x <= 1 and seconds / x >= WATCHABLE_S]
    return max(fitting, default=SPEEDS[0])


class RaceApp(Toasts, App):
    CSS_PATH = "race.tcss"
    TITLE = "nanospec demo --race"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]  # wide: the panes side by side
    BINDINGS = [  # the key bar lists them in this order
        Binding("space", "toggle_play", "play/pause"),
        Binding("r", "restart", "restart"),
        *SPEED_KEYS,
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
        self.lanes = [
            Lane("ar", "autoregressive"),
            Lane(settings.method, f"speculative γ={settings.gamma}"),
        ]
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
                warm_up(run)
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
        self.say(message.error, severity="error")
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
            pane.show(
                prompt,
                self.tok.decode(t for t in ids if t != self.tok.eos_id),
                count + (" · finished ✓" if n == lane.rounds else ""),
            )
        finished = self.done and self.clock >= self.end
        self.query_one("#race-result", Static).update(verdict(*self.lanes) if finished else "")
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
            doing = (
                "compiling" if self.timing is None else f"timing {self.lanes[self.timing].method}"
            )
            out.append(
                f"{SPINNER[self.ticks % len(SPINNER)]} {doing}… {self.now() - self.started:.1f}s",
                style="bold yellow",
            )
        else:
            out.append("▶ playing" if self.playing else "❚❚ paused", style="bold")
            slow = " slow motion" if self.speed < 1 else ""
            out.append(f" {speed_text(self.speed)}{slow} │ {self.clock:.2f} / {self.end:.2f} s")
        s = self.settings
        out.append(" │ ")
        shown = {
            "method": s.method,
            "gamma": s.gamma,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "seed": s.seed,
        }
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
        self.speed = step_speed(self.speed, delta)
