"""What the lessons share (lessons/): the shipped models, claims that fail loudly, bars.

A lesson *asserts* what it teaches: `claim(ok, sentence)` prints the sentence with a ✓, or
exits with status 1 and a ✗ — so a lesson that stops being true fails in `make test`, exactly
as a learner would see it fail.
"""

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"
console = Console()


def shipped(*names: str):
    """The shipped tokenizer and models (decode.Bundle): "target", "draft", or a head."""
    from nanospec.decode import Bundle
    return Bundle.load(SHIPPED, names or ("target", "draft"))


def claim(ok: bool, sentence: str) -> None:
    """Print the claim with ✓ if it holds; otherwise print it with ✗ and exit with status 1."""
    if ok:
        console.print(f"[green]✓[/] {sentence}")
        return
    console.print(f"[red]✗ not true here:[/] {sentence}")
    sys.exit(1)


def bar(value: float, most: float, width: int = 30) -> str:
    """A horizontal bar of `value` on a scale up to `most`, `width` characters at most."""
    full = int(round(width * max(0.0, min(value / most, 1.0)) * 8)) if most > 0 else 0
    return "█" * (full // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[full % 8]


def table(title: str, columns: list[str], rows: list[list]) -> None:
    """Print a small table: the first column and bars (an empty header) left-aligned, the
    rest right-aligned, as given (format them first)."""
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 or not c else "right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    console.print(t)
