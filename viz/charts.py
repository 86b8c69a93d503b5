"""Why a token was accepted or rejected: bar charts of q, p and the residual at one position.

    q · the draft's law
      ▸' Paris'   ██████████▌  0.91      ▸ is the drafted token
       ' the'     █            0.05
    p · the target's law
      ▸' Paris'   ████         0.35
       ' London'  ███████      0.60
    residual · norm(max(0, p − q))
      ↻' London'  ██████████   0.97      ↻ the token drawn from it (★ for a bonus, drawn from p)

A token the draft over-proposes (q(x) > p(x)) is rejected with probability 1 − p/q; the
residual is the mass p has and q lacks, so the correction lands where the draft under-proposed.
The `Chart` (playhead.py) says which laws are known at this step; this widget only draws them,
with as many rows per law as its height allows (in a short panel the headings shrink to one
letter: q, p, r). All bars share one scale, the largest probability shown, so a long q bar next
to a short p bar is exactly the picture of a likely rejection; the numbers are absolute.
"""

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz.draw import DRAFT, TARGET, bar, num, token
from viz.playhead import Chart

SECTIONS = (
    ("q", "q · the draft's law", DRAFT),
    ("p", "p · the target's law", TARGET),
    ("residual", "residual · norm(max(0, p − q))", "yellow"),
)


def shown_rows(law: tuple, rows: int, first, then=None) -> list:
    """A law's top `rows` tokens, making room at the bottom for `first` (then `then`) if listed.

    >>> law = ((1, "a", .5), (2, "b", .3), (3, "c", .1), (4, "d", .05))
    >>> [t[0] for t in shown_rows(law, 2, first=4, then=3)], [t[0] for t in shown_rows(law, 3, 4, 3)]
    ([1, 4], [1, 3, 4])
    """
    keep = list(law[:rows])
    wanted = [tid for tid in (first, then) if tid is not None]
    for n, tid in enumerate(wanted):
        found = [t for t in law if t[0] == tid]
        if not found or any(t[0] == tid for t in keep):
            continue
        # the lowest row that is neither wanted nor the top one (what the law favours stays)
        spare = [i for i in range(len(keep) - 1, 0, -1) if keep[i][0] not in wanted]
        if spare:
            keep[spare[0]] = found[0]
        elif n == 0 and keep:  # a single row: it shows the token this slot is about
            keep[-1] = found[0]
    return sorted(keep, key=lambda t: -t[2])


def law_rows(
    keep: list,
    scale: float,
    width: int,
    color: str,
    marked,
    chosen,
    chosen_symbol: str,
    label: str = "",
) -> Table:
    """One law's rows as bars; every law in the panel shares `scale` so bars compare across laws."""
    tok_w, num_w = (12 if width >= 40 else 9 if width >= 30 else 7), 6
    bar_w = max(3, width - tok_w - num_w - len(label) - 6)
    table = Table.grid(padding=(0, 1, 0, 0))
    for w in (len(label), 1, tok_w, bar_w, num_w):
        table.add_column(width=w, no_wrap=True)
    table.columns[4].justify = "right"
    for n, (tid, text, prob) in enumerate(keep):
        sym = chosen_symbol if tid == chosen else ("▸" if tid == marked else " ")
        style = "bold" if tid in (marked, chosen) else ""
        table.add_row(
            Text(label if n == 0 else " " * len(label), style="bold " + color),
            Text(sym, style="bold"),
            Text(token(text, tok_w), style=style),
            Text(bar(prob / scale, bar_w), style=color),
            Text(num(prob), style=style),
        )
    return table


def charts(c: Chart, width: int, height: int) -> Group:
    laws = [(key, head, color, getattr(c, key)) for key, head, color in SECTIONS if getattr(c, key)]
    note_lines = 1 if len(c.note) <= width else 2
    parts: list = [Text(c.note, style="italic")]
    if not laws:
        return Group(*parts)
    free = height - note_lines
    headings = free >= 4 * len(laws)  # room for a heading and at least three rows per law
    rows = max(1, (free - (len(laws) if headings else 0)) // len(laws))
    chosen_symbol = "↻" if c.residual is not None else "★"

    # q and p must show the drafted token (why it was judged so); the residual, the one drawn.
    def priority(key):
        return (
            (c.chosen, c.marked) if key == "residual" or c.marked is None else (c.marked, c.chosen)
        )

    kept = [shown_rows(law, min(rows, 6), *priority(key)) for key, _, _, law in laws]
    scale = max(prob for keep in kept for *_, prob in keep) or 1.0
    for (key, head, color, _), keep in zip(laws, kept):
        if headings:
            parts.append(Text(head, style="bold " + color))
        label = "" if headings else ("r" if key == "residual" else key)
        parts.append(law_rows(keep, scale, width, color, c.marked, c.chosen, chosen_symbol, label))
    return Group(*parts)


class ProbCharts(Widget):
    """The charts for the slot under the cursor (the app sets `chart`)."""

    chart: reactive[Chart | None] = reactive(None)

    def watch_chart(self, c: Chart | None) -> None:
        self.border_title = c.title if c else "position"

    def render(self):
        if self.chart is None:
            return Text("")
        return charts(self.chart, self.size.width, self.size.height)
