"""The edit dialog: prompt, drafting method, γ, temperature, top-k, top-p, seed, length.

A modal screen over the demo. Enter (or the Run button) checks the values — the same checks as
the command line, one sentence in red if something is wrong — and dismisses with the new
`Settings`; Escape dismisses with None. The app then starts a fresh live run.
"""

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from nanospec.errors import UserError
from viz.settings import Settings

FIELDS = (
    ("gamma", "γ (drafts per round)"),
    ("temperature", "temperature (0 = greedy)"),
    ("top_k", "top-k (0 = off)"),
    ("top_p", "top-p (1 = off)"),
    ("seed", "seed"),
    ("max_new", "max new tokens"),
)


class SettingsScreen(ModalScreen[Settings | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, settings: Settings, methods: tuple[str, ...], check):
        """`check(settings)` raises UserError if the app cannot run with these settings."""
        super().__init__()
        self.settings, self.methods, self.check = settings, methods, check

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "edit the run (Enter runs it, Esc cancels)"
            yield Label("Prompt")
            yield Input(s.prompt, id="prompt", compact=True)
            with Grid(id="fields"):
                yield Label("drafting method")
                yield Select(
                    [(m, m) for m in self.methods],
                    value=s.method,
                    allow_blank=False,
                    id="method",
                    compact=True,
                )
                for name, label in FIELDS:
                    yield Label(label)
                    yield Input(str(getattr(s, name)), id=name, compact=True)
            yield Label("", id="problem")
            with Horizontal(id="buttons"):
                yield Button("Run ⏎", variant="primary", id="run", compact=True)
                yield Button("Cancel esc", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#prompt").focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.submit()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def submit(self) -> None:
        fields = {
            name: self.query_one(f"#{name}", Input).value for name in ("prompt", *dict(FIELDS))
        }
        fields["method"] = str(self.query_one("#method", Select).value)
        try:
            settings = self.settings.with_text(**fields)
            self.check(settings)
        except UserError as e:
            self.query_one("#problem", Label).update(f"✗ {e}")
            return
        self.dismiss(settings)
