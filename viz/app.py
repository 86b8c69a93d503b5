"""The demo app: speculative decoding, one round at a time, at a pace a person can follow.

Data flows one way. Rounds arrive as trace events — from a recorded file (replay) or from the
`Recorder`'s worker thread running the loop (live) — and are kept in a `Recording`. A `Position`
(playhead.py) says which step of which round is on screen; `_redraw` turns it into a `Frame` and
hands each widget the attributes it draws (attributes flow down; the recorder's messages flow
up). JAX never runs on the UI thread, so while the first run compiles the screen keeps moving
and says "compiling…". Replay mode never imports JAX at all.

What this file deliberately leaves out: drawing (the widget files), the rules of the animation
(playhead.py), running the model (recorder.py, live.py) and what each key does (demo_keys.py,
mixed in); it wires the timer, the recorder's messages and the widgets together.
"""

import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Static

from nanospec.errors import UserError
from nanospec.trace import summarize
from viz.cache_panel import CachePanel, cache_state, cache_title
from viz.charts import ProbCharts
from viz.demo_keys import KEYS, KeyActions
from viz.draw import LEGEND
from viz.key_bar import KeyBar
from viz.playhead import Phase, Position, at_phase, chart, forward, reveal
from viz.recorder import Recorder
from viz.round_table import RoundTable, waiting_text
from viz.rounds import Recording, round_from_events
from viz.settings import Settings
from viz.stats_panel import StatsPanel
from viz.status_bar import Status, StatusBar
from viz.text_panel import TextPanel
from viz.timeline import Timeline
from viz.toasts import Toasts

STEP_SECONDS = 0.7  # how long a step stays on screen at ×1 (the extra token and the commit: twice)
TICK = 0.1  # the timer that plays steps and turns the spinner


class DemoApp(KeyActions, Toasts, App):
    CSS_PATH = "demo.tcss"
    TITLE = "nanospec demo"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    BINDINGS = KEYS  # the key bar lists the shown ones, in this order

    pos: reactive[Position | None] = reactive(None)  # the step on screen; None before any round
    playing: reactive[bool] = reactive(False)
    speed: reactive[float] = reactive(1.0)
    cursor: reactive[int | None] = reactive(None)  # the slot the charts explain; None: follow

    def __init__(
        self,
        recording: Recording | None = None,
        *,
        bundle=None,
        settings: Settings | None = None,
        source: str = "live",
        autoplay: bool = True,
        start_round: int | None = None,
        save_dir: str | Path = "traces",
    ):
        """Replay a `recording`, or run live with `bundle` (the loaded models) and `settings`."""
        super().__init__()
        self.recording, self.settings = recording, settings
        self.recorder = Recorder(bundle) if bundle is not None else None
        self.source, self.autoplay, self.save_dir = source, autoplay, Path(save_dir)
        self.start_round = start_round  # 1-based round to open at (paused), once it exists
        self.done = recording is not None  # every round of the run is recorded
        self.error = ""  # the last problem, one sentence
        self.ticks = 0
        self.next_at = 0.0  # when the playing animation takes its next step
        self.last_temperature = 1.0  # what the greedy toggle returns to
        self.asked_gamma = settings.gamma if settings else 0  # γ before a method had to shrink it

    @property
    def live(self) -> bool:
        return self.recorder is not None

    @property
    def rounds(self) -> list:
        return self.recording.rounds if self.recording else []

    @property
    def in_flight(self) -> int:
        return self.recorder.in_flight if self.recorder else 0

    # ---------------------------------------------------------------- layout and drawing

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield TextPanel(id="text")
        with Horizontal(id="middle"):
            yield RoundTable(id="round")
            yield ProbCharts(id="charts")
        yield Static(id="caption")
        yield CachePanel(id="cache")  # SSD's speculation cache; hidden for other methods
        with Horizontal(id="bottom"):
            yield StatsPanel(id="stats")
            yield Timeline(id="timeline")
        yield KeyBar(id="keys")
        if self.recorder:
            yield self.recorder

    def on_mount(self) -> None:
        self._title_text()
        self.query_one("#stats").border_title = "statistics (committed rounds)"
        self.query_one("#timeline").border_title = "time per round"
        self.set_interval(TICK, self._tick)
        if self.live:
            self.start_run(self.settings)
        else:
            self._rounds_arrived()
            self.playing = self.autoplay and self.start_round is None
        self._redraw()

    def on_resize(self) -> None:
        self._title_text()
        self._draw_cache(self._frame())  # its title shortens to fit

    def _title_text(self) -> None:
        """The legend in the text panel's title: in full, or its symbols where it would not fit."""
        full = f"text   {LEGEND}"
        short = f"text   {' '.join(part.split()[0] for part in LEGEND.split('  '))} · ? help"
        self.query_one("#text").border_title = full if len(full) + 4 <= self.size.width else short

    def _frame(self):
        if self.pos is None:
            return None
        method = self.recording.start["method"]
        return reveal(self.rounds[self.pos.round], self.pos.step(self.rounds), method)

    def _redraw(self) -> None:
        """Hand every widget what it shows at the current position."""
        rounds, pos, frame = self.rounds, self.pos, self._frame()
        table = self.query_one(RoundTable)
        table.frame, table.waiting = frame, self._waiting()
        table.cursor = slot = self.cursor or (frame.focus if frame else 1)
        table.border_title = f"round {self._where(frame)}" if frame else "round"
        self.query_one("#caption", Static).update(frame.caption if frame else "")
        self.query_one(ProbCharts).chart = chart(frame, slot) if frame else None
        text = self.query_one(TextPanel)
        text.prompt = self.recording.start["prompt"] if self.recording else ""
        text.rounds, text.frame = rounds, frame
        committed = [e for r in rounds[: frame.committed] for e in r.events] if frame else []
        self.query_one(StatsPanel).summary = summarize(committed) if committed else None
        timeline = self.query_one(Timeline)
        shown = rounds[: pos.round + 1] if pos else []
        timeline.times = tuple((r.draft_ms, r.verify_ms) for r in shown)
        timeline.current = pos.round if pos else 0
        timeline.compile_ms = self.recording.compile_ms if self.recording else None
        self._draw_cache(frame)
        self._draw_status(frame)

    def _draw_cache(self, frame) -> None:
        """SSD's speculation cache, for an ssd run only (other methods never see the panel)."""
        start = self.recording.start if self.recording else {}
        panel = self.query_one(CachePanel)
        panel.display = start.get("method") == "ssd"
        if panel.display:
            backup = start.get("backup", "")
            state = cache_state(self.rounds, frame, self.done, backup) if frame else None
            panel.state = state
            panel.border_title = (
                cache_title(state, self.size.width) if state else "speculation cache"
            )

    def _where(self, frame, of: str = " of ") -> str:
        more = "" if self.done else "+"  # more rounds are on their way
        return f"{self.pos.round + 1}{of}{len(self.rounds)}{more} · {frame.step.phase.name.lower()}"

    def _draw_status(self, frame) -> None:
        where = f"round {self._where(frame, '/')}" if frame else "no rounds yet"
        start = self.recording.start if self.recording else {}
        self.query_one(StatusBar).status = Status(
            self.source,
            start,
            self.playing,
            self.speed,
            where,
            self._busy(),
            self.error,
            self.ticks,
        )

    def _busy(self) -> str:
        if not self.live or self.done or self.error:
            return ""
        if not self.rounds:
            seconds = time.monotonic() - self.recorder.started
            return f"{'compiling' if self.recorder.compiling else 'running'}… {seconds:.1f}s"
        return f"recording… {len(self.rounds)} rounds"

    def _waiting(self) -> str:
        """What the round panel says before there is a round to show."""
        compiling = self.live and self.recorder.compiling
        return waiting_text(self.error, compiling, self.settings.gamma if self.settings else 0)

    # ---------------------------------------------------------------- playing

    def watch_pos(self, old: Position | None, new: Position | None) -> None:
        if (old is None or new is None or old.round != new.round) and self.cursor is not None:
            self.cursor = None  # a new round: the charts follow the play again (and redraw)
        else:
            self._redraw()

    def watch_cursor(self) -> None:
        self._redraw()

    def watch_playing(self) -> None:
        self.next_at = time.monotonic() + STEP_SECONDS / self.speed
        self._draw_status(self._frame())

    def watch_speed(self) -> None:
        self._draw_status(self._frame())

    def _tick(self) -> None:
        self.ticks += 1
        if self._busy():
            self._draw_status(self._frame())  # turn the spinner, count the seconds
        if not self.playing or time.monotonic() < self.next_at:
            return
        nxt = forward(self.pos, self.rounds) if self.pos else (Position() if self.rounds else None)
        if nxt is not None:
            self.pos = nxt
            pause = 2 if nxt.step(self.rounds).phase in (Phase.EXTRA, Phase.COMMIT) else 1
            self.next_at = time.monotonic() + pause * STEP_SECONDS / self.speed
        elif self.done:
            self.playing = False  # the end of the run

    def _rounds_arrived(self) -> None:
        """New rounds are in: open at the asked-for round once it exists, else at the start."""
        n = self.start_round
        if n is not None and (len(self.rounds) >= n or self.done):
            self.start_round = None
            if n > len(self.rounds):
                self._fail(f"this run has {len(self.rounds)} rounds, so there is no round {n}.")
            else:
                self.pos = at_phase(self.rounds, n - 1, Phase.EXTRA)
                self.playing = False
        elif self.pos is None and self.rounds and n is None:
            self.pos = Position()

    # ---------------------------------------------------------------- live runs

    def start_run(self, settings: Settings) -> bool:
        """Begin a fresh live run; the old one is cancelled and its rounds dropped."""
        try:
            start = self.recorder.start(settings)
        except UserError as e:
            self._fail(str(e))
            return False
        self.settings, self.error, self.done = settings, "", False
        if settings.temperature > 0:
            self.last_temperature = settings.temperature
        self.recording = Recording(start, [])
        self.pos = None
        self.playing = self.autoplay
        self._redraw()
        return True

    def on_recorder_compiled(self, message: Recorder.Compiled) -> None:
        if self.recorder.is_current(message):
            self.recorder.compile_done()
            self.recording.compile = message.event
            self._redraw()

    def on_recorder_round_recorded(self, message: Recorder.RoundRecorded) -> None:
        if self.recorder.is_current(message):
            self.recording.rounds.append(
                round_from_events([e for e in message.events if e.get("row", 0) == 0])
            )
            self._rounds_arrived()
            self._redraw()

    def on_recorder_finished(self, message: Recorder.Finished) -> None:
        if self.recorder.is_current(message):
            self.done = True
            self._rounds_arrived()
            self._redraw()

    def on_recorder_failed(self, message: Recorder.Failed) -> None:
        if self.recorder.is_current(message):
            self._fail(message.error)

    def _fail(self, error: str) -> None:
        self.error = error
        self.say(error, severity="error")
        self._redraw()
