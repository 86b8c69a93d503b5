"""Where each round's time went: draft time (▒) against verify time (█), one line per round.

    ▒ draft  █ verify   ms per round · compiled apart: 6.5 s
    ▸1 ▒▒▒████                   3.1 + 4.0
     2 ▒▒▒█████                  3.0 + 4.9

The γ draft steps are cheap one by one but sequential; the verify pass is one big step. Their
ratio is what makes speculation pay (docs/design.md §6). Compilation happens before round 1, on
its own (nanospec/aot.py), so every bar is a round's real time; the header says how long the
compile took. All bars share one scale, the slowest round's total.

These are the times of the traced loop, whose verify pass also gathers what the screen shows
(the top tokens of p and q at every position), so a verify bar is longer than an untraced
verify pass, and the bars favour drafting less than `nanospec bench` does; `--race` times the
untraced loop for that reason. Round 1 also pays a compiled program's first-run costs.
"""

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz import draw

DRAFT, VERIFY = "▒", "█"


def timeline_view(
    times: list[tuple[float, float]],
    current: int,
    width: int,
    height: int,
    compile_ms: float | None = None,
) -> Text:
    out = Text.assemble(
        (f"{DRAFT} draft", draw.DRAFT),
        "  ",
        (f"{VERIFY} verify", draw.TARGET),
        ("   ms per round", "dim"),
    )
    if compile_ms is not None:
        out.append(f" · compiled apart: {compile_ms / 1e3:.1f} s", style="dim")
    if not times:
        return out
    scale = max(d + v for d, v in times)
    label_w = len(str(len(times))) + 2
    bar_w = max(4, width - label_w - 16)
    first = max(0, current + 1 - (height - 1))  # keep the current round in view
    for r in range(first, min(len(times), first + height - 1)):
        d, v = times[r]
        total = d + v
        n = min(bar_w, round(bar_w * total / scale)) if scale else 0
        n_draft = round(n * d / total) if total else 0
        here = "▸" if r == current else " "
        out.append(f"\n{here}{r + 1:>{label_w - 1}} ", style="bold" if r == current else "")
        out.append(DRAFT * n_draft, style=draw.DRAFT)
        out.append(VERIFY * (n - n_draft), style=draw.TARGET)
        out.append(" " * (bar_w - n + 1))
        out.append(f"{d:.1f} + {v:.1f}", style="dim")
    return out


class Timeline(Widget):
    """`times` ((draft_ms, verify_ms) per recorded round), `current` and `compile_ms` are set by
    the app."""

    times: reactive[tuple] = reactive(())
    current: reactive[int] = reactive(0)
    compile_ms: reactive[float | None] = reactive(None)

    def render(self):
        return timeline_view(
            list(self.times), self.current, self.size.width, self.size.height, self.compile_ms
        )
