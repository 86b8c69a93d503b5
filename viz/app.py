"""The demo app: speculative decoding, one round at a time, at a pace a person can follow.

Data flows one way. Rounds arrive as trace events — from a recorded file (replay) or from the
`Recorder`'s worker thread running the loop (live) — and are kept in a `Recording`. A `Position`
(playhead.py) says which step of which round is on screen; `_redraw` turns it into a `Frame` and
hands each widget the attributes it draws (attributes flow down; the recorder's messages flow
up). JAX never runs on the UI thread, so while the first run compiles the screen keeps moving
and says "compiling…". Replay mode never imports JAX at all.

What this file deliberately leaves out: drawing (the widget files), the rules of the animation
(playhead.py) and running the model (recorder.py, live.py); it wires keys and timers to them.
"""

import time
from dataclasses import replace
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Static

from nanospec.errors import UserError
from nanospec.trace import summarize
from viz.charts import ProbCharts
from viz.draw import LEGEND
from viz.help_screen import HelpScreen
from viz.key_bar import KeyBar
from viz.playhead import (Phase, Position, at_phase, back, chart, forward, next_round, prev_round,
                          reveal)
from viz.recorder import Recorder
from viz.round_table import RoundTable, waiting_text
from viz.rounds import Recording, round_from_events, save_recording
from viz.settings import Settings
from viz.settings_screen import SettingsScreen
from viz.stats_panel import StatsPanel
from viz.status_bar import Status, StatusBar
from viz.text_panel import TextPanel
from viz.timeline import Timeline

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
STEP_SECONDS = 0.7  # how long a step stays on screen at ×1 (the extra token and the commit: twice)
TICK = 0.1  # the timer that plays steps and turns the spinner
LIVE_ONLY = ("edit", "gamma", "greedy", "method")  # actions that start a new live run


class DemoApp(App):
    CSS_PATH = "demo.tcss"
    TITLE = "nanospec demo"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    BINDINGS = [  # the key bar lists the shown ones, in this order
        Binding("space", "toggle_play", "play/pause"),
        Binding("right", "step(1)", "step", key_display="→"),
        Binding("left", "step(-1)", "back", key_display="←"),
        Binding("right_square_bracket", "round(1)", "round", key_display="[ ]"),
        Binding("left_square_bracket", "round(-1)", "previous round", show=False),
        Binding("down", "cursor(1)", "position", key_display="↑↓"),
        Binding("up", "cursor(-1)", "position up", show=False),
        Binding("plus,equals_sign", "speed(1)", "speed", key_display="+ -"),
        Binding("minus", "speed(-1)", "slower", show=False),
        Binding("r", "restart", "restart"),
        Binding("e", "edit", "edit"),
        Binding("1", "gamma(1)", "γ", key_display="1-9"),
        *[Binding(str(n), f"gamma({n})", f"γ={n}", show=False) for n in range(2, 10)],
        Binding("g", "greedy", "greedy"),
        Binding("m", "method", "method"),
        Binding("w", "save", "save"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    pos: reactive[Position | None] = reactive(None)  # the step on screen; None before any round
    playing: reactive[bool] = reactive(False)
    speed: reactive[float] = reactive(1.0)
    cursor: reactive[int | None] = reactive(None)  # the slot the charts explain; None: follow

    def __init__(self, recording: Recording | None = None, *, bundle=None,
                 settings: Settings | None = None, source: str = "live", autoplay: bool = True,
                 start_round: int | None = None, save_dir: str | Path = "traces"):
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
        self.toasts: dict[str, float] = {}  # message -> when it was last shown (no stacking)

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
        committed = [e for r in rounds[:frame.committed] for e in r.events] if frame else []
        self.query_one(StatsPanel).summary = summarize(committed) if committed else None
        timeline = self.query_one(Timeline)
        shown = rounds[:pos.round + 1] if pos else []
        timeline.times = tuple((r.draft_ms, r.verify_ms) for r in shown)
        timeline.current = pos.round if pos else 0
        timeline.compile_ms = self.recording.compile_ms if self.recording else None
        self._draw_status(frame)

    def _where(self, frame, of: str = " of ") -> str:
        more = "" if self.done else "+"  # more rounds are on their way
        return f"{self.pos.round + 1}{of}{len(self.rounds)}{more} · {frame.step.phase.name.lower()}"

    def _draw_status(self, frame) -> None:
        where = f"round {self._where(frame, '/')}" if frame else "no rounds yet"
        start = self.recording.start if self.recording else {}
        self.query_one(StatusBar).status = Status(self.source, start, self.playing, self.speed,
                                                  where, self._busy(), self.error, self.ticks)

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
            self.recording.rounds.append(round_from_events(
                [e for e in message.events if e.get("row", 0) == 0]))
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

    def say(self, message: str, severity: str = "information") -> None:
        """A toast, unless the same one is still on screen (a repeated key does not stack them)."""
        now = time.monotonic()
        if now - self.toasts.get(message, -1e9) < self.NOTIFICATION_TIMEOUT:
            return
        self.toasts[message] = now
        self.notify(message, title="nanospec", severity=severity)

    # ---------------------------------------------------------------- key actions

    def check_action(self, action: str, parameters) -> bool | None:
        """While a dialog is open it has the keys: the demo's own keys (but quit) are off, and
        Textual's own actions (Tab and Shift+Tab move the focus) work as anywhere else."""
        if isinstance(self.screen, (SettingsScreen, HelpScreen)):
            ours = {b.action.split("(")[0] for b in self.BINDINGS}
            return None if action in ours and action != "quit" else True
        return True

    def key_enabled(self, action: str) -> bool:
        """False for keys that change settings when there is no model (a replay): drawn grey."""
        return self.live or action.split("(")[0] not in LIVE_ONLY

    def action_toggle_play(self) -> None:
        if not self.playing and self.pos and self.done and forward(self.pos, self.rounds) is None:
            self.pos = Position()  # at the end, play starts over
        self.playing = not self.playing

    def _move(self, nxt: Position | None) -> None:
        self.playing = False
        if nxt is None:
            self.bell()
        else:
            self.pos = nxt

    def action_step(self, delta: int) -> None:
        if self.pos is None:
            self._move(Position() if self.rounds else None)
        else:
            self._move((forward if delta > 0 else back)(self.pos, self.rounds))

    def action_round(self, delta: int) -> None:
        if self.pos is not None:
            self._move((next_round if delta > 0 else prev_round)(self.pos, self.rounds))

    def action_cursor(self, delta: int) -> None:
        frame = self._frame()
        if frame is not None:
            self.cursor = ((self.cursor or frame.focus) - 1 + delta) % len(frame.slots) + 1

    def action_speed(self, delta: int) -> None:
        i = max(0, min(len(SPEEDS) - 1, SPEEDS.index(self.speed) + delta))
        self.speed = SPEEDS[i]

    def action_restart(self) -> None:
        self.pos = Position() if self.rounds else None
        self.cursor = None
        self.playing = True

    def _live_only(self) -> bool:
        if not self.live:
            self.say("This is a replay: the trace fixes its settings. Run `nanospec demo` "
                     "live to change them.", severity="warning")
        return self.live

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_edit(self) -> None:
        if self._live_only():
            dialog = SettingsScreen(self.settings, self.recorder.methods, self.recorder.check)
            self.push_screen(dialog, lambda s: s is not None and self._asked(s))

    def _asked(self, settings: Settings) -> bool:
        """A run with settings the viewer typed: its γ is the one to come back to."""
        if self.start_run(settings):
            self.asked_gamma = settings.gamma
            return True
        return False

    def _change(self, **fields) -> None:
        if self._live_only():
            self.start_run(replace(self.settings, **fields))

    def action_gamma(self, gamma: int) -> None:
        if self._live_only():
            self._asked(replace(self.settings, gamma=gamma))

    def action_greedy(self) -> None:
        if self._live_only():
            t = self.settings.temperature
            self._change(temperature=0.0 if t > 0 else self.last_temperature)

    def action_method(self) -> None:
        if self._live_only():
            methods = self.recorder.methods
            if len(methods) == 1:
                self.say(f"{methods[0]!r} is the only drafting method so far.")
            else:  # heads draft at most one token per head: γ shrinks to fit, and grows back
                method = methods[(methods.index(self.settings.method) + 1) % len(methods)]
                self._change(method=method, gamma=self.recorder.fit_gamma(method, self.asked_gamma))

    def action_save(self) -> None:
        if not self.done:
            self.say("The run is still recording; save it when it has finished.",
                     severity="warning")
            return
        path = save_recording(self.recording, self.save_dir)
        self.say(f"Saved the trace to {path} (replay it with nanospec demo --replay {path}).")
