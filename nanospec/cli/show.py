"""`nanospec generate --show`: the rounds of a speculative run, printed in colour with rich.

One line per round: the drafted tokens, each marked ✓ accepted, ✗ rejected (struck through)
or · discarded (greyed: drafted after a rejection, never judged), then ↻ the token resampled
from the residual or ★ the bonus token; an SSD round starts with ◆ (its drafts were ready in
the cache) or ◇ (a miss). Symbols carry the meaning, so it reads in monochrome.

Each resampled token shows three numbers, because they differ and the difference is the
lesson: its probability under the residual norm(max(0, p − q)) it was drawn from, under the
target (p) and under the draft (q). A bonus token is drawn from p itself. An autoregressive
run (`--method ar`) is one step per token, each a bonus token in these terms.

What this file deliberately leaves out: animation and probability charts (the visualiser).
"""

from rich.console import Console
from rich.text import Text

MARKS = {
    "accept": ("✓", "bold green"),
    "reject": ("✗", "bold red strike"),
    "discard": ("·", "dim strike"),
    "resample": ("↻", "bold yellow"),
    "bonus": ("★", "bold cyan"),
}


def round_text(events: list[dict]) -> Text:
    """The one-line picture of a round, from that round's events (one row)."""
    line = Text()
    for e in events:
        if e["type"] == "ssd":  # where this round's drafts came from
            line.append("◆ " if e["hit"] else "◇ ", style="bold magenta" if e["hit"] else "dim")
        elif e["type"] in ("accept", "reject", "discard"):
            mark, style = MARKS[e["type"]]
            line.append(f"{e['text']!r}", style=style)
            line.append(f"{mark} ", style=style.replace(" strike", ""))
        elif e["type"] in ("resample", "bonus"):
            mark, style = MARKS[e["type"]]
            line.append(f"{mark} {e['text']!r}", style=style)
            line.append(f" ({extra_numbers(e)})", style="dim")
    return line


TREE_MARKS = {
    "accept": ("✓", "bold green"),
    "reject": ("✗", "bold red strike"),
    "skip": ("·", "dim"),
}


def tree_lines(event: dict) -> list[Text]:
    """A tree round's drafted nodes, one line per node, indented by depth, each marked ✓ on
    the accepted path, ✗ tested and rejected, · never tested."""
    kids: dict[int, list[dict]] = {}
    for node in event["nodes"]:
        kids.setdefault(node["parent"], []).append(node)

    def depth_first(parent):  # each node right under its parent, siblings in trial order
        for node in kids.get(parent, []):
            yield node
            yield from depth_first(node["node"])

    lines = []
    for node in depth_first(0):
        mark, style = TREE_MARKS[node["verdict"]]
        line = Text("      " + "  " * node["depth"])
        line.append(f"{node['text']!r}", style=style)
        line.append(f"{mark} ", style=style.replace(" strike", ""))
        line.append(f"(q {node['q']:.2f}, p {node['p']:.2f})", style="dim")
        lines.append(line)
    return lines


def extra_numbers(e: dict) -> str:
    """The resampled or bonus token's probabilities, each named by its law.

    >>> extra_numbers({"type": "resample", "residual": 0.77, "p": 0.07, "q": 0.0})
    'residual 0.77, p 0.07, q 0.00'
    >>> extra_numbers({"type": "bonus", "p": 0.5})
    'p 0.50'
    """
    if e["type"] == "bonus":
        return f"p {e['p']:.2f}"
    laws = [("residual", e.get("residual")), ("p", e.get("p")), ("q", e.get("q"))]
    return ", ".join(f"{name} {x:.2f}" for name, x in laws if x is not None)


def show_rounds(console: Console, events: list[dict]) -> None:
    start = events[0]
    autoregressive = start["method"] == "ar"
    console.print(Text.assemble(("prompt ", "dim"), (start["prompt"], "bold")))
    if autoregressive:
        console.print(
            Text(
                f"method ar (autoregressive: one target call per token), "
                f"T = {start['temperature']}, legend: ★ the token drawn from p",
                style="dim",
            )
        )
    else:
        shape = (
            f"a {len(start['tree'])}-node tree ({start['siblings']} siblings)"
            if "tree" in start
            else f"γ = {start['gamma']}"
        )
        unjudged = "never tested" if "tree" in start else "discarded"
        console.print(
            Text(
                f"method {start['method']}, {shape}, T = {start['temperature']}, "
                f"legend: ✓ accepted  ✗ rejected  · {unjudged}  ↻ resampled from the "
                f"residual  ★ bonus (drawn from p)",
                style="dim",
            )
        )
        if start["method"] == "ssd":
            console.print(
                Text(
                    f"fan-out {start['fanout']}, C = {start['saguaro_c']}: ◆ the "
                    f"drafts were ready in the cache  ◇ a miss ({start['backup']} "
                    f"backup drafted)",
                    style="dim",
                )
            )
            if start["saguaro_c"] < 1:  # the q printed is the law the drafts were drawn from
                console.print(
                    Text(
                        f"q is Saguaro's law q' (the draft's q with the cached "
                        f"guesses scaled by C = {start['saguaro_c']}): the drafts "
                        f"were drawn from q' and judged against it",
                        style="dim",
                    )
                )
    by_round: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if "round" in e:
            by_round.setdefault((e["row"], e["round"]), []).append(e)
    texts: dict[int, str] = {}
    for (row, r), evs in sorted(by_round.items()):
        end = evs[-1]
        texts[row] = texts.get(row, "") + end["emitted_text"]
        label = f"row {row} " if start.get("batch", 1) > 1 else ""
        counts = "" if autoregressive else f"{end['accepted']}/{end['drafted']}  "
        console.print(
            Text(
                f"{label}{'step' if autoregressive else 'round'} {r + 1:>3}  {counts}", style="dim"
            )
            + round_text(evs)
        )
        for e in evs:
            if e["type"] == "tree":
                for line in tree_lines(e):
                    console.print(line)
    for row, text in sorted(texts.items()):
        console.print(Text.assemble(("\n" + start["prompt"], "bold"), (text, "cyan")))
    s = events[-1]["summary"] if events[-1]["type"] == "run_end" else None
    if s and not autoregressive:
        console.print(
            Text(
                f"acceptance rate {s['acceptance_rate']:.0%}, mean acceptance length "
                f"{s['mean_acceptance_length']:.2f}, {s['tokens_per_target_call']:.2f} tokens "
                f"per target call, {s['target_calls_saved']} target calls saved"
                + (
                    f", cache hit rate {s['cache_hit_rate']:.0%} (after round 1)"
                    if "cache_hit_rate" in s
                    else ""
                ),
                style="dim",
            )
        )
        if s["tokens_per_target_call"] < s["mean_acceptance_length"] - 1e-9:
            console.print(
                Text(
                    "(fewer tokens per target call than the mean acceptance length: the "
                    "last round's tokens past EOS or the length limit were judged but "
                    "not kept)",
                    style="dim",
                )
            )
