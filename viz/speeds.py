"""The player's speeds, shared by the demo (app.py) and race mode (race.py).

Here: one ladder of powers of two, the `+` / `-` keys that climb it, and how a speed is written.

    >>> step_speed(1.0, 2), step_speed(16.0, 1), step_speed(0.25, -1, DEMO_SPEEDS)
    (4.0, 16.0, 0.25)
"""

from textual.binding import Binding

SPEEDS = tuple(2.0**k for k in range(-6, 5))  # ×1/64 … ×16 of real time (race mode's)
DEMO_SPEEDS = SPEEDS[SPEEDS.index(0.25) :]  # ×1/4 … ×16: the demo's (slower, a step would drag)
SPEED_KEYS = [  # both apps' BINDINGS list these, so the key bar writes them the same way
    Binding("plus,equals_sign", "speed(1)", "speed", key_display="+ -"),
    Binding("minus", "speed(-1)", "slower", show=False),
]


def step_speed(speed: float, delta: int, speeds: tuple[float, ...] = SPEEDS) -> float:
    """The speed `delta` rungs up `speeds` from `speed` (down when negative), kept within it."""
    return speeds[max(0, min(len(speeds) - 1, speeds.index(speed) + delta))]


def speed_text(speed: float) -> str:
    """The speed as race mode's status line writes it.

    >>> speed_text(0.25), speed_text(4.0)
    ('×1/4', '×4')
    """
    return f"×{speed:g}" if speed >= 1 else f"×1/{1 / speed:g}"
