"""Small text-drawing helpers shared by the widgets: bars, numbers, tokens, marks.

Every mark is a symbol first and a colour second, so the screen reads in a monochrome terminal
(NO_COLOR=1) and to colour-blind viewers: ? pending (drafted, not yet judged: bold and in the
draft's colour, so it never reads as punctuation), ✓ accepted, ✗ rejected (struck through),
· discarded (greyed), ↻ resampled from the residual, ★ bonus; and for SSD's speculation
cache, ◆ a hit (lit: the branch the next round drafts from) and ◇ a miss. The symbols are
nanospec's own (`nanospec generate --show`); the colours are picked so that Textual's NO_COLOR
greyscale keeps each one light enough to read on a dark background (its ANSI red and magenta
turn almost black there).

>>> bar(0.5, 4), bar(1.0, 2), bar(0.3, 2), bar(0.001, 3)
('██  ', '██', '▌ ', '▏  ')
>>> num(0.5), num(0.0003), num(float("inf")), num(None)
('0.50', '3.0e-4', '∞', '—')
>>> token("  Paris\\n")
"'  Paris\\\\n'"
"""

from nanospec.cli.show import MARKS

EIGHTHS = "▏▎▍▌▋▊▉"
LEGEND = "? pending  ✓ accepted  ✗ rejected  · discarded  ↻ resampled  ★ bonus"
# Colours (each stays light in greyscale): the draft, the target, a rejection, an error.
DRAFT, TARGET, REJECT = "orchid", "cornflower_blue", "indian_red1"
PENDING = ("?", f"bold {DRAFT}")  # drafted, not judged yet: the draft's colour, not the text's
CACHE_MARKS = {"hit": ("◆", f"bold {DRAFT}"), "miss": ("◇", "bold")}  # the draft made the cache
STYLES = {
    "accept": "bold green",
    "reject": f"bold {REJECT} strike",
    "discard": "dim strike",
    "resample": "bold yellow",
    "bonus": "bold cyan",
}


def bar(frac: float, width: int) -> str:
    """A bar `width` cells wide filled to `frac` (1/8-cell steps); any mass > 0 shows a sliver."""
    cells = max(0.0, min(1.0, frac)) * width
    full = int(cells)
    eighths = int((cells - full) * 8)
    s = "█" * full + (EIGHTHS[eighths - 1] if eighths else "")
    if not s and frac > 0 and width > 0:
        s = "▏"
    return s.ljust(width)


def num(x: float | None) -> str:
    """A probability or ratio for a table cell: 2 decimals, or 2 significant digits when tiny."""
    if x is None:
        return "—"
    if x == float("inf"):
        return "∞"
    if x != x:
        return "nan"  # a broken trace shows its NaN rather than crash
    if x == 0 or abs(x) >= 0.01:
        return f"{x:.2f}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def token(text: str, width: int | None = None) -> str:
    """A token as a quoted Python literal (spaces and newlines visible), cut to `width`."""
    s = repr(text)
    if width is not None and len(s) > width:
        s = s[: max(width - 1, 1)] + "…"
    return s


def mark(kind: str) -> tuple[str, str]:
    """(symbol, style) for a verdict kind: accept, reject, discard, resample, bonus, drafted."""
    if kind in MARKS:
        return MARKS[kind][0], STYLES[kind]
    return PENDING if kind == "drafted" else (" ", "")
