"""Race mode (viz/race.py) on the tiny test models, driven by key presses like a user would.

The tiny target and draft share their weights, so every draft is accepted and the speculative
pane needs few target calls. At temperature 0 both panes must end with exactly the text
`nanospec.decode.decode` gives for their method. The replay follows a clock the test moves by
hand, so pausing is checked without ever asserting a wall-clock time.
"""

import pytest

from nanospec import aot
from nanospec.cli import main
from nanospec.decode import Bundle, decode
from tests.viz.pilot import run, screen_text, wait_until
from tests.viz.test_cli import svg_text
from viz.race import Lane, RaceApp, RacePane, verdict, watchable
from viz.settings import Settings

PROMPT = "The capital of France is"


@pytest.fixture
def bundle(tiny_ckpt_dir):
    return Bundle.load(tiny_ckpt_dir)


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def timed(pilot, app):
    await wait_until(pilot, lambda: app.done or bool(app.error), what="both timing runs")
    assert not app.error, app.error


def pane(app, method) -> RacePane:
    return app.query_one(f"#lane-{method}", RacePane)


def test_lane_shows_a_round_once_its_measured_time_has_passed():
    lane = Lane("ar", "autoregressive")
    for seconds, ids in [(0.25, [1]), (0.5, [2]), (0.25, [3])]:  # exact in binary
        lane.add(seconds, ids)
    assert [lane.shown(t) for t in (0.0, 0.25, 0.7, 0.75, 1.0, 9)] == [0, 1, 1, 2, 3, 3]
    assert lane.ids(2) == [1, 2] and lane.total_s == 1.0


def test_verdict_says_when_speculation_is_slower():
    ar, spec = Lane("ar", "", [0.1], [[1]]), Lane("ngram", "", [0.2], [[1]])
    assert verdict(ar, spec).startswith("speedup ×0.50 = ar 0.10 s ÷ ngram 0.20 s")
    assert "slower than ar here" in verdict(ar, spec)


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
def test_race_ends_with_what_decode_generates_and_counts_target_calls(bundle, size):
    settings = Settings(prompt=PROMPT, method="draft", gamma=4, temperature=0.0, max_new=10)
    clock = FakeClock()

    async def go():
        app = RaceApp(bundle, settings, now=clock)
        async with app.run_test(size=size) as pilot:
            await timed(pilot, app)
            assert app.playing and app.clock == 0.0  # the fake clock has not moved
            assert pane(app, "ar").text == pane(app, "draft").text == ""
            clock.t += 10 * app.end / app.speed  # far past the finish: one tick ends the race
            await wait_until(pilot, lambda: not app.playing, what="the race to finish")
            await pilot.pause()
            screen = screen_text(app)
            assert "ar · autoregressive" in screen and "draft · speculative γ=4" in screen
            assert "speedup ×" in screen and "timed alone" in screen
            return app, {m: (pane(app, m).text, pane(app, m).count) for m in ("ar", "draft")}

    app, shown = run(go())
    for lane in app.lanes:
        want = decode(bundle, PROMPT, method=lane.method, gamma=4, temperature=0.0, max_new=10)
        assert shown[lane.method][0] == want.texts[0]
        assert lane.ids() == want.tokens[0]
    ar, spec = app.lanes
    assert all(count.endswith("finished ✓") for _, count in shown.values())
    assert shown["ar"][1].startswith(f"target calls {ar.rounds} · tokens {ar.rounds} ·")
    assert shown["draft"][1].startswith(f"target calls {spec.rounds} · tokens {len(spec.ids())} ·")
    assert spec.rounds < len(spec.ids())  # p = q: every draft accepted, several tokens a call


def test_race_compiles_visibly_then_space_pauses_the_clock_and_r_restarts(bundle):
    settings = Settings(prompt=PROMPT, method="ngram", gamma=2, temperature=0.0, max_new=8)
    clock = FakeClock()
    aot.clear()  # so JAX really compiles here, whatever ran before

    async def go():
        app = RaceApp(bundle, settings, now=clock)
        async with app.run_test(size=(80, 24)) as pilot:
            assert "compiling…" in screen_text(app)  # not a frozen screen
            await timed(pilot, app)
            speed = app.speed  # slow motion: the race lasts WATCHABLE_S at least, ratios kept
            assert speed == watchable(app.end) <= 1
            half = app.end / 2
            clock.t += half / speed
            await wait_until(pilot, lambda: app.clock > 0, what="the clock to move")
            await pilot.press("space")
            assert not app.playing
            stopped = app.clock
            assert stopped == pytest.approx(half) and "paused" in screen_text(app)
            clock.t += 1000.0  # paused: time passing does not move the race
            await pilot.pause(3 * 0.05)
            assert app.clock == stopped and "speedup" not in screen_text(app)
            await pilot.press("space")
            clock.t += 1000.0
            await wait_until(pilot, lambda: app.clock == app.end, what="the finish")
            assert not app.playing and "speedup" in screen_text(app)
            await pilot.press("r")
            assert app.playing and app.clock == 0.0
            await pilot.press("plus", "plus", "minus")
            assert app.speed == 2 * speed

    run(go())


def test_race_screenshot_shows_the_finish(tmp_path, tiny_ckpt_dir, capsys):
    out = tmp_path / "race.svg"
    code = main(
        [
            "--checkpoints",
            str(tiny_ckpt_dir),
            "demo",
            "--race",
            "--temperature",
            "0",
            "--max-new-tokens",
            "8",
            "--screenshot",
            str(out),
        ]
    )
    assert code == 0 and capsys.readouterr().out.strip() == f"wrote {out}"
    svg = svg_text(out)
    assert "ar · autoregressive" in svg and "draft · speculative γ=4" in svg
    assert "speedup ×" in svg and "tokens per target call" in svg


def test_a_prompt_too_long_to_race_is_one_sentence(tmp_path, tiny_ckpt_dir, capsys):
    code = main(
        [
            "--checkpoints",
            str(tiny_ckpt_dir),
            "demo",
            "--race",
            "--prompt",
            "word " * 400,
            "--screenshot",
            str(tmp_path / "s.svg"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "leaving no room to generate" in err and err.count("\n") == 1
    assert not (tmp_path / "s.svg").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--replay", "t.jsonl"], "--race times two live runs on the models, so it cannot replay"),
        (["--method", "ar"], "--race always runs ar; give --method one of draft"),
        (["--round", "2"], "--race shows two runs whole, so drop --round"),
    ],
)
def test_race_mistakes_are_one_sentence(tmp_path, capsys, argv, message):
    code = main(
        [
            "--checkpoints",
            str(tmp_path / "nowhere"),
            "demo",
            "--race",
            *argv,
            "--screenshot",
            str(tmp_path / "s.svg"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize("module", ["race", "race_timing", "race_pane", "speeds"])
def test_race_doctests(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(f"viz.{module}")).failed == 0
