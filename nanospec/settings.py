"""The sampling settings' ranges and their one check, without JAX.

The command line checks a flag before anything heavy loads, and the server before a request
reaches the engine.

What this file deliberately leaves out: what the settings do (sampling.py).
"""

import math

from nanospec.errors import UserError

INT32_MAX = 2**31 - 1  # JAX holds whole-number settings (top_k, seeds, lengths) as int32


class SettingError(UserError):
    """A sampling setting out of range; `field` names it (temperature, top_k or top_p), so a
    front end can say it in its own words (the CLI's --top-k, the API's param)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check_settings(temperature: float, top_k: int, top_p: float) -> None:
    """The one place sampling settings are validated (the CLI, the demo, the engine and the
    server all call it); raises SettingError."""
    if not temperature >= 0:  # also rejects NaN
        raise SettingError(
            "temperature", f"temperature must be 0 (greedy) or positive, got {temperature}."
        )
    if temperature == math.inf:
        raise SettingError(
            "temperature", f"temperature must be a finite number, got {temperature}."
        )
    if not 0 <= top_k <= INT32_MAX:
        raise SettingError(
            "top_k", f"top_k must be 0 (off) or a whole number up to {INT32_MAX}, got {top_k}."
        )
    if not 0 < top_p <= 1:
        raise SettingError("top_p", f"top_p must be in (0, 1], got {top_p}.")
