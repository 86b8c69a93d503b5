"""Rounds with fewer than γ drafts (drafters.py `draft_length`): prompt lookup with no match
proposes none, and the round is a one-token decode step (speculative.target_pass).

Known answers for the verify rule with n_draft, then the loop end to end on a tiny target:
the same tokens from both drivers, greedy output equal to autoregressive, counters that
agree with the trace, and a replayable zero-draft round. Exactness of the sampled path is
the statistical suite's job (test_drafters_law.py runs prompt lookup through layers 2-3 and
checks there that its runs include rounds without drafts).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec.drafters import PromptLookup
from nanospec.generate import generate, pad_prompts
from nanospec.model import GPT, ModelConfig
from nanospec.rounds import generated
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator
from nanospec.trace import metrics
from nanospec.verify import verify_row
from viz.playhead import Phase, Position, caption, chart, reveal, steps_of
from viz.rounds import round_from_events

V = 40
HOT = SamplingParams.make(0.9, 0, 0.95)


def onehot(ids):
    return jax.nn.one_hot(jnp.asarray(ids), V)


@pytest.mark.parametrize("n_draft", [0, 1, 2, 3])
def test_verify_judges_only_the_proposed_drafts(n_draft):
    """Every draft equals the target's certain choice, so all proposed ones are accepted; the
    padding after them never is, and the bonus comes from p right after the last proposed."""
    drafts = jnp.array([5, 6, 7])
    p = onehot([5, 6, 7, 8])  # (γ+1, V)
    v = verify_row(jax.random.key(0), drafts, onehot([5, 6, 7]), p, jnp.int32(n_draft))
    assert int(v.n_accepted) == n_draft and bool(v.is_bonus)
    assert int(v.token) == [5, 6, 7, 8][n_draft]
    np.testing.assert_array_equal(v.extra_probs, p[n_draft])


def test_a_rejection_inside_the_proposed_drafts_still_resamples():
    drafts = jnp.array([5, 9, 7])  # x₂ = 9 has target probability 0
    p = onehot([5, 6, 7, 8])
    v = verify_row(jax.random.key(0), drafts, onehot(drafts), p, jnp.int32(2))
    assert int(v.n_accepted) == 1 and not bool(v.is_bonus) and int(v.token) == 6


@pytest.fixture(scope="module")
def target():
    cfg = ModelConfig.tiny(vocab_size=V, n_ctx=48)
    return (cfg, *nnx.split(GPT(cfg, nnx.Rngs(0))))


# Row 0's last token (9) never occurred before, and neither does row 1's (30): the first round
# has no drafts in any row, so the loop takes the one-token branch. Later rounds mix.
PROMPTS = [[1, 2, 1, 2, 9], [3, 4, 5, 3, 4, 5, 30]]


def fused(target, sp, gamma=3, max_new=14, seed=0, drafter=None):
    cfg, g, p = target
    tokens, lengths = pad_prompts(PROMPTS, cfg.n_ctx)
    spec = Speculator(
        graphdef=g, cfg=cfg, drafter=drafter or PromptLookup(V), gamma=gamma, eos_id=-1
    )
    state, stats = spec.run(p, (), tokens, lengths, jax.random.key(seed), sp, max_new)
    return generated(state, lengths), state, stats


@pytest.mark.parametrize("skip", [True, False])
def test_greedy_lookup_equals_greedy_autoregressive(target, skip):
    cfg, g, p = target
    tokens, lengths = pad_prompts(PROMPTS, cfg.n_ctx)
    ar, _ = generate(g, p, cfg, tokens, lengths, jax.random.key(0), GREEDY, 14, -1)
    spec, *_ = fused(target, GREEDY, drafter=PromptLookup(V, skip_unmatched=skip))
    assert spec == ar


def test_drivers_agree_and_the_counters_match_the_trace(target):
    from nanospec.trace import events_from_step, summarize

    cfg, g, p = target
    outs, state, stats = fused(target, HOT, seed=3)
    tokens, lengths = pad_prompts(PROMPTS, cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=PromptLookup(V), gamma=3, eos_id=-1)
    steps = list(spec.rounds(p, (), tokens, lengths, jax.random.key(3), HOT, 14))
    assert generated(steps[-1].state, lengths) == outs
    drafted = np.array(
        [np.asarray(r.trace.n_draft) * np.asarray(r.trace.live) for r in steps]
    )  # (R, B)
    assert np.all(drafted[0] == 0), "the first round has nothing to copy"
    assert set(np.unique(drafted)) == {0, 3}, "prompt lookup proposes all γ or nothing"
    np.testing.assert_array_equal(np.asarray(stats.drafted), drafted.sum(0))
    np.testing.assert_array_equal(np.asarray(steps[-1].stats.drafted), drafted.sum(0))
    events = [e for i, r in enumerate(steps) for e in events_from_step(r.trace, _Tok(), i)]
    m = metrics(*stats.counters(state))
    assert summarize(events)["drafted"] == m["drafted"] == drafted.sum()
    assert m["acceptance_rate"] == pytest.approx(m["accepted"] / drafted.sum())


class _Tok:  # events need token texts; any will do here
    def token_str(self, i):
        return f"<{i}>"

    def decode(self, ids):
        return "".join(self.token_str(i) for i in ids)


def test_a_zero_draft_round_replays(target):
    from nanospec.trace import events_from_step

    cfg, g, p = target
    tokens, lengths = pad_prompts(PROMPTS[:1], cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=PromptLookup(V), gamma=3, eos_id=-1)
    trace = next(spec.rounds(p, (), tokens, lengths, jax.random.key(0), HOT, 8)).trace
    events = events_from_step(trace, _Tok(), 0)
    assert [e["type"] for e in events] == ["verify", "bonus", "round_end"]
    rnd = round_from_events(events)
    assert rnd.gamma == 0 and rnd.accepted == 0 and len(rnd.emitted) == 1
    assert [s.phase for s in steps_of(rnd)] == [Phase.VERIFY, Phase.EXTRA, Phase.COMMIT]
    for step in steps_of(rnd):
        frame = reveal(rnd, step)
        assert len(frame.slots) == 1
        chart(frame, 1)
    assert "prompt lookup found no earlier match" in caption(rnd, steps_of(rnd)[0], "ngram")
    assert Position().step([rnd]).phase == Phase.VERIFY
