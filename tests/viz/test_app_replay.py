"""The app in replay mode, driven by key presses; the tests read what the widgets show.

Replay needs no model, so these run in about a second each. The trace's rounds are described in
conftest.py: round 1 accepts x₁..x₃ and rejects x₄ (↻ ' France'), round 2 rejects x₁ and
discards the rest, round 3 accepts everything (★).
"""

import subprocess
import sys

from nanospec.trace import read_jsonl, summarize
from tests.viz.pilot import run, screen_text, wait_until, widget_text
from viz.app import DemoApp
from viz.charts import ProbCharts
from viz.playhead import Phase
from viz.round_table import RoundTable
from viz.rounds import load_recording
from viz.speeds import DEMO_SPEEDS as SPEEDS
from viz.stats_panel import StatsPanel
from viz.text_panel import TextPanel


def replay(recording, **kw):
    return DemoApp(recording, source="replay", autoplay=False, **kw)


def caption(app) -> str:
    return str(app.query_one("#caption").render())


def test_stepping_reveals_the_round_draft_by_draft_then_judges_it(recording):
    async def go():
        app = replay(recording)
        async with app.run_test(size=(120, 36)) as pilot:
            table = app.query_one(RoundTable)
            assert app.pos.step(app.rounds).phase == Phase.DRAFT
            assert "' Par'" in widget_text(table) and "'is'" not in widget_text(table)
            assert "the draft model reads the text and samples ' Par'" in caption(app)
            await pilot.press("right")
            assert "'is'" in widget_text(table) and "? pending" in widget_text(table)
            await pilot.press("right", "right", "right")  # x₃, x₄, then the verify pass
            assert app.pos.step(app.rounds).phase == Phase.VERIFY
            await pilot.press("right", "right", "right", "right")  # x₁..x₃ ✓, then x₄ ✗
            shown = widget_text(table)
            assert shown.count("✓ accepted") == 3 and "✗ rejected" in shown and "·" not in shown
            assert "rejected ✗" in caption(app)
            await pilot.press("right")  # the correction from the residual, labelled as such
            last = widget_text(table).rstrip().splitlines()[-1]
            assert "' France'" in last and "↻ residual 0.69" in last
            assert "0.13" in last and "0.35" in last  # its q(x) and p(x) beside it
            assert "residual 0.69 (p 0.35, q 0.13)" in caption(app)
            charts = app.query_one(ProbCharts)
            assert charts.chart.residual is not None and charts.chart.chosen is not None
            assert "residual" in widget_text(charts)
            await pilot.press("left")  # back one step: the ↻ row is hidden again
            assert "↻" not in widget_text(table)

    run(go())


def test_round_keys_jump_and_the_bonus_is_marked_with_a_star(recording):
    async def go():
        app = replay(recording)
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("right_square_bracket", "right_square_bracket")
            assert app.pos.round == 2 and app.pos.step(app.rounds).phase == Phase.EXTRA
            shown = widget_text(app.query_one(RoundTable))
            assert shown.count("✓ accepted") == 4 and "★ bonus" in shown and "✗" not in shown
            await pilot.press("left_square_bracket")
            assert app.pos.round == 1

    run(go())


def test_the_cursor_picks_the_position_the_charts_explain(recording):
    async def go():
        app = replay(recording, start_round=1)  # round 1 fully judged, paused
        async with app.run_test(size=(120, 36)) as pilot:
            charts = app.query_one(ProbCharts)
            assert app.playing is False and charts.chart.residual is not None  # follows ↻
            await pilot.press("up", "up", "up", "up")  # from the ↻ row (5) up to x₁
            assert app.cursor == 1 and "▸" in widget_text(app.query_one(RoundTable)).splitlines()[1]
            assert charts.chart.residual is None and "Accepted ✓" in charts.chart.note
            await pilot.press("down", "down", "down")
            assert app.cursor == 4 and "Rejected ✗" in charts.chart.note
            await pilot.press("right_square_bracket")
            assert app.cursor is None  # a new round: the charts follow the play again

    run(go())


def test_statistics_cover_the_committed_rounds_only(recording):
    async def go():
        app = replay(recording)
        async with app.run_test(size=(120, 36)) as pilot:
            stats = app.query_one(StatsPanel)
            assert stats.summary is None
            await pilot.press("right_square_bracket", "right_square_bracket", "right")  # commit 3
            want = summarize([e for r in recording.rounds[:3] for e in r.events])
            assert stats.summary == want
            shown = widget_text(stats)
            assert f"{want['acceptance_rate']:.0%}" in shown and "target calls saved" in shown
            assert "per-position acceptance" in shown

    run(go())


def test_play_advances_by_itself_and_stops_at_the_end(recording):
    async def go():
        app = replay(recording)
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(len(SPEEDS)):
                await pilot.press("plus")
            assert app.speed == SPEEDS[-1]
            await pilot.press("space")
            assert app.playing
            await wait_until(pilot, lambda: not app.playing, timeout=30, what="the end of the run")
            assert app.pos.round == len(recording.rounds) - 1
            assert app.pos.step(app.rounds).phase == Phase.COMMIT
            text = widget_text(app.query_one(TextPanel).query_one("#text-body"))
            assert text.startswith(
                "The capital of France is Paris. France uses the euro as its currency."
            )
            await pilot.press("r")  # restart plays from the top
            assert app.playing and app.pos.round == 0
            await pilot.press("space", "minus")
            assert not app.playing and app.speed == SPEEDS[-2]

    run(go())


def test_settings_keys_in_a_replay_explain_instead_of_crashing(recording, tmp_path):
    async def go():
        app = replay(recording, save_dir=tmp_path / "traces")
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            for key in ("e", "3", "g", "m"):
                await pilot.press(key)
            assert app.recording is recording and not app.error
            assert any("replay" in n.message for n in app._notifications)
            await pilot.press("w")  # saving a replay writes a trace that replays the same
            saved = list((tmp_path / "traces").glob("nanospec-trace-*.jsonl"))
            assert len(saved) == 1
            again = load_recording(saved[0])
            assert [r.emitted for r in again.rounds] == [r.emitted for r in recording.rounds]
            assert read_jsonl(saved[0])[-1]["type"] == "run_end"

    run(go())


def test_an_80x24_terminal_still_shows_every_part_and_every_key(recording):
    async def go():
        app = replay(recording, start_round=2)  # x₁ rejected; round 1 committed
        async with app.run_test(size=(80, 24)):
            screen = screen_text(app)
            lines = screen.splitlines()
            assert len(lines) == 24 and max(len(line) for line in lines) <= 80
            for part in ("round 2 of 4", "✗", "·", "↻", "residual", "acceptance", "calls"):
                assert part in screen, part
            for key in (
                "space",
                "→",
                "←",
                "[ ]",
                "↑↓",
                "+ -",
                "restart",
                "edit",
                "1-9",
                "greedy",
                "method",
                "save",
                "quit",
            ):
                assert key in screen, key  # all the controls, on two footer lines
            assert app.query_one("#timeline").display is False  # the one panel that gives way

    run(go())


def test_a_wide_terminal_adds_the_timeline(recording):
    async def go():
        app = replay(recording, start_round=3)
        async with app.run_test(size=(160, 44)):
            screen = screen_text(app)
            assert app.query_one("#timeline").display
            assert "▒ draft" in screen and "█ verify" in screen and "▸ 3" in screen
            assert "rounds by drafts accepted" in screen  # the full statistics, not the compact

    run(go())


def test_replay_loads_no_jax():
    """A course can ship traces: replaying one (here as a screenshot) never imports JAX."""
    code = (
        "import sys\n"
        "from nanospec.cli import main\n"
        "from tests.viz.conftest import TRACE\n"
        "import tempfile, os\n"
        "out = os.path.join(tempfile.mkdtemp(), 's.svg')\n"
        "assert main(['demo', '--replay', str(TRACE), '--screenshot', out]) == 0\n"
        "assert 'textual' in sys.modules and 'jax' not in sys.modules, 'jax was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_help_screen_explains_every_symbol_and_why_the_output_is_exact(recording):
    from viz.draw import LEGEND
    from viz.help_screen import HelpScreen

    async def go():
        app = replay(recording, start_round=1)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            shown = screen_text(app)
            for part in LEGEND.split("  "):  # "? pending", "✓ accepted", ...
                symbol, word = part.split()
                assert any(symbol in line and word in line for line in shown.splitlines()), part
            for name in ("q(x)", "p(x)", "u ", "residual", "nanospec/verify.py"):
                assert name in shown, name
            where = app.pos
            await pilot.press("right", "left_square_bracket")  # the demo's keys wait
            assert app.pos == where and isinstance(app.screen, HelpScreen)
            await pilot.press("question_mark")
            assert not isinstance(app.screen, HelpScreen)

    run(go())


def test_a_repeated_live_only_key_in_a_replay_shows_one_toast_not_a_stack(recording):
    async def go():
        app = replay(recording)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await pilot.press("e", "e", "g", "3", "m")
            assert len([n for n in app._notifications if "replay" in n.message]) == 1

    run(go())


def test_w_saves_under_traces_which_git_ignores(recording, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)

    async def go():
        app = replay(recording)  # the default folder
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("w")

    run(go())
    assert len(list((tmp_path / "traces").glob("nanospec-trace-*.jsonl"))) == 1
    ignored = (Path(__file__).parents[2] / ".gitignore").read_text().split()
    assert "traces/" in ignored
