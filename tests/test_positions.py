"""Acceptance by position (measure/positions.py): every drafter, on tiny models.

Equivalence: at every start the measured drafts are the ones the loop's own first round
drafts from that prompt, and the accepted count is the one its verify rule returns at T = 0.
Known answers: a draft model identical to the target accepts everything; prompt lookup on a
repeating text copies it exactly (the docstring's example); shares worked out by hand.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from nanospec.decode import Bundle, make_loop
from nanospec.drafters import DraftModel, PromptLookup
from nanospec.errors import UserError
from nanospec.generate import pad_prompts
from nanospec.heads.modules import KINDS, HeadConfig, build
from nanospec.measure.positions import (
    ByPosition,
    acceptance_by_position,
    greedy_text,
    text_features,
)
from nanospec.model import GPT
from nanospec.sampling import GREEDY

GAMMA = 3
METHODS = ("draft", "ngram", *KINDS)
PROMPTS = ["The capital of", "Repeat after me: the quick", "def capital_of("]


@pytest.fixture(scope="module")
def bundle(tiny_tokenizer, tiny_model):
    """The tiny target, a draft model of its shape with other weights, and untrained heads."""
    cfg = tiny_model[0]
    models = {"target": tiny_model, "draft": (cfg, *nnx.split(GPT(cfg, nnx.Rngs(1))))}
    for kind in KINDS:
        hc = HeadConfig.for_target(kind, cfg)
        models[kind] = (hc, *nnx.split(build(hc)))
    return Bundle(tiny_tokenizer, models)


@pytest.fixture(scope="module")
def text(bundle):
    ids = [bundle.tok.encode_prompt(p) for p in PROMPTS]
    text, _ = greedy_text(bundle, "ar", ids, 10)
    return text


def test_the_autoregressive_text_is_greedy_and_a_changed_token_is_not(text):
    assert text.is_greedy()
    seq = text.seq.copy()
    p = text.prompt_lengths[1]
    seq[1, p + 2] = text.argmax[1, p + 1] + 1  # a continuation token that is not the argmax
    assert not text._replace(seq=seq).is_greedy()


@pytest.mark.parametrize("method", METHODS)
def test_drafts_and_acceptance_are_the_loops_first_round_at_every_start(bundle, text, method):
    cfg, _, params = bundle.models["target"]
    pos = acceptance_by_position([bundle.drafter(method)], text, GAMMA)
    b, j = np.nonzero(pos.valid)
    assert len(b) == pos.rounds > 10
    # The ground truth: the loop itself, its prompt the text up to each start.
    prompts = [text.seq[row, :start].tolist() for row, start in zip(b, pos.starts[b, j])]
    loop, dparams = make_loop(bundle, method, GAMMA)
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    loop.check(lengths, GAMMA + 1)

    @jax.jit
    def first_round(params, dparams, tokens, lengths):  # prefill, one round: its StepTrace
        state = loop.prefill(params, dparams, tokens, lengths, jax.random.key(0))
        return loop.step(params, dparams, state, GREEDY, GAMMA + 1)[1]

    first = first_round(params, dparams, tokens, lengths)
    proposed = np.arange(GAMMA) < np.asarray(first.n_draft)[:, None]  # (rounds, γ)
    drafts = pos.drafts[b, j, 0]  # (rounds, γ)
    np.testing.assert_array_equal(
        np.where(proposed, drafts, -1), np.where(proposed, np.asarray(first.drafts), -1)
    )
    accepted = np.cumprod(pos.right[b, j, 0], axis=-1).sum(-1)  # (rounds,)
    np.testing.assert_array_equal(accepted, np.asarray(first.verdict.n_accepted))
    # The truth is the text's own tokens after each start.
    for r, (row, start) in enumerate(zip(b, pos.starts[b, j])):
        assert pos.truth[row, j[r]].tolist() == text.seq[row, start : start + GAMMA].tolist()


def test_a_draft_model_identical_to_the_target_accepts_every_draft(bundle, text):
    cfg, graphdef, params = bundle.models["target"]
    same = (DraftModel(graphdef, cfg), params)
    pos = acceptance_by_position([bundle.drafter("draft"), same], text, GAMMA)
    np.testing.assert_array_equal(pos.accepted[1], np.ones(GAMMA))
    np.testing.assert_array_equal(pos.reached[1], np.ones(GAMMA))
    assert pos.tokens_per_round[1] == GAMMA + 1
    assert pos.accepted.shape == pos.top1.shape == (2, GAMMA)
    assert (pos.accepted[0] < 1).any()  # the other draft model does not


def test_prompt_lookup_copies_a_repeating_text_as_the_docstring_says(tiny_model):
    cfg, graphdef, params = tiny_model
    a, b, c = 5, 6, 7
    text = text_features(graphdef, params, [[a, b, c, a], [a, b]], [[b, c, a, b], [b, b]])
    ngram = (PromptLookup(cfg.vocab_size), ())
    pos = acceptance_by_position([ngram], text, 4)
    assert pos.starts.shape == (2, 1) and pos.valid.tolist() == [[True], [False]]
    assert pos.drafts[0, 0, 0].tolist() == [b, c, a, b]
    np.testing.assert_array_equal(pos.accepted, [[1, 1, 1, 1]])
    # At "a b" the last token never came before: no match, so no drafts — though repeating
    # it (lookup's fallback) would have been right.
    short = acceptance_by_position([ngram], text, 2)
    assert short.valid[1, 0] and short.drafts[1, 0, 0].tolist() == short.truth[1, 0].tolist()
    assert not short.right[1, 0].any()


def test_the_shares_by_hand():
    right = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], bool)  # 4 rounds, γ = 3
    pos = ByPosition(
        starts=np.zeros((1, 4), int),
        valid=np.ones((1, 4), bool),
        truth=np.zeros((1, 4, 3), int),
        drafts=np.zeros((1, 4, 1, 3), int),
        right=right[None, :, None],
    )  # (B, J, D, γ) = (1, 4, 1, 3)
    np.testing.assert_allclose(pos.top1, [[0.75, 0.75, 0.75]])
    np.testing.assert_allclose(pos.accepted, [[0.75, 0.5, 0.25]])
    np.testing.assert_allclose(pos.reached, [[0.75, 2 / 3, 0.5]])
    np.testing.assert_allclose(pos.tokens_per_round, [2.5])
    columns, rows = pos.table(["x"])
    assert columns == ["", "draft 1", "draft 2", "draft 3", "tokens / round"]
    assert rows == [["x", "0.75", "0.50", "0.25", "2.50"]]
    assert pos.table(["x"], "reached")[1] == [["x", "0.75", "0.67", "0.50"]]


def test_bad_gammas_are_user_errors(bundle, text):
    with pytest.raises(UserError, match="at most 4"):
        acceptance_by_position([bundle.drafter("medusa")], text, 5)
    with pytest.raises(UserError, match="at least 1"):
        acceptance_by_position([bundle.drafter("draft")], text, 0)
    with pytest.raises(UserError, match="tokens long"):
        acceptance_by_position([bundle.drafter("draft")], text, 11)
