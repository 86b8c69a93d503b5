"""Adaptive speculation (serving/adaptive.py): the policies' choices worked out by hand, the
acceptance estimate, and an engine whose γ moves every step — greedy text unchanged, the draft
cache rebuilt on resume drafting exactly what a fresh one drafts, the cost probe."""

import doctest

import pytest

from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.generate import Decoder
from nanospec.serving import adaptive
from nanospec.serving.adaptive import (
    Acceptance,
    DisableByBatchSize,
    Fixed,
    Goodput,
    Policy,
    expected_tokens,
)
from nanospec.serving.engine import Engine, Output, Request
from nanospec.speculative import Speculator
from tests.statistical.laws import PROMPT, PROMPT_B, tiny_pair
from tests.test_engine import alone, loops, serve

COSTS = {0: 1.0, 1: 1.2, 2: 1.4, 4: 1.8}  # seconds a step, as a probe would measure them


class Scripted(Policy):
    """A policy that takes the γs it is given, in turn (the tests' way to force a schedule)."""

    def __init__(self, schedule):
        self.schedule, self.gammas, self.taken = list(schedule), tuple(set(schedule)), 0

    def choose(self, live, acceptance):
        self.taken += 1
        return self.schedule[(self.taken - 1) % len(self.schedule)]


def counted(accepted: int, rejected: int) -> Acceptance:
    a = Acceptance(decay=1.0)
    a.add(
        [Output(0, [], False, 4, 4)] * (accepted // 4 - rejected)
        + [Output(0, [], False, 4, 0)] * rejected
    )
    return a


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def test_doctests():
    assert doctest.testmod(adaptive).failed == 0


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(1.0, 4) == 5.0 and expected_tokens(0.3, 0) == 1.0


def test_acceptance_counts_rejections_not_drafts_thrown_away():
    a = Acceptance(decay=1.0)
    assert a.alpha is None  # nothing judged yet
    # 3 + 0 accepted of 4 + 4 drafted: one rejection; α = 3 / (3 + 1), not 3 / 8
    a.add([Output(0, [1], False, 4, 3), Output(1, [1, 2, 3], False, 0, 0)])
    assert a.alpha == pytest.approx(3 / 4)


def test_rounds_without_drafts_count_as_one_token():
    """Prompt lookup drafts all or nothing: α̂ is measured where it drafted, π̂ says how
    often it did, and a round's tokens are 1 + π̂ (E(α̂, γ) − 1). Plain steps (γ = 0) are
    not rounds that found nothing, so they leave both alone."""
    a = Acceptance(decay=1.0)
    # two slots, four drafting steps: each slot drafted (4 drafts, 3 accepted) in one of two
    a.add([Output(0, [1, 2, 3, 4], False, 4, 3), Output(1, [5], False, 0, 0)])
    a.add([Output(0, [1], False, 0, 0), Output(1, [5, 6, 7, 8], False, 4, 3)])
    a.add([Output(0, [1], False, 0, 0), Output(1, [9], False, 0, 0)], drafting=False)
    assert a.alpha == pytest.approx(3 / 4) and a.proposing == pytest.approx(1 / 2)
    assert a.tokens(4) == pytest.approx(1 + (expected_tokens(0.75, 4) - 1) / 2)
    assert a.tokens(0) == 1.0
    a.add([Output(0, [], True, 0, 0)])  # a slot that ended with no new token: no round
    assert a.proposing == pytest.approx(1 / 2)
    # α̂ = 0.75 with drafts in every round (the draft model): E = 3.05 tokens for a round
    # that costs 2.5 plain steps, so γ = 4. Drafts in half the rounds: 1 + 2.05 / 2 = 2.03
    # tokens for the same cost, so plain decoding.
    costs = {0: 1.0, 4: 2.5}
    every = counted(accepted=28, rejected=4)
    assert (every.alpha, every.proposing) == (0.75, 1.0)
    assert Goodput(gammas=(0, 4), costs=costs).choose(8, every) == 4
    assert Goodput(gammas=(0, 4), costs=costs).choose(8, a) == 0


def test_goodput_chooses_by_the_cost_model():
    policy = Goodput(gammas=(0, 1, 2, 4), costs=COSTS)
    # α = 0.9: E/cost = 1.0, 1.58, 1.94, 2.28 -> γ = 4; α = 0.1: 1.0, 0.92, 0.79, 0.62 -> 0
    assert policy.choose(8, counted(accepted=36, rejected=4)) == 4
    assert policy.choose(8, counted(accepted=4, rejected=36)) == 0


def test_goodput_explores_after_plain_steps_and_needs_a_margin_to_switch():
    policy = Goodput(gammas=(0, 4), costs={0: 1.0, 4: 2.0}, explore=3, margin=0.1)
    low = counted(accepted=4, rejected=36)  # α = 0.1: plain decoding wins
    assert [policy.choose(8, low) for _ in range(5)] == [0, 0, 0, 4, 0]  # 4: a look again
    # α where γ = 4 promises 1.05× the goodput of plain steps: below the margin, stay plain
    edge = Acceptance(decay=1.0)
    edge.accepted, edge.rejected = 55.0, 45.0  # α = 0.55: E = 2.11 tokens for 2× the cost
    assert 1.0 < policy.goodput(4, edge) / policy.goodput(0, edge) < 1.1
    assert policy.choose(8, edge) == 0
    with pytest.raises(UserError, match="probe"):
        Goodput().choose(1, low)


def test_goodput_costs_follow_the_trimmed_mean_of_recent_steps():
    policy = Goodput(gammas=(0, 4), costs={0: 1.0, 4: 2.0}, window=3)
    policy.observe(4, 9.0)  # one slow step: the mean of (2, 9) is 5.5 ...
    policy.observe(4, 2.0)  # ... and with a normal one, (2, 9, 2) trimmed -> 2 again
    assert policy.costs == {0: 1.0, 4: 2.0}
    policy.observe(0, 1.5)
    policy.observe(0, 1.5)
    assert policy.costs[0] == 1.5
    # Two kinds of step, wide passes (2.0) and rounds nobody drafted in (1.0): the cost is
    # their average, where a median would take the majority's.
    mixed = Goodput(gammas=(0, 4), costs={0: 1.0, 4: 2.0}, window=7)
    for t in (1.0, 2.0, 1.0, 2.0, 1.0, 1.0):
        mixed.observe(4, t)
    assert mixed.costs[4] == pytest.approx((2.0 + 1.0 + 2.0 + 1.0 + 1.0) / 5)


def test_the_time_between_steps_is_a_cost_every_gamma_pays():
    """A server's own work between steps (handing out tokens, streaming) is paid once a step:
    added to every γ's cost, it favours the round that emits more tokens. Here γ = 4 yields
    2.31 tokens for 2.5× a plain step's time — a loss on the step costs alone, a win once
    each step also carries 2 s of the caller's work: 2.31 / 4.5 > 1.0 / 3.0."""
    a = Acceptance(decay=1.0)
    a.accepted, a.rejected = 1.5, 1.0  # α̂ = 0.6: E(0.6, 4) = 2.31
    policy = Goodput(gammas=(0, 4), costs={0: 1.0, 4: 2.5})
    assert policy.choose(8, a) == 0
    for gap in (2.0, 2.0, 50.0):  # one long gap (requests admitted) does not move the median
        policy.between(gap)
    assert (
        policy.overhead == 2.0
        and Goodput(gammas=(0, 4), costs={0: 1.0, 4: 2.5}, overhead=2.0, last=0).choose(8, a) == 4
    )


def test_the_other_policies():
    assert [DisableByBatchSize(4, 8).choose(n, Acceptance()) for n in (1, 7, 8, 32)] == [4, 4, 0, 0]
    assert Fixed(3).choose(64, Acceptance()) == 3 and Fixed(3).gammas == (3,)


def test_an_engine_whose_gamma_moves_keeps_greedy_text(pair):
    (cfg, g, p), draft = pair
    loop = Speculator(
        graphdef=g, cfg=cfg, drafter=DraftModel(draft[1], draft[0]), gamma=3, eos_id=-1
    )
    requests = [Request(PROMPT, 11, 0.0), Request(PROMPT_B, 9, 0.0), Request(PROMPT_B[:2], 8, 0.0)]
    want = [alone(loops(pair)["ar"], pair, r) for r in requests]
    policy = Scripted([0, 0, 3, 1, 0, 2, 3])
    engine = Engine(loop, p, draft[2], slots=2, policy=policy)
    got = serve(engine, {0: requests[:2], 2: requests[2:]})
    assert [got[i] for i in range(3)] == want
    assert set(engine.steps_at) == {0, 1, 2, 3} and engine.step_programs == 4


def test_drafting_resumes_from_a_rebuilt_cache_as_from_a_fresh_prompt(pair):
    """After plain steps the draft model's cache is rebuilt: its first drafts (greedy) are
    judged exactly like those of a fresh request whose prompt is the text so far."""
    (cfg, g, p), draft = pair
    loop = Speculator(
        graphdef=g, cfg=cfg, drafter=DraftModel(draft[1], draft[0]), gamma=3, eos_id=-1
    )
    resumed = Engine(loop, p, draft[2], slots=1, policy=Scripted([3, 0, 0, 0, 3]))
    resumed.insert(Request(PROMPT, 12, 0.0))
    steps = [resumed.step() for _ in range(5)]
    so_far = PROMPT + [t for s in steps[:4] for t in s[0].tokens]
    fresh = Engine(loop, p, draft[2], slots=1, policy=Scripted([3]))
    fresh.insert(Request(so_far, 12, 0.0))
    first = fresh.step()[0]
    assert (steps[4][0].tokens, steps[4][0].accepted) == (first.tokens, first.accepted)
    assert [s[0].drafted for s in steps] == [3, 0, 0, 0, 3]


def test_the_probe_measures_every_gamma_and_leaves_the_engine_idle(pair):
    (cfg, g, p), draft = pair
    loop = Speculator(
        graphdef=g, cfg=cfg, drafter=DraftModel(draft[1], draft[0]), gamma=3, eos_id=-1
    )
    policy = Goodput(gammas=(0, 1, 3))
    engine = Engine(loop, p, draft[2], slots=2, policy=policy)
    costs = engine.probe(PROMPT, steps=2)
    assert set(costs) == {0, 1, 3} and policy.costs == costs and min(costs.values()) > 0
    assert not engine.busy and engine.acceptance.alpha is None and engine.steps_at == {}
    assert serve(engine, {0: [Request(PROMPT, 6, 0.0)]}) == {
        0: alone(loops(pair)["ar"], pair, Request(PROMPT, 6, 0.0))
    }  # serves as before
    # Each step after the first, while the request ran, told the policy the gap before it.
    assert len(policy.gaps) == sum(engine.steps_at.values()) - 1 and policy.overhead >= 0


def test_adaptive_speculation_needs_a_chain_drafter(pair):
    (cfg, g, p), draft = pair
    for name in ("ssd", "tree"):
        with pytest.raises(UserError, match="--method draft or ngram"):
            Engine(loops(pair)[name], p, draft[2], slots=1, policy=Goodput())
    with pytest.raises(UserError, match="--method draft or ngram"):
        Engine(Decoder(graphdef=g, cfg=cfg, eos_id=-1), p, (), slots=1, policy=Goodput())
