"""Running statistics of the rounds committed so far, all from nanospec.trace.summarize().

    acceptance rate           62%  13 of 21 drafts
    mean acceptance length   2.40  accepted + 1 per round
    tokens per target call   2.40  autoregressive: 1.00
    target calls               10  autoregressive: 24
    target calls saved         14
    per-position acceptance     rounds by drafts accepted
    x₁ █████████▏  92%           0 ██▌         2
    ...                         ...

Mean acceptance length counts the target's own token (accepted + 1 per round); tokens per target
call counts the tokens kept, so it is lower only when EOS or the length limit cut a round short
(the panel says so). Autoregressive decoding makes one target call per token, so the calls saved
are tokens − rounds. Before any draft (autoregressive runs, or no room left) the rate is "—".

When γ is long the two charts become sparklines; in a short panel (an 80×24 terminal) all the
numbers flow into a few lines, wrapped between items, never inside one.
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


def rate(s: dict) -> tuple[str, str]:
    """The acceptance rate and what it counts ("—" before any draft: there is nothing to rate)."""
    if not s["drafted"]:
        return "—", "no drafts yet"
    return f"{s['acceptance_rate']:.0%}", f"{s['accepted']} of {s['drafted']} drafts"


def cut_short(s: dict) -> bool:
    """Tokens per target call falls below the mean acceptance length only when EOS or the
    length limit kept fewer than accepted + 1 tokens of some round."""
    return s["tokens_per_target_call"] < s["mean_acceptance_length"] - 1e-9


def headline(s: dict) -> list[tuple[str, str, str]]:
    value, counted = rate(s)
    return [
        ("acceptance rate", value, counted),
        ("mean acceptance length", f"{s['mean_acceptance_length']:.2f}", "accepted + 1 per round"),
        (
            "tokens per target call",
            f"{s['tokens_per_target_call']:.2f}",
            "a round was cut short" if cut_short(s) else "autoregressive: 1.00",
        ),
        # autoregressive decoding makes one target call per generated token
        ("target calls", f"{s['rounds']}", f"autoregressive: {s['generated_tokens']}"),
        ("target calls saved", f"{s['target_calls_saved']}", ""),
    ]


def flow(items: list[Text], width: int, sep: str = "  ") -> Text:
    """Items joined by `sep` (two spaces), a new line only *between* items: never mid-label."""
    out, line = Text(no_wrap=True, overflow="ellipsis"), 0
    for item in items:
        if line and line + len(sep) + len(item) > width:
            out.append("\n")
            line = 0
        elif line:
            out.append(sep)
            line += len(sep)
        out.append_text(item)
        line += len(item)
    return out


def sparklines(s: dict) -> list[Text]:
    per_pos, hist = s["per_position_acceptance"], s["acceptance_histogram"]
    return [
        Text.assemble(
            ("per position ", "bold"),
            (spark(per_pos, 1.0), "green"),
            " ",
            " ".join(f"{100 * v:.0f}" for v in per_pos),
            "%",
        ),
        Text.assemble(
            ("histogram ", "bold"),
            (spark(hist, max(hist)), "cyan"),
            " ",
            (" ".join(str(h) for h in hist), "dim"),
        ),
    ]


def compact(s: dict, width: int) -> Text:
    """A few lines for a short panel (an 80×24 terminal), wrapped between items."""
    value, counted = rate(s)
    items = [
        Text.assemble(("acceptance ", "bold"), f"{value} ", (f"({counted})", "dim")),
        Text.assemble(("mean length ", "bold"), f"{s['mean_acceptance_length']:.2f}"),
        Text.assemble(("tokens/target call ", "bold"), f"{s['tokens_per_target_call']:.2f}"),
        Text.assemble(
            ("target calls ", "bold"),
            f"{s['rounds']}",
            (f" vs {s['generated_tokens']} autoregressive: ", "dim"),
            (f"{s['target_calls_saved']} saved", "bold"),
        ),
    ]
    return flow(items + sparklines(s), width)


def headline_table(s: dict) -> Table:
    top = Table.grid(padding=(0, 2))
    top.add_column(style="bold", no_wrap=True)
    top.add_column(justify="right", no_wrap=True)
    top.add_column(style="dim", no_wrap=True, overflow="ellipsis")
    for row in headline(s):
        top.add_row(*row)
    return top


def stats_view(s: dict | None, width: int, height: int):
    """The fullest of three layouts that fits: the headline and both charts; the headline and
    two sparklines (a long γ); or everything flowed into a few lines (a short panel)."""
    if not s or not s["rounds"]:
        return Text("Statistics appear as rounds are committed.", style="italic")
    per_pos, hist = s["per_position_acceptance"], s["acceptance_histogram"]
    rows = len(headline(s))
    if width < 50 or height < rows + 1:
        return compact(s, width)
    if height < rows + 1 + len(hist):
        return Group(headline_table(s), flow(sparklines(s), width))
    bar_w = max(4, (width - 22) // 2)
    pos = Table.grid(padding=(0, 1))
    for i, v in enumerate(per_pos, 1):
        pos.add_row(f"x{str(i).translate(SUB)}", Text(bar(v, bar_w), style="green"), f"{v:4.0%}")
    most = max(hist) or 1
    hst = Table.grid(padding=(0, 1))
    for k, h in enumerate(hist):
        hst.add_row(f"{k:>2}", Text(bar(h / most, bar_w), style="cyan"), f"{h:>3}")
    both = Table.grid(padding=(0, 3))
    both.add_row(
        Text("per-position acceptance", style="bold"),
        Text("rounds by drafts accepted", style="bold"),
    )
    both.add_row(pos, hst)
    return Group(headline_table(s), both)


class StatsPanel(Widget):
    """`summary` is set by the app: summarize() over the committed rounds' events."""

    summary: reactive[dict | None] = reactive(None)

    def render(self):
        return stats_view(self.summary, self.size.width, self.size.height)
