"""SSD's speculation cache in the demo (viz/cache_panel.py) and the `ssd` fields of a Round.

Replay tests use data/capital-ssd.jsonl (conftest.py): round 1 misses (no cache yet) and ends
(0, ' Par'), which it cached; rounds 2–4 and 8–9 hit, 5–7 miss. The lit branch must be the
entry of round r's cache equal to round r's outcome, and round r+1 must then say it hit: the
event's `hit` looks back a round while its `cache` looks ahead one, and mixing the two up
would light the wrong branch. One live run on the tiny models checks the wiring end to end.
"""

import pytest

from nanospec.decode import Bundle
from nanospec.errors import UserError
from nanospec.trace import read_jsonl
from tests.viz.conftest import SSD_TRACE
from tests.viz.pilot import run, screen_text, wait_until, widget_text
from viz.app import DemoApp
from viz.cache_panel import CachePanel
from viz.draw import token
from viz.help_screen import HelpScreen
from viz.playhead import Phase
from viz.rounds import load_recording, round_from_events
from viz.settings import Settings


def replay(recording, **kw):
    return DemoApp(recording, source="replay", autoplay=False, **kw)


def lit(spec) -> str:
    """How the panel draws the branch the next round drafts from."""
    return "◆" + token(spec.cache[spec.branch][2])


def test_rounds_carry_the_ssd_event_and_its_cache_predicts_the_next_hit(ssd_recording):
    rounds = ssd_recording.rounds
    assert all(r.ssd is not None and len(r.ssd.cache) == 10 for r in rounds)
    first = rounds[0].ssd
    assert (first.hit, first.source, first.outcome) == (False, "backup", (0, 1519))
    assert first.cache[first.branch] == (0, 1519, " Par")
    for r in rounds:  # the outcome is how THIS round ended: k accepted, then its ↻ or ★ token
        assert r.ssd.outcome == (r.accepted, r.extra.token)
        assert r.ssd.source == ("cache" if r.ssd.hit else "backup")
    # round r's outcome is in round r's cache exactly when round r+1 drafted from the cache
    cached = [r.ssd.branch is not None for r in rounds[:-1]]
    assert cached == [r.ssd.hit for r in rounds[1:]]
    assert [r.ssd.hit for r in rounds] == [False, True, True, True, False, False, False, True, True]


def test_round_from_events_reads_the_ssd_fields_and_older_traces_have_none(recording):
    rnd = round_from_events([e for e in read_jsonl(SSD_TRACE) if e.get("round") == 1])
    assert rnd.ssd.hit and rnd.ssd.outcome == (4, 922) and rnd.ssd.branch == 8
    assert rnd.ssd.cache[8] == (4, 922, " Spain")
    assert all(r.ssd is None for r in recording.rounds)  # a draft trace: no ssd events


def test_a_malformed_ssd_event_is_one_clear_sentence(tmp_path):
    lines = SSD_TRACE.read_text().splitlines()
    broken = [line.replace('"outcome": [0, 1519]', '"outcome": "Paris"') for line in lines]
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(broken) + "\n")
    with pytest.raises(UserError, match="round 1 is incomplete or malformed"):
        load_recording(path)


def test_the_panel_lights_the_branch_that_hit_round_after_round_at_80_columns(ssd_recording):
    rounds = ssd_recording.rounds

    async def go():
        app = replay(ssd_recording, start_round=1)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(CachePanel)
            assert panel.display
            for r, rnd in enumerate(rounds):
                await pilot.pause()
                assert app.pos.round == r and app.pos.step(rounds).phase == Phase.EXTRA
                shown, screen, title = widget_text(panel), screen_text(app), panel.border_title
                assert all(f"k={k}" in screen for k in range(5))  # every k of the cache
                # where this round's drafts came from, and the hit rate of rounds 2..r+1
                hits = sum(x.ssd.hit for x in rounds[1 : r + 1])
                assert (
                    "◆ hit"
                    if rnd.ssd.hit
                    else "◇ no cache yet"
                    if r == 0
                    else "◇ miss, the neural backup drafted"
                ) in title
                assert (f"hits {hits}/{r}" in title) if r else "hits" not in title
                if rnd.ssd.branch is not None:  # the lit branch is the outcome, whole
                    assert lit(rnd.ssd) in screen and shown.count("◆") == 2  # branch + sentence
                    assert (
                        "the run ends here"
                        if r == len(rounds) - 1
                        else f"round {r + 2} drafts from it"
                    ) in screen
                else:
                    assert "◆" not in shown and f"not cached: round {r + 2} misses" in screen
                await pilot.press("right_square_bracket")
            await pilot.press("left")  # the last round before its verdict: nothing lit yet
            assert "◆" not in widget_text(panel)

    run(go())


def test_the_first_round_names_its_branches_whole_and_the_outcome(ssd_recording):
    """Round 1 at 80×24 (two lines): every guess shows whole, ' Par' lit under k = 0."""

    async def go():
        app = replay(ssd_recording, start_round=1)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            lines = [line.strip() for line in screen_text(app).splitlines() if "k=" in line]
            assert lines == [
                "k=0 ◆' Par' ' Athens'  k=1 'akar' 'and'  k=2 ',' ')'  k=3 ' The' ' France'",
                "k=4 ' person' ' map'  ◆ (0, ' Par') cached: round 2 drafts from it.",
            ]
            await pilot.press("left", "left")  # judging: the cache is built, the verdict not in
            assert "◆" not in widget_text(app.query_one(CachePanel))
            await pilot.press(*["left"] * 5)  # drafting: the cache is not built yet
            assert "pre-drafts round 2" in widget_text(app.query_one(CachePanel))

    run(go())


def test_a_tall_screen_gives_the_whole_sentence_and_the_help_explains_the_marks(ssd_recording):
    async def go():
        app = replay(ssd_recording, start_round=5)
        async with app.run_test(size=(80, 40)) as pilot:
            screen = screen_text(app)
            assert "for round 6:" in screen and "' Hungary'" in screen  # whole, not cut
            assert "◇ outcome k=3, t*=' is' not cached: round 6 is a miss" in screen
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            lines = screen_text(app).splitlines()
            for symbol, word in (("◆", "hit:"), ("◇", "miss:")):
                assert any(symbol in line and word in line for line in lines), symbol

    run(go())


def test_a_draft_run_has_no_cache_panel(recording):
    async def go():
        app = replay(recording, start_round=1)
        async with app.run_test(size=(80, 24)) as pilot:
            assert not app.query_one(CachePanel).display
            assert "cache" not in screen_text(app) and "◆" not in screen_text(app)
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            assert "◆" not in screen_text(app)  # its help leaves SSD's marks out

    run(go())


def test_a_live_ssd_run_draws_its_cache_and_the_method_key_takes_it_away(tiny_ckpt_dir):
    """On the tiny models the target and draft share weights, so greedy SSD guesses every
    bonus: every round after the first hits."""

    async def go():
        app = DemoApp(
            bundle=Bundle.load(tiny_ckpt_dir),
            autoplay=False,
            settings=Settings(method="ssd", max_new=12, temperature=0.0),
        )
        async with app.run_test(size=(80, 24)) as pilot:
            assert app.query_one(CachePanel).display
            await wait_until(pilot, lambda: app.done or bool(app.error), what="the ssd run")
            assert not app.error, app.error
            assert app.recording.start["backup"] == "neural"  # as generate --trace records it
            rounds = app.rounds
            assert len(rounds) > 1 and all(r.ssd is not None for r in rounds)
            assert [r.ssd.hit for r in rounds] == [False] + [True] * (len(rounds) - 1)
            await pilot.press("right_square_bracket")  # round 2, fully judged
            assert lit(rounds[1].ssd) in screen_text(app)
            assert "◆ hit" in app.query_one(CachePanel).border_title
            await pilot.press("m")  # ssd -> draft: the panel goes
            assert app.settings.method == "draft" and not app.query_one(CachePanel).display
            await wait_until(pilot, lambda: app.done or bool(app.error), what="the draft run")

    run(go())
