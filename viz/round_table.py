"""The round in progress: one row per draft, then the target's extra token.

    ▸ #  token        q(x)   p(x)    u    p/q   verdict
      1  ' Paris'     0.91   0.95  0.12  1.04   ✓ accepted
      2  ' and'       0.40   0.05  0.61  0.13   ✗ rejected     (struck through)
      3  ' the'       0.30   0.20     —     —   · discarded    (greyed, struck through)
      2  ' is'        0.02   0.41               ↻ residual 0.83

The last row is the target's own token. A resampled one (↻) sits at the rejected position:
its q(x) and p(x) there, and the probability it had under the residual norm(max(0, p − q)) it
was drawn from — the one law that picked it, and usually far from p(x). A bonus (★) is drawn
from p itself, so p(x) is its probability. Rows appear as the `Frame` (playhead.py) reveals
them; ▸ marks the row the charts describe. Under 64 columns the verdict column keeps only its
symbol (and r for the residual) and long tokens are cut.
"""

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz.draw import mark, num, token
from viz.playhead import Frame

WORDS = {
    "accept": "accepted",
    "reject": "rejected",
    "discard": "discarded",
    "resample": "resampled",
    "bonus": "bonus",
    "drafted": "pending",
}


def round_table(frame: Frame, cursor: int, width: int) -> Table:
    # narrow: the verdict keeps its symbol; tiny: u and p/q give way (the caption has them)
    narrow, tiny = width < 64, width < 40
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, expand=False, header_style="bold")
    if not tiny:
        table.add_column("", width=1, no_wrap=True)  # the cursor ▸
    table.add_column("#", justify="right", no_wrap=True)  # tiny: the cursor joins the number
    table.add_column(
        "token", max_width=8 if tiny else 12 if narrow else 20, no_wrap=True, overflow="ellipsis"
    )
    numbers = ("q(x)", "p(x)") if tiny else ("q(x)", "p(x)", "u", "p/q")
    for name in numbers:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("" if narrow else "verdict", no_wrap=True)
    g = frame.round.gamma
    for s in frame.slots:
        here = "▸" if s.index == cursor else ""
        if s.mark == "hidden":
            label = "…" if s.index <= g else ""
            index = str(s.index) if s.index <= g else "+"
            table.add_row(*((here + index,) if tiny else (here, index)), Text(label, style="dim"))
            continue
        symbol, style = mark(s.mark)
        word = WORDS.get(s.mark, "")
        verdict = Text(symbol if narrow else f"{symbol} {word}", style=style.replace(" strike", ""))
        tok = Text(token(s.text), style=style if s.mark != "drafted" else "italic")
        dim = "dim" if s.mark == "discard" or s.index > g else ""
        fmt = short if tiny else num
        cells = [
            Text(fmt(s.q) if s.q is not None or s.index <= g else "", style=dim),
            Text(fmt(s.p), style=dim),
            Text(num(s.u) if s.u is not None else "", style=dim),
            Text(num(s.ratio) if s.ratio is not None else "", style=dim),
        ][: len(numbers)]
        index = str(s.index)
        if s.index > g:  # the target's own token: at the rejected slot, or a bonus after the drafts
            index = str(frame.round.accepted + 1 if s.mark == "resample" else s.index)
            if s.mark == "resample":
                verdict = Text(
                    f"{symbol} {'r' if narrow else 'residual'} {fmt(s.residual)}", style=style
                )
        table.add_row(*((here + index,) if tiny else (here, index)), tok, *cells, verdict)
    return table


def short(x: float | None) -> str:
    """`num` in at most four cells, for a tiny panel: anything below 0.01 is "<.01"."""
    return "<.01" if x is not None and 0 < x < 0.01 else num(x)


def waiting_text(error: str, compiling: bool, gamma: int) -> str:
    """What the panel says before there is a round to show."""
    if error:
        return f"✗ {error}\n\nPress e to edit the settings."
    if compiling:
        return (
            f"compiling… JAX traces and compiles the draft and verify steps for γ={gamma}.\n"
            f"This happens once per γ and prompt length; later runs start at once."
        )
    return "running the model…"


class RoundTable(Widget):
    """The round table (attributes set by the app); before the first round, what we wait for."""

    frame: reactive[Frame | None] = reactive(None)
    cursor: reactive[int] = reactive(1)
    waiting: reactive[str] = reactive("")  # shown while there is no round yet (compiling…)

    def render(self):
        if self.frame is None:
            return Text(self.waiting, style="italic")
        return round_table(self.frame, self.cursor, self.size.width)
