"""The step-by-step model of a round (viz/playhead.py): known answers on a hand-made round.

The round, worked out by hand (γ = 3): the draft proposes ' Paris' (q .6), ' and' (q .5),
' the' (q .3); the target gives p = .9, .1, .2. x₁: u = .2 < p/q = 1.5 → ✓. x₂: u = .7 ≥ p/q =
.2 → ✗, so x₃ is discarded ·, and ' is' is resampled ↻ from the residual. Eight steps:
DRAFT 1-3, VERIFY, JUDGE 1-2, EXTRA, COMMIT.
"""

import doctest

import pytest

import viz.draw
import viz.settings
from viz.playhead import (
    Phase,
    Position,
    Step,
    at_phase,
    back,
    chart,
    forward,
    last,
    next_round,
    prev_round,
    reveal,
    steps_of,
)
from viz.rounds import round_from_events


def top(*pairs):
    return [[i, t, p] for i, t, p in pairs]


def make_round(r=0, accepted=1, bonus=False):
    """γ = 3 round events; `accepted` drafts pass, then a rejection (or, with bonus, none)."""
    head = {"schema": 2, "round": r, "row": 0}
    drafts = [(11, " Paris", 0.6), (12, " and", 0.5), (13, " the", 0.3)]
    p = [0.9, 0.1, 0.2]
    ev = [
        {
            **head,
            "type": "draft",
            "index": i + 1,
            "position": 5 + i,
            "token": t,
            "text": x,
            "q": q,
            "q_top": top((t, x, q), (99, " x", 0.1)),
        }
        for i, (t, x, q) in enumerate(drafts)
    ]
    ev.append(
        {
            **head,
            "type": "verify",
            "p": p,
            "p_top": [
                top((11, " Paris", 0.9)),
                top((9, " is", 0.6), (16, " are", 0.2)),
                top((13, " the", 0.2)),
                top((14, " city", 0.7)),
            ],
        }
    )
    us = [0.2, 0.7, 0.1]
    for i, (t, x, q) in enumerate(drafts):
        kind = "accept" if i < accepted else ("reject" if i == accepted else "discard")
        e = {**head, "type": kind, "index": i + 1, "position": 5 + i, "token": t, "text": x}
        if kind != "discard":
            e.update(p=p[i], q=q, u=us[i], ratio=p[i] / q)
        ev.append(e)
    if bonus:
        ev.append(
            {
                **head,
                "type": "bonus",
                "position": 8,
                "token": 14,
                "text": " city",
                "p": 0.7,
                "top": top((14, " city", 0.7)),
            }
        )
        emitted, text = [11, 12, 13, 14], " Paris and the city"
    else:
        ev.append(
            {
                **head,
                "type": "resample",
                "position": 5 + accepted,
                "token": 9,
                "text": " is",
                "residual": 0.8,
                "p": 0.6,
                "q": 0.05,
                "top": top((9, " is", 0.8), (15, " was", 0.2)),
            }
        )
        emitted = [t for t, _, _ in drafts[:accepted]] + [9]
        text = "".join(x for _, x, _ in drafts[:accepted]) + " is"
    ev.append(
        {
            **head,
            "type": "round_end",
            "accepted": 3 if bonus else accepted,
            "drafted": 3,
            "emitted": emitted,
            "emitted_text": text,
            "length": 5 + len(emitted),
            "draft_ms": 2.0,
            "verify_ms": 3.0,
        }
    )
    return round_from_events(ev)


@pytest.fixture
def rnd():
    return make_round()


def test_helper_doctests():
    assert doctest.testmod(viz.draw).failed == 0
    assert doctest.testmod(viz.settings).failed == 0


def test_a_round_with_a_rejection_plays_as_eight_steps(rnd):
    phases = [(s.phase, s.k) for s in steps_of(rnd)]
    assert phases == [
        (Phase.DRAFT, 1),
        (Phase.DRAFT, 2),
        (Phase.DRAFT, 3),
        (Phase.VERIFY, 0),
        (Phase.JUDGE, 1),
        (Phase.JUDGE, 2),
        (Phase.EXTRA, 0),
        (Phase.COMMIT, 0),
    ]


def test_all_accepted_round_judges_every_draft_then_shows_the_bonus():
    r = make_round(accepted=3, bonus=True)
    assert [s.k for s in steps_of(r) if s.phase == Phase.JUDGE] == [1, 2, 3]
    frame = reveal(r, Step(0, Phase.EXTRA))
    assert [s.mark for s in frame.slots] == ["accept"] * 3 + ["bonus"]
    c = chart(frame, 4)
    assert c.chosen == 14 and c.p[0][1] == " city" and c.residual is None and "★" in c.title


def test_drafts_appear_one_at_a_time_with_q_and_no_p_before_verify(rnd):
    for k in (1, 2, 3):
        frame = reveal(rnd, Step(0, Phase.DRAFT, k))
        shown = [s for s in frame.slots[:3] if s.text is not None]
        assert [s.text for s in shown] == [" Paris", " and", " the"][:k]
        assert all(s.mark == "drafted" and s.p is None and s.q is not None for s in shown)
        assert frame.slots[3].mark == "hidden" and frame.focus == k
    verified = reveal(rnd, Step(0, Phase.VERIFY))
    assert [s.p for s in verified.slots[:3]] == [0.9, 0.1, 0.2]
    assert all(s.mark == "drafted" for s in verified.slots[:3])


def test_the_rejection_and_the_greyed_tail_appear_together(rnd):
    one = reveal(rnd, Step(0, Phase.JUDGE, 1))
    assert [s.mark for s in one.slots] == ["accept", "drafted", "drafted", "hidden"]
    two = reveal(rnd, Step(0, Phase.JUDGE, 2))
    assert [s.mark for s in two.slots] == ["accept", "reject", "discard", "hidden"]
    assert two.slots[1].u == 0.7 and two.slots[1].ratio == pytest.approx(0.2)
    assert "u = 0.70 ≥ p/q = 0.20" in two.caption and "rejected ✗" in two.caption
    assert "u = 0.20 < p/q = 1.50" in one.caption and "accepted ✓" in one.caption
    extra = reveal(rnd, Step(0, Phase.EXTRA))
    assert extra.slots[3].mark == "resample" and extra.slots[3].text == " is"
    assert "residual" in extra.caption


def test_only_the_commit_step_adds_the_round_to_the_text(rnd):
    assert reveal(rnd, Step(0, Phase.EXTRA)).committed == 0
    commit = reveal(rnd, Step(0, Phase.COMMIT))
    assert commit.committed == 1 and "+2 tokens from 1 target call" in commit.caption


def test_charts_show_the_residual_only_where_a_rejection_needs_it(rnd):
    judged = reveal(rnd, Step(0, Phase.JUDGE, 2))
    accepted = chart(judged, 1)
    assert accepted.residual is None and accepted.p is not None and accepted.marked == 11
    rejected = chart(judged, 2)
    assert rejected.residual[0][1] == " is" and rejected.chosen is None  # not drawn yet
    # the drafted token ranks below p's listed tokens here, yet the p chart still shows it
    assert [t[1:] for t in rejected.p] == [(" is", 0.6), (" are", 0.2), (" and", 0.1)]
    after = reveal(rnd, Step(0, Phase.EXTRA))
    assert chart(after, 2).chosen == 9
    assert chart(after, 4) == chart(after, 2)  # the ↻ row explains the same position as ✗
    assert chart(reveal(rnd, Step(0, Phase.DRAFT, 1)), 1).p is None  # p comes with verify


def test_forward_and_back_walk_every_step_of_every_round():
    rounds = [make_round(0), make_round(1, accepted=3, bonus=True), make_round(2, accepted=0)]
    pos, seen = Position(), [Position()]
    while (pos := forward(pos, rounds)) is not None:
        seen.append(pos)
    assert len(seen) == sum(len(steps_of(r)) for r in rounds) and seen[-1] == last(rounds)
    walked_back = [seen[-1]]
    while (p := back(walked_back[-1], rounds)) is not None:
        walked_back.append(p)
    assert walked_back == seen[::-1]


def test_round_jumps_land_on_the_fully_judged_step():
    rounds = [make_round(0), make_round(1, accepted=3, bonus=True)]
    nxt = next_round(Position(), rounds)
    assert nxt.round == 1 and nxt.step(rounds).phase == Phase.EXTRA
    assert next_round(nxt, rounds) is None
    assert prev_round(nxt, rounds) == at_phase(rounds, 0, Phase.EXTRA)
    assert prev_round(Position(), rounds) is None
