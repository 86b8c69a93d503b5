"""Where each round's time went: draft time (▒) against verify time (█), one line per round.

     1 ▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒▒» 812 + 950 ms  includes JIT compilation
     2 ▒▒▒████                   3.1 + 4.0 ms
   ▸ 3 ▒▒▒█████                  3.0 + 4.9 ms

The γ draft steps are cheap one by one but sequential; the verify pass is one big step. Their
ratio is what makes speculation pay (DESIGN.md §6). The first round of a fresh compile is far
slower than the rest; it is drawn clipped (») so it does not flatten every other bar.
"""

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz import draw

DRAFT, VERIFY = "▒", "█"


def scale_of(times: list[tuple[float, float]]) -> tuple[float, bool]:
    """The total time a full-width bar stands for, and whether round 1 is a compile outlier."""
    totals = [d + v for d, v in times]
    if len(totals) > 1 and totals[0] > 3 * max(totals[1:]):
        return max(totals[1:]), True
    return max(totals, default=0.0), False


def timeline_view(times: list[tuple[float, float]], current: int, width: int, height: int) -> Text:
    out = Text.assemble((f"{DRAFT} draft", draw.DRAFT), "  ", (f"{VERIFY} verify", draw.TARGET),
                        ("   ms per round", "dim"))
    if not times:
        return out
    scale, outlier = scale_of(times)
    label_w = len(str(len(times))) + 2
    bar_w = max(4, width - label_w - 18)
    first = max(0, current + 1 - (height - 1))  # keep the current round in view
    for r in range(first, min(len(times), first + height - 1)):
        d, v = times[r]
        total = d + v
        n = min(bar_w, round(bar_w * total / scale)) if scale else 0
        n_draft = round(n * d / total) if total else 0
        clipped = outlier and r == 0
        here = "▸" if r == current else " "
        out.append(f"\n{here}{r + 1:>{label_w - 1}} ", style="bold" if r == current else "")
        out.append(DRAFT * n_draft, style=draw.DRAFT)
        out.append(VERIFY * (n - n_draft), style=draw.TARGET)
        out.append("»" if clipped else " ")
        out.append(" " * (bar_w - n))
        out.append(f"{d:.1f} + {v:.1f}", style="dim")
        if clipped and width - label_w - bar_w > 34:
            out.append("  includes JIT compile", style="dim italic")
    return out


class Timeline(Widget):
    """`times` ((draft_ms, verify_ms) per recorded round) and `current` are set by the app."""

    times: reactive[tuple] = reactive(())
    current: reactive[int] = reactive(0)

    def render(self):
        return timeline_view(list(self.times), self.current, self.size.width, self.size.height)
