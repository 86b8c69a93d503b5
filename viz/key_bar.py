"""The footer: every control, key then action, wrapping onto a second line when narrow.

Textual's stock Footer keeps to one line and scrolls the rest out of sight; an 80-column
terminal would hide half the controls. This bar lists the app's shown BINDINGS (so the keys
are written down once, in demo_keys.py or race.py) and greys the ones the current mode cannot use.
"""

from rich.text import Text
from textual.widget import Widget


class KeyBar(Widget):
    def render(self) -> Text:
        width = max(self.size.width, 20)
        out, line = Text(no_wrap=True), 0
        for b in self.app.BINDINGS:
            if not b.show:
                continue
            enabled = self.app.key_enabled(b.action)
            key, desc = b.key_display or b.key, b.description
            item = len(key) + len(desc) + 4
            if line and line + item > width:
                out.append("\n")
                line = 0
            out.append(f" {key} ", style="bold reverse" if enabled else "dim reverse")
            out.append(f" {desc} ", style="" if enabled else "dim")
            line += item
        return out
