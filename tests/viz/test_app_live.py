"""The app in live mode on the tiny test models (tests/conftest.py), driven by key presses.

The tiny target and draft share their weights, so p = q and every draft is accepted (✓, then
★): the replay tests cover rejections. What these tests pin is the live wiring: the loop runs
in a worker thread behind a visible "compiling…" state; what the app shows is exactly what
`nanospec.decode.decode` generates; changing the temperature reruns without recompiling (and
changing γ does recompile, which shows the compile counter can catch one); the edit dialog
reports bad values in place; a saved live trace replays to the same rounds.
"""

import pytest

from nanospec.aot import programs_compiled
from nanospec.decode import Bundle, decode
from nanospec.rounds import _draft_jit, _prefill_jit, _settle_jit
from tests.viz.pilot import run, screen_text, wait_until, widget_text
from viz.app import DemoApp
from viz.round_table import RoundTable
from viz.rounds import load_recording
from viz.settings import Settings
from viz.settings_screen import SettingsScreen

# Each test here watches compiling (the "compiling…" state, its time, the programs counted).
pytestmark = pytest.mark.usefixtures("compile_afresh")


@pytest.fixture
def bundle(tiny_ckpt_dir):
    return Bundle.load(tiny_ckpt_dir)


def compiled_programs() -> tuple[int, int, int]:
    return tuple(programs_compiled(f) for f in (_prefill_jit, _draft_jit, _settle_jit))


def live(bundle, **settings):
    return DemoApp(bundle=bundle, settings=Settings(max_new=12, **settings), autoplay=False)


async def finished(pilot, app):
    await wait_until(pilot, lambda: app.done or bool(app.error), what="the live run")
    assert not app.error, app.error


def test_live_run_compiles_visibly_then_shows_what_decode_generates(bundle):
    async def go():
        # γ = 6 is compiled by no other test for these models, so JAX really compiles here
        app = live(bundle, gamma=6, temperature=1.0, seed=7)
        async with app.run_test(size=(100, 30)) as pilot:
            assert app.recorder.compiling and "compiling" in screen_text(app)  # not a frozen screen
            await finished(pilot, app)
            assert "compiling" not in screen_text(app)
            # compiling was timed on its own, before round 1: the recording keeps it apart
            assert app.recording.compile_ms > 100 and app.recording.events()[1]["type"] == "compile"
            await pilot.press("right_square_bracket")
            marks = widget_text(app.query_one(RoundTable))
            assert "✓" in marks and "★" in marks and "✗" not in marks
        want = decode(
            bundle,
            "The capital of France is",
            method="draft",
            gamma=6,
            temperature=1.0,
            seed=7,
            max_new=12,
            with_events=True,
        )
        assert [t for r in app.rounds for t in r.emitted] == want.tokens[0]

    run(go())


def test_changing_temperature_reruns_without_recompiling_but_gamma_recompiles(bundle):
    async def go():
        app = live(bundle, gamma=4, temperature=1.0)
        async with app.run_test(size=(100, 30)) as pilot:
            await finished(pilot, app)
            before = compiled_programs()
            await pilot.press("g")  # greedy: temperature 1.0 -> 0
            assert app.settings.temperature == 0.0 and not app.recorder.compiling
            await finished(pilot, app)
            assert compiled_programs() == before and app.recording.compile_ms == 0
            await pilot.press("g")  # and back to 1.0
            await finished(pilot, app)
            assert app.settings.temperature == 1.0 and compiled_programs() == before
            await pilot.press("2")  # γ is static: a new γ compiles new programs
            assert app.settings.gamma == 2
            await finished(pilot, app)  # (a quick compile can end before a check could see it)
            assert compiled_programs()[1:] == (before[1] + 1, before[2] + 1)
            assert app.recording.compile_ms > 0
            assert all(r.gamma == 2 for r in app.rounds)

    run(go())


def test_the_edit_dialog_runs_new_settings_and_reports_bad_ones_in_place(bundle, tmp_path):
    """Driven by the keys a person presses: Tab and Shift+Tab move between the fields (focusing
    a field selects its text, so typing replaces it), Enter runs, Escape cancels."""

    async def go():
        app = live(bundle, gamma=4)
        app.save_dir = tmp_path
        async with app.run_test(size=(80, 24)) as pilot:
            await finished(pilot, app)
            before = compiled_programs()
            await pilot.press("e")
            dialog = app.screen
            assert isinstance(dialog, SettingsScreen) and app.focused.id == "prompt"
            await pilot.press("tab", "tab", "tab")  # prompt -> method -> γ -> temperature
            assert app.focused.id == "temperature"
            await pilot.press(*"hot", "enter")
            assert app.screen is dialog and app.settings.temperature == 1.0
            assert "temperature must be a number" in str(dialog.query_one("#problem").render())
            await pilot.press("shift+tab", "tab")  # back to γ, forward to temperature again
            assert app.focused.id == "temperature"
            await pilot.press("0", ".", "5")
            await pilot.press("shift+tab", "shift+tab", "shift+tab")
            assert app.focused.id == "prompt"
            await pilot.press(*"x " * 80, "enter")  # far longer than the tiny context
            problem = str(dialog.query_one("#problem").render())
            assert app.screen is dialog and "leaving no room" in problem
            await pilot.press("tab", "shift+tab")  # refocus: the prompt's text is selected
            await pilot.press(*"The capital of Spain is", "enter")
            assert app.screen is not dialog
            assert app.settings.temperature == 0.5 and app.settings.prompt.endswith("Spain is")
            await finished(pilot, app)
            assert compiled_programs() == before  # same γ, same prompt bucket: no recompile
            assert "The capital of Spain is" in screen_text(app)
            await pilot.press("e", "escape")  # cancel: nothing changes
            assert app.settings.temperature == 0.5 and not isinstance(app.screen, SettingsScreen)
            await pilot.press("w")
        saved = list(tmp_path.glob("nanospec-trace-*.jsonl"))
        assert len(saved) == 1
        again = load_recording(saved[0])
        assert again.start["temperature"] == 0.5
        assert [r.emitted for r in again.rounds] == [r.emitted for r in app.rounds]

    run(go())


def test_the_method_key_shrinks_gamma_for_heads_and_gives_it_back(tiny_ckpt_dir):
    """Medusa drafts one token per head (4 here), so `m` lowers γ = 6 to 4 for it; the next
    method gets the γ the viewer asked for again, not the one Medusa had to use."""
    from nanospec.decode import EVERYTHING

    bundle = Bundle.load(tiny_ckpt_dir, EVERYTHING)

    async def go():
        app = live(bundle, gamma=6, method="ngram")
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("m")
            assert (app.settings.method, app.settings.gamma) == ("medusa", 4)
            await pilot.press("m")
            assert (app.settings.method, app.settings.gamma) == ("eagle", 6)
            await finished(pilot, app)

    run(go())
