"""`Toasts`, mixed into both apps (the demo and race mode): how they post a message.

Its `say` is the one way they post a message, and it does not stack copies of a message that
is still on screen.
"""

import time


class Toasts:
    """Gives an App `say`. Mix it in ahead of App: `class DemoApp(Toasts, App)`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.toasts: dict[str, float] = {}  # message -> when it was last shown

    def say(self, message: str, severity: str = "information") -> None:
        """A toast, unless the same one is still on screen (a repeated key does not stack them)."""
        now = time.monotonic()
        if now - self.toasts.get(message, -1e9) < self.NOTIFICATION_TIMEOUT:
            return
        self.toasts[message] = now
        self.notify(message, title="nanospec", severity=severity)
