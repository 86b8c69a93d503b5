"""Helpers for driving the app like a user: run a pilot, read the screen, wait for the model."""

import asyncio
import io
import time

from rich.console import Console


def run(coro):
    """Run a pilot coroutine (the tests are plain functions; no async plugin needed)."""
    return asyncio.run(coro)


def screen_text(app) -> str:
    """The whole screen as plain text, exactly as a monochrome terminal would show it."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        record=True,
        color_system=None,
        legacy_windows=False,
    )
    console.print(app.screen._compositor.render_update(full=True))  # what export_screenshot draws
    return console.export_text()


def widget_text(widget) -> str:
    """One widget's content as plain text, at the widget's own width."""
    console = Console(
        width=max(widget.size.width, 20), file=io.StringIO(), record=True, color_system=None
    )
    console.print(widget.render())
    return console.export_text()


async def wait_until(pilot, condition, timeout: float = 120.0, what: str = "condition"):
    """Let the app run until `condition()` holds; fail (not hang) after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.05)
