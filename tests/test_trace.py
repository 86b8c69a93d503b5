"""Trace events: the schema, the metrics (known answers), and reading traces back safely."""

import doctest
import json

import jax
import pytest
from flax import nnx

import nanospec.trace
from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.generate import pad_prompts
from nanospec.model import GPT, ModelConfig
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams
from nanospec.speculative import Speculator
from nanospec.trace import (
    events_from_step,
    metrics,
    read_jsonl,
    run_end,
    run_start,
    summarize,
    write_jsonl,
)


def test_metrics_doctest():
    assert doctest.testmod(nanospec.trace).failed == 0


def test_metrics_worked_example():
    # γ = 3; rounds accepted 3, 0, 1 drafts; 4 + 1 + 2 = 7 tokens out
    m = metrics([1, 1, 0, 1], generated=7)
    assert m["rounds"] == 3 and m["drafted"] == 9 and m["accepted"] == 4
    assert m["acceptance_rate"] == pytest.approx(4 / 9)
    assert m["mean_acceptance_length"] == pytest.approx(1 + 4 / 3)
    assert m["per_position_acceptance"] == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert m["tokens_per_target_call"] == pytest.approx(7 / 3)
    assert m["target_calls_saved"] == 4


@pytest.fixture(scope="module")
def run(tiny_tokenizer):
    V = tiny_tokenizer.vocab_size
    cfg = ModelConfig.tiny(vocab_size=V, n_ctx=48)
    g, p = nnx.split(GPT(cfg, nnx.Rngs(0)))
    dcfg = ModelConfig(name="d", vocab_size=V, n_ctx=48, n_layer=1, n_head=2, d_model=16)
    dg, dp = nnx.split(GPT(dcfg, nnx.Rngs(1)))
    prompt = "The capital of"
    ids = tiny_tokenizer.encode_prompt(prompt)
    tokens, lengths = pad_prompts([ids, ids], cfg.n_ctx)
    sp = SamplingParams.make(1.0)
    events = [run_start(tiny_tokenizer, prompt, ids, "draft", 3, 1.0, 0, 1.0, 0, "tiny", "d", 2)]
    spec = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=3, eos_id=-1)
    last = None
    for r, rnd in enumerate(spec.rounds(p, dp, tokens, lengths, jax.random.key(0), sp, 10)):
        events += events_from_step(rnd.trace, tiny_tokenizer, r, rnd.seconds)
        last = rnd.state
    events.append(run_end(events))
    fused = spec.run(p, dp, tokens, lengths, jax.random.key(0), sp, 10)
    return events, last, fused, lengths


def test_every_round_reads_draft_verify_judgement_then_extra_token(run):
    events, *_ = run
    rounds = {}
    for e in events:
        if "round" in e:
            rounds.setdefault((e["row"], e["round"]), []).append(e["type"])
    for types in rounds.values():
        n_acc = types.count("accept")
        assert types[:3] == ["draft"] * 3 and types[3] == "verify"
        judged = types[4:7]
        assert judged == ["accept"] * n_acc + (["reject"] if n_acc < 3 else []) + ["discard"] * (
            3 - n_acc - 1 if n_acc < 3 else 0
        )
        assert types[7] == ("bonus" if n_acc == 3 else "resample") and types[8] == "round_end"


def test_events_are_json_and_carry_the_schema(run, tmp_path):
    events, *_ = run
    assert all(e["schema"] == 2 for e in events)
    write_jsonl(tmp_path / "t.jsonl", events)
    assert read_jsonl(tmp_path / "t.jsonl") == json.loads(json.dumps(events))


def test_summary_matches_the_fused_drivers_counters(run):
    events, stepwise, (fused, stats), lengths = run
    s = summarize(events)
    hist = stats.hist.sum(0).tolist()
    assert s["acceptance_histogram"] == hist
    assert s["generated_tokens"] == sum(len(o) for o in generated(fused, lengths))
    assert events[-1]["summary"]["rounds"] == s["rounds"] == sum(hist)


def test_emitted_tokens_rebuild_the_generated_text(run):
    events, stepwise, _, lengths = run
    for row, out in enumerate(generated(stepwise, lengths)):
        emitted = [
            t for e in events if e["type"] == "round_end" and e["row"] == row for t in e["emitted"]
        ]
        assert emitted == out


def test_accept_and_reject_events_agree_with_u_and_the_ratio(run):
    events, *_ = run
    for e in events:
        if e["type"] == "accept":
            assert e["u"] * e["q"] < e["p"]
        if e["type"] == "reject":
            assert e["u"] * e["q"] >= e["p"]


@pytest.mark.parametrize(
    "content,match",
    [
        (None, "not found"),
        ('{"schema": 2, "type": "run_start"}\n{"schema": 2, "ty', "not valid JSON"),
        ('{"schema": 3, "type": "run_start"}\n', "schema 3"),
        ('{"schema": 1, "type": "draft"}\n', "run_start"),
        ("", "run_start"),
    ],
)
def test_a_bad_trace_file_is_one_clear_error(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=match):
        read_jsonl(path)
