"""`nanospec generate --show`: the rounds of a speculative run, printed in colour with rich.

One line per round: the drafted tokens, each marked ✓ accepted, ✗ rejected (struck through)
or · discarded (greyed: drafted after a rejection, never judged), then ↻ the token resampled
from the residual or ★ the bonus token. Symbols carry the meaning, so it reads in monochrome.

What this file deliberately leaves out: animation and probability charts (the visualiser).
"""

from rich.console import Console
from rich.text import Text

MARKS = {"accept": ("✓", "bold green"), "reject": ("✗", "bold red strike"),
         "discard": ("·", "dim strike"), "resample": ("↻", "bold yellow"), "bonus": ("★", "bold cyan")}


def round_text(events: list[dict]) -> Text:
    """The one-line picture of a round, from that round's events (one row)."""
    line = Text()
    for e in events:
        if e["type"] in ("accept", "reject", "discard"):
            mark, style = MARKS[e["type"]]
            line.append(f"{e['text']!r}", style=style)
            line.append(f"{mark} ", style=style.replace(" strike", ""))
        elif e["type"] in ("resample", "bonus"):
            mark, style = MARKS[e["type"]]
            line.append(f"{mark} {e['text']!r}", style=style)
            line.append(f" (p={e['p']:.2f})", style="dim")
    return line


def show_rounds(console: Console, events: list[dict]) -> None:
    start = events[0]
    console.print(Text.assemble(("prompt ", "dim"), (start["prompt"], "bold")))
    console.print(Text(f"method {start['method']}, γ = {start['gamma']}, T = {start['temperature']}, "
                       f"legend: ✓ accepted  ✗ rejected  · discarded  ↻ resampled  ★ bonus", style="dim"))
    by_round: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if "round" in e:
            by_round.setdefault((e["row"], e["round"]), []).append(e)
    texts: dict[int, str] = {}
    for (row, r), evs in sorted(by_round.items()):
        end = evs[-1]
        texts[row] = texts.get(row, "") + end["emitted_text"]
        label = f"row {row} " if start.get("batch", 1) > 1 else ""
        console.print(Text(f"{label}round {r + 1:>3}  {end['accepted']}/{end['drafted']}  ", style="dim")
                      + round_text(evs))
    for row, text in sorted(texts.items()):
        console.print(Text.assemble(("\n" + start["prompt"], "bold"), (text, "cyan")))
    s = events[-1]["summary"] if events[-1]["type"] == "run_end" else None
    if s:
        console.print(Text(f"acceptance rate {s['acceptance_rate']:.0%}, mean acceptance length "
                           f"{s['mean_acceptance_length']:.2f}, {s['tokens_per_target_call']:.2f} tokens "
                           f"per target call, {s['target_calls_saved']} target calls saved", style="dim"))
