"""`RacePane`: race mode's widget for one method, its text so far over its counter line.

It shows the prompt and the text so far, scrolled to the end, over its counter line
(`counter`). race.py decides what each pane shows and when.
"""

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static


def counter(calls: int, tokens: int, seconds: float) -> str:
    """A pane's counter line: target calls so far, tokens so far, seconds on the race clock.

    >>> counter(4, 14, 0.0512)
    'target calls 4 · tokens 14 · 0.05 s'
    """
    return f"target calls {calls} · tokens {tokens} · {seconds:.2f} s"


class RacePane(Vertical):
    """One method: the prompt and its text so far (scrolled to the end), and its counter line."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.text = self.count = ""  # the generated text on screen (no prompt), the counter line

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(classes="body")
        yield Static(classes="counter")

    def show(self, prompt: str, text: str, count: str) -> None:
        """Draw `text` after the prompt, and the counter line (only when either changed)."""
        if (text, count) == (self.text, self.count):
            return
        self.text, self.count = text, count
        self.query_one(".body", Static).update(Text.assemble((prompt, "bold"), text))
        self.query_one(".counter", Static).update(count)
        scroll = self.query_one(VerticalScroll)
        scroll.call_after_refresh(scroll.scroll_end, animate=False)
