"""What a live run is asked to do: the settings a person can change, and their checks.

Plain Python (no JAX), so the app, the edit dialog and the command line can check a setting
the moment it is typed; live.py adds the checks that need the models (method, prompt length).
"""

from dataclasses import dataclass, replace

from nanospec.cli import check_sampling
from nanospec.errors import UserError

MAX_GAMMA = 32  # the loop's own limit (nanospec.speculative.check_room)
MAX_NEW = 4096


@dataclass(frozen=True)
class Settings:
    prompt: str = "The capital of France is"
    method: str = "draft"  # a drafting method (nanospec.decode.METHODS minus "ar")
    gamma: int = 4  # drafts per round
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int = 0
    max_new: int = 32  # tokens to generate

    def check(self) -> None:
        """A UserError with one sentence if a number is out of range."""
        if not 1 <= self.gamma <= MAX_GAMMA:
            raise UserError(f"gamma must be between 1 and {MAX_GAMMA}, got {self.gamma}.")
        if not 1 <= self.max_new <= MAX_NEW:
            raise UserError(f"max new tokens must be between 1 and {MAX_NEW}, got {self.max_new}.")
        if not 0 <= self.seed < 2**31:
            raise UserError(
                f"the seed must be a whole number from 0 to {2**31 - 1}, got {self.seed}."
            )
        check_sampling(self.temperature, self.top_k, self.top_p)

    def with_text(self, **fields: str) -> "Settings":
        """These settings with some fields replaced from a form's text; a non-number is a UserError.

        >>> Settings().with_text(gamma="6", temperature="0.5").gamma
        6
        """
        kinds = {
            "gamma": int,
            "top_k": int,
            "seed": int,
            "max_new": int,
            "temperature": float,
            "top_p": float,
            "prompt": str,
            "method": str,
        }
        values = {}
        for name, text in fields.items():
            try:
                values[name] = kinds[name](text if name == "prompt" else text.strip())
            except ValueError:
                label = {"gamma": "γ", "max_new": "max new tokens"}.get(
                    name, name.replace("_", "-")
                )
                raise UserError(f"{label} must be a number, got {text!r}.") from None
        return replace(self, **values)
