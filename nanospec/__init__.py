"""nanospec: speculative decoding from scratch."""

from pathlib import Path

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"  # the models the project ships
