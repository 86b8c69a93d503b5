"""The top line: the run's settings, the player's state, and a live "compiling…" spinner.

     live  ▶ playing ×1 │ round 3/10 · judge │ ⠹ compiling… 4.2s │ draft · γ=4 · T=1 · top-k off ...

The most urgent parts come first, so a narrow terminal cuts the settings, not the state. The
spinner advances on the app's timer, so the screen visibly moves while JAX compiles in its
worker thread (the first run of a γ can take several seconds), and errors show here in one line.
"""

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz.draw import REJECT

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass(frozen=True)
class Status:
    source: str  # "live" or the replayed file's name
    settings: dict  # the run_start event: method, gamma, temperature, top_k, top_p, seed
    playing: bool
    speed: float
    where: str  # "round 3/10 · judge"
    busy: str = ""  # "compiling… 4.2s" while the model works, else ""
    error: str = ""  # the last problem, in one sentence
    tick: int = 0  # spinner frame


def settings_text(s: dict) -> str:
    t = s.get("temperature", 1.0)
    parts = [
        s.get("method", "?"),
        f"γ={s.get('gamma', '?')}",
        "greedy" if t == 0 else f"T={t:g}",
        f"top-k {s['top_k']}" if s.get("top_k") else "top-k off",
        f"top-p {s['top_p']:g}" if s.get("top_p", 1.0) < 1 else "top-p off",
        f"seed {s.get('seed', 0)}",
    ]
    return " · ".join(parts)


class StatusBar(Widget):
    status: reactive[Status | None] = reactive(None)

    def render(self):
        s = self.status
        if s is None:
            return Text("")
        # Most urgent first: a narrow terminal cuts the line's end, so the settings go last.
        out = Text.assemble(
            (f" {s.source} ", "reverse bold"),
            " ",
            ("▶ playing" if s.playing else "❚❚ paused", "bold"),
            f" ×{s.speed:g} │ ",
            (s.where, "bold"),
            " │ ",
        )
        if s.busy:
            out.append(f"{SPINNER[s.tick % len(SPINNER)]} {s.busy}", style="bold yellow")
            out.append(" │ ")
        if s.error:
            out.append(f"✗ {s.error}", style=f"bold {REJECT}")
            out.append(" │ ")
        out.append(settings_text(s.settings), style="dim")
        out.no_wrap = True
        out.overflow = "ellipsis"
        return out
