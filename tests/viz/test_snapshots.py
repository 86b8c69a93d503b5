"""Snapshot tests: the look of the key screens, pinned as SVG (colours) and text (monochrome).

Each case replays the shipped example trace (no JAX, no numerics that drift), moves to a
moment worth seeing, and compares the screen with `snapshots/<name>.svg` — Textual's own SVG
export, the format pytest-textual-snapshot stores — and `snapshots/<name>.txt`, the same screen
as plain text, which is what a failure diff shows and what a reviewer reads.

To accept a deliberate change of look: `NANOSPEC_UPDATE_SNAPSHOTS=1 pytest tests/viz`, then look
at the new files (open the .svg in a browser) before committing them. A missing snapshot fails
rather than writing itself, so a test cannot pass without a reviewed picture.

(A small helper rather than the pytest-textual-snapshot plugin: the plugin pins syrupy 4.8,
which caps pytest below 9, and this project runs pytest 9.)
"""

import difflib
import os
import re
from pathlib import Path

import pytest

from tests.viz.pilot import run, screen_text
from viz.app import DemoApp

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("NANOSPEC_UPDATE_SNAPSHOTS") == "1"

# name: (terminal size, round to open at (1-based, fully judged), keys pressed after)
CASES = {
    "rejection_and_residual_120x36": ((120, 36), 1, ()),
    "bonus_round_wide_160x44": ((160, 44), 3, ()),
    "drafting_in_progress_100x30": (
        (100, 30),
        4,
        ("right_square_bracket", "left", "left", "left", "left", "left", "left", "left"),
    ),
    "small_terminal_80x24": ((80, 24), 2, ()),
    "tiny_terminal_60x18": ((60, 18), 1, ()),
    "help_screen_80x24": ((80, 24), 1, ("question_mark",)),
}


def normalize(svg: str) -> str:
    """Drop the per-export id Rich puts in class names (as pytest-textual-snapshot does)."""
    return re.sub(r"\bterminal-\d+-", "terminal-", svg)


def take(recording, size, start_round, keys) -> tuple[str, str]:
    async def go():
        app = DemoApp(
            recording, source="replay capital.jsonl", autoplay=False, start_round=start_round
        )
        async with app.run_test(size=size) as pilot:
            await pilot.press(*keys)
            await pilot.pause()
            return normalize(app.export_screenshot(title="nanospec demo")), screen_text(app)

    return run(go())


@pytest.mark.parametrize("name", sorted(CASES))
def test_screen_matches_snapshot(recording, name):
    size, start_round, keys = CASES[name]
    svg, text = take(recording, size, start_round, keys)
    svg_path, text_path = SNAPSHOTS / f"{name}.svg", SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        svg_path.write_text(svg, encoding="utf-8")
        text_path.write_text(text, encoding="utf-8")
        return
    if not svg_path.exists():
        pytest.fail(
            f"no snapshot {svg_path.name}; make it with NANOSPEC_UPDATE_SNAPSHOTS=1, then review it"
        )
    want_text = text_path.read_text(encoding="utf-8")
    if text != want_text:
        diff = "\n".join(
            difflib.unified_diff(
                want_text.splitlines(), text.splitlines(), "snapshot", "now", lineterm=""
            )
        )
        pytest.fail(f"{name}: the screen's text changed:\n{diff}")
    assert svg == normalize(svg_path.read_text(encoding="utf-8")), (
        f"{name}: same text but a different look (colours or styles); compare the SVGs"
    )
