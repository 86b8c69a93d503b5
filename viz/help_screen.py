"""The help screen (`?`): what every symbol and number on the demo's screen means.

It also says why the output stays exact.

A modal screen over the demo; `?`, Escape or q closes it. The text is plain data (`HELP`), so
it reads the same here as in the test that checks every symbol the screen draws is explained.
An ssd run's help also explains the speculation cache's ◆ and ◇ (`CACHE`).

What this file deliberately leaves out: the keys (the key bar at the bottom lists them).
"""

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from viz.draw import CACHE_MARKS, STYLES, mark

SYMBOLS = (
    ("drafted", "pending: drafted, awaiting the verify pass's verdict"),
    ("accept", "accepted: u < p(x)/q(x), so the draft is kept"),
    ("reject", "rejected: u ≥ p(x)/q(x); the drafts after it are dropped"),
    ("discard", "discarded: after a rejection, never judged"),
    ("resample", "resampled: the target's replacement, drawn from the residual"),
    ("bonus", "bonus: every draft kept, so one more token comes free, drawn from p"),
)

CACHE = (  # shown for ssd runs only
    (
        "hit",
        "hit: the round's drafts were ready in SSD's speculation cache; a lit ◆ branch "
        "is the guess that came true, which the next round drafts from",
    ),
    ("miss", "miss: the last round's outcome (k, t*) was not cached, so the backup drafted"),
)

NUMBERS = (
    ("q(x)", "the draft's probability of its token: the law it sampled from"),
    ("p(x)", "the target's probability of the same token; all γ from ONE pass"),
    ("u", "a uniform draw in [0, 1): keep the draft iff u < p(x)/q(x)"),
    (
        "residual",
        "norm(max(0, p − q)): the mass p has and q lacks; a ↻ token's own "
        "probability is this one, not p(x)",
    ),
)

WHY = (
    "Why the output is exactly the target's: a draft x is kept with probability "
    "min(1, p(x)/q(x)), so it comes out this way with probability min(q(x), p(x)). "
    "A rejection's replacement is drawn from the residual, which holds exactly the missing "
    "mass p(x) − min(q(x), p(x)) of every token. The two add up to p(x), as if the target "
    "decoded alone: see accept_reject and residual in nanospec/verify.py."
)


def help_view(ssd: bool = False) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for kind, words in SYMBOLS:
        symbol, style = mark(kind)
        grid.add_row(
            Text(f"  {symbol}", style=STYLES.get(kind, style).replace(" strike", "")), words
        )
    for kind, words in CACHE if ssd else ():
        symbol, style = CACHE_MARKS[kind]
        grid.add_row(Text(f"  {symbol}", style=style), words)
    for name, words in NUMBERS:
        grid.add_row(Text(f"  {name}", style="bold"), words)
    return grid


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "close", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    #help { width: 84; max-width: 100%; height: auto; max-height: 100%;
            border: thick $accent; border-title-align: left; background: $surface;
            padding: 0 1; }
    #why { margin-top: 1; }
    """

    def __init__(self, ssd: bool = False):
        super().__init__()
        self.ssd = ssd  # an ssd run: explain the speculation cache's marks too

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help") as box:
            box.border_title = "help (? or Esc closes)"
            yield Static(help_view(self.ssd))
            yield Static(Text(WHY, style="italic"), id="why")

    def action_close(self) -> None:
        self.dismiss(None)
