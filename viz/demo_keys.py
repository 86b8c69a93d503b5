"""The demo's keys: `KEYS`, the bindings, and `KeyActions`, what each key does.

`KEYS` are the bindings (the key bar lists the shown ones, in this order). `KeyActions` holds
what each key does: the player's moves (play, step, round, cursor, speed, restart) and, in a
live run, the settings keys that start a new run (edit, γ, greedy, method), plus help and save.

`KeyActions` is mixed into `DemoApp` (app.py): its methods read and set the app's reactives
(`pos`, `playing`, `speed`, `cursor`) and call its `start_run`, `_frame` and `say`.
"""

from dataclasses import replace

from textual.binding import Binding

from viz.help_screen import HelpScreen
from viz.playhead import Position, back, forward, next_round, prev_round
from viz.rounds import save_recording
from viz.settings import Settings
from viz.settings_screen import SettingsScreen
from viz.speeds import DEMO_SPEEDS, SPEED_KEYS, step_speed

LIVE_ONLY = ("edit", "gamma", "greedy", "method")  # actions that start a new live run

KEYS = [
    Binding("space", "toggle_play", "play/pause"),
    Binding("right", "step(1)", "step", key_display="→"),
    Binding("left", "step(-1)", "back", key_display="←"),
    Binding("right_square_bracket", "round(1)", "round", key_display="[ ]"),
    Binding("left_square_bracket", "round(-1)", "previous round", show=False),
    Binding("down", "cursor(1)", "position", key_display="↑↓"),
    Binding("up", "cursor(-1)", "position up", show=False),
    *SPEED_KEYS,
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


class KeyActions:
    """The `action_*` methods behind KEYS, and which of them are on (mixed into DemoApp)."""

    # ---------------------------------------------------------------- which keys are on

    def check_action(self, action: str, parameters) -> bool | None:
        """While a dialog is open it has the keys: the demo's own keys (but quit) are off, and
        Textual's own actions (Tab and Shift+Tab move the focus) work as anywhere else."""
        if isinstance(self.screen, (SettingsScreen, HelpScreen)):
            ours = {b.action.split("(")[0] for b in KEYS}
            return None if action in ours and action != "quit" else True
        return True

    def key_enabled(self, action: str) -> bool:
        """False for keys that change settings when there is no model (a replay): drawn grey."""
        return self.live or action.split("(")[0] not in LIVE_ONLY

    # ---------------------------------------------------------------- the player

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
        self.speed = step_speed(self.speed, delta, DEMO_SPEEDS)

    def action_restart(self) -> None:
        self.pos = Position() if self.rounds else None
        self.cursor = None
        self.playing = True

    # ---------------------------------------------------------------- settings, help, save

    def _live_only(self) -> bool:
        if not self.live:
            self.say(
                "This is a replay: the trace fixes its settings. Run `nanospec demo` "
                "live to change them.",
                severity="warning",
            )
        return self.live

    def action_help(self) -> None:
        ssd = self.recording is not None and self.recording.start.get("method") == "ssd"
        self.push_screen(HelpScreen(ssd))

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
            self.say(
                "The run is still recording; save it when it has finished.", severity="warning"
            )
            return
        path = save_recording(self.recording, self.save_dir)
        self.say(f"Saved the trace to {path} (replay it with nanospec demo --replay {path}).")
