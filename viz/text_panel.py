"""The text so far: the prompt, the committed tokens, and the round in progress inline.

    The capital of France is Paris. The  capital✓ of✓ Spain✗ is· ↻ France

The prompt is bold, committed text plain, the round just committed underlined; the round in
progress follows with its marks (✓ ✗ · ↻ ★, ? while a draft awaits its verdict), so the
tokens that are only *proposed* never look committed. The panel scrolls to keep the end in view.
"""

from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from viz.draw import mark
from viz.playhead import Frame, Phase
from viz.rounds import Round


def text_view(prompt: str, rounds: list[Round], frame: Frame | None) -> Text:
    out = Text(prompt, style="bold")
    if frame is None:
        return out
    r = frame.round.index
    for rnd in rounds[:r]:
        out.append(rnd.emitted_text)
    if frame.step.phase == Phase.COMMIT:
        out.append(frame.round.emitted_text, style="underline bold")
        return out
    for s in frame.slots:
        if s.text is None:
            continue
        symbol, style = mark(s.mark)
        shown = s.text.replace("\n", "⏎")
        if s.mark in ("resample", "bonus"):
            out.append(f" {symbol}", style=style)
            out.append(shown, style=style)
        else:
            out.append(shown, style=style if s.mark != "drafted" else "italic underline")
            out.append(symbol, style=style.replace(" strike", ""))
    return out


class TextPanel(VerticalScroll):
    """Attributes set by the app: `prompt`, `rounds` and `frame`; shows text_view of them."""

    can_focus = False  # the arrow keys belong to the player, not to scrolling
    frame: reactive[Frame | None] = reactive(None, always_update=True, init=False)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.prompt = ""
        self.rounds: list[Round] = []

    def compose(self):
        yield Static(id="text-body")

    def watch_frame(self, frame: Frame | None) -> None:
        self.query_one("#text-body", Static).update(text_view(self.prompt, self.rounds, frame))
        self.call_after_refresh(self.scroll_end, animate=False)
