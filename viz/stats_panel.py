"""Running statistics of the rounds committed so far, all from nanospec.trace.summarize().

    acceptance rate           62%  13 of 21 drafts
    mean acceptance length   2.40  tokens per round
    tokens per target call   2.40  autoregressive: 1.00
    target calls               10  autoregressive: 24
    target calls saved         14
    per-position acceptance     rounds by drafts accepted
    x₁ █████████▏  92%           0 ██▌         2
    ...                         ...

Mean acceptance length counts the target's own token (accepted + 1 per round); autoregressive
decoding makes one target call per token, so the calls saved are tokens − rounds.

In a short panel (an 80×24 terminal) the same numbers fold into three lines with sparklines.
"""

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from viz.draw import bar
from viz.playhead import SUB

SPARK = "▁▂▃▄▅▆▇█"


def spark(values: list[float], top: float) -> str:
    """One character per value, height ∝ value / top ('▁' for 0)."""
    return "".join(SPARK[min(7, int(7 * v / top + 0.5))] if top else SPARK[0] for v in values)


def headline(s: dict) -> list[tuple[str, str, str]]:
    return [("acceptance rate", f"{s['acceptance_rate']:.0%}",
             f"{s['accepted']} of {s['drafted']} drafts"),
            ("mean acceptance length", f"{s['mean_acceptance_length']:.2f}", "tokens per round"),
            ("tokens per target call", f"{s['tokens_per_target_call']:.2f}",
             "autoregressive: 1.00"),
            # autoregressive decoding makes one target call per generated token
            ("target calls", f"{s['rounds']}", f"autoregressive: {s['generated_tokens']}"),
            ("target calls saved", f"{s['target_calls_saved']}", "")]


def compact(s: dict) -> Group:
    """Three lines for a short panel (an 80×24 terminal)."""
    per_pos, hist = s["per_position_acceptance"], s["acceptance_histogram"]
    return Group(
        Text.assemble(("acceptance ", "bold"), f"{s['acceptance_rate']:.0%} ",
                      (f"({s['accepted']}/{s['drafted']})", "dim"),
                      ("  mean length ", "bold"), f"{s['mean_acceptance_length']:.2f}",
                      ("  tokens/target call ", "bold"), f"{s['tokens_per_target_call']:.2f}"),
        Text.assemble(("target calls ", "bold"), f"{s['rounds']}",
                      (f" vs {s['generated_tokens']} autoregressive: ", "dim"),
                      (f"{s['target_calls_saved']} saved", "bold")),
        Text.assemble(("per position ", "bold"), (spark(per_pos, 1.0), "green"), " ",
                      " ".join(f"{100 * v:.0f}" for v in per_pos), "%",
                      ("  histogram ", "bold"), (spark(hist, max(hist)), "cyan"),
                      " ", (" ".join(str(h) for h in hist), "dim")))


def stats_view(s: dict | None, width: int, height: int):
    if not s or not s["rounds"]:
        return Text("Statistics appear as rounds are committed.", style="italic")
    per_pos, hist = s["per_position_acceptance"], s["acceptance_histogram"]
    rows = headline(s)
    if height < len(rows) + 1 + len(hist) or width < 50:
        return compact(s)
    top = Table.grid(padding=(0, 2))
    top.add_column(style="bold", no_wrap=True)
    top.add_column(justify="right", no_wrap=True)
    top.add_column(style="dim", no_wrap=True)
    for row in rows:
        top.add_row(*row)
    bar_w = max(4, (width - 22) // 2)
    pos = Table.grid(padding=(0, 1))
    for i, v in enumerate(per_pos, 1):
        pos.add_row(f"x{str(i).translate(SUB)}", Text(bar(v, bar_w), style="green"), f"{v:4.0%}")
    most = max(hist) or 1
    hst = Table.grid(padding=(0, 1))
    for k, h in enumerate(hist):
        hst.add_row(f"{k:>2}", Text(bar(h / most, bar_w), style="cyan"), f"{h:>3}")
    both = Table.grid(padding=(0, 3))
    both.add_row(Text("per-position acceptance", style="bold"),
                 Text("rounds by drafts accepted", style="bold"))
    both.add_row(pos, hst)
    return Group(top, both)


class StatsPanel(Widget):
    """`summary` is set by the app: summarize() over the committed rounds' events."""

    summary: reactive[dict | None] = reactive(None)

    def render(self):
        return stats_view(self.summary, self.size.width, self.size.height)
