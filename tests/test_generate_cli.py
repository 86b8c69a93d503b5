"""`nanospec generate` as a new user meets it (issue 16): every method shows and traces its
rounds, many samples fit in memory, the context's end is said out loud, and the resampled
token's numbers are labelled by the law each comes from.

Driven through `main([...])` on the tiny untrained checkpoint folder (conftest.tiny_ckpt_dir,
n_ctx = 64), except where a decode-level argument (a memory budget) is needed.
"""

import json

import pytest

from nanospec.cli import main
from nanospec.cli.show import extra_numbers
from nanospec.decode import Bundle, decode, finish_reason
from nanospec.trace import read_jsonl, summarize

PROMPT = "The capital of"


def run(capsys, ckpt_dir, *args):
    try:
        code = main(["--checkpoints", str(ckpt_dir), *args])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bundle(tiny_ckpt_dir):
    return Bundle.load(tiny_ckpt_dir, ["target", "draft", "medusa"])


def test_show_works_for_the_default_autoregressive_method(capsys, tiny_ckpt_dir):
    code, out, err = run(
        capsys, tiny_ckpt_dir, "generate", "--prompt", PROMPT, "--show", "--max-new-tokens", "4"
    )
    assert code == 0, err
    steps = [line for line in out.splitlines() if line.startswith("step")]
    assert len(steps) == 4 and all("★" in s and "(p " in s for s in steps)


def test_an_autoregressive_trace_replays_as_rounds_without_drafts(capsys, tiny_ckpt_dir, tmp_path):
    path = tmp_path / "ar.jsonl"
    code, out, err = run(
        capsys,
        tiny_ckpt_dir,
        "generate",
        "--prompt",
        PROMPT,
        "--trace",
        str(path),
        "--max-new-tokens",
        "5",
        "--seed",
        "3",
    )
    assert code == 0, err
    events = read_jsonl(path)
    assert events[0]["method"] == "ar" and events[0]["gamma"] == 0
    assert events[1]["type"] == "compile" and events[1]["ms"] >= 0
    ends = [e for e in events if e["type"] == "round_end"]
    assert len(ends) == 5 and all(e["drafted"] == 0 and len(e["emitted"]) == 1 for e in ends)
    assert summarize(events)["tokens_per_target_call"] == 1.0
    # the trace is of the same run: its tokens are what generate prints for that seed
    code, out, _ = run(
        capsys,
        tiny_ckpt_dir,
        "generate",
        "--prompt",
        PROMPT,
        "--json",
        "--max-new-tokens",
        "5",
        "--seed",
        "3",
    )
    assert [t for e in ends for t in e["emitted"]] == json.loads(out)["tokens"]


@pytest.mark.parametrize("method", ["ar", "draft"])
def test_traced_and_fused_runs_emit_the_same_tokens_at_t1(bundle, method):
    fused = decode(bundle, PROMPT, method=method, temperature=1.0, max_new=12, seed=5)
    traced = decode(
        bundle, PROMPT, method=method, temperature=1.0, max_new=12, seed=5, with_events=True
    )
    assert traced.tokens == fused.tokens


def test_resample_events_label_the_residual_apart_from_p_and_q(bundle):
    # (the tiny draft model shares the target's weights; the untrained heads disagree with it)
    events = decode(
        bundle,
        PROMPT,
        method="medusa",
        gamma=3,
        temperature=1.0,
        max_new=40,
        seed=1,
        with_events=True,
    ).events
    resampled = [e for e in events if e["type"] == "resample"]
    assert resampled, "untrained Medusa heads should be rejected at least once in 40 tokens"
    for e in resampled:
        # drawn from norm(max(0, p − q)): only where p > q, and at least p − q (norm ≤ 1)
        assert e["p"] > e["q"] and e["residual"] >= e["p"] - e["q"] - 1e-6
        assert "residual" in extra_numbers(e) and f"p {e['p']:.2f}" in extra_numbers(e)


def test_many_samples_run_in_chunks_that_fit_a_memory_budget(bundle):
    calls = []
    one = decode(bundle, PROMPT, temperature=1.0, max_new=3, num_samples=50, seed=2)
    chunked = decode(
        bundle,
        PROMPT,
        temperature=1.0,
        max_new=3,
        num_samples=50,
        seed=2,
        memory_budget=2**20,
        progress=lambda d, n: calls.append((d, n)),
    )
    assert one.stats["chunks"] == 1 and chunked.stats["chunks"] > 1
    assert len(chunked.tokens) == 50 and all(1 <= len(t) <= 3 for t in chunked.tokens)
    rows = chunked.stats["samples_per_chunk"]
    assert chunked.tokens[:rows] == one.tokens[:rows]  # chunk 0 is the unchunked run's rows
    assert len(set(map(tuple, chunked.tokens))) > 10  # later chunks are fresh draws
    assert calls[-1] == (50, 50) and len(calls) == chunked.stats["chunks"]


def test_many_speculative_samples_count_acceptance_over_every_chunk(bundle):
    r = decode(
        bundle,
        PROMPT,
        method="draft",
        temperature=1.0,
        max_new=4,
        num_samples=40,
        seed=2,
        memory_budget=2**20,
    )
    assert r.stats["chunks"] > 1
    assert r.stats["generated_tokens"] == sum(len(t) for t in r.tokens) > 40


def test_a_traced_run_that_cannot_fit_says_how_many_would(capsys, tiny_ckpt_dir, bundle):
    from nanospec.errors import UserError

    with pytest.raises(UserError, match=r"at most [\d,]+ would"):
        decode(
            bundle, PROMPT, num_samples=5000, max_new=2, with_events=True, memory_budget=8 * 2**20
        )


def test_finish_reasons_name_why_each_sample_stopped(capsys, tiny_ckpt_dir):
    assert finish_reason([5, 0], eos_id=0, max_new=2) == "stop"
    assert finish_reason([5, 6], eos_id=0, max_new=2) == "length"
    assert finish_reason([5], eos_id=0, max_new=2) == "context"
    code, out, err = run(
        capsys, tiny_ckpt_dir, "generate", "--prompt", PROMPT, "--json", "--max-new-tokens", "3"
    )
    assert json.loads(out)["finish_reason"] in ("length", "stop")


@pytest.mark.parametrize("method", ["ar", "draft", "ngram", "eagle"])
def test_the_context_end_is_said_and_reached_by_every_method(capsys, tiny_ckpt_dir, method):
    """n_ctx = 64: asking for 100,000 tokens stops at the context's end, says so in the text
    output and in --json, and every method stops at the same length as autoregressive."""
    args = [
        "generate",
        "--prompt",
        PROMPT,
        "--method",
        method,
        "--max-new-tokens",
        "100000",
        "--temperature",
        "0",
    ]
    code, out, err = run(capsys, tiny_ckpt_dir, *args, "--json")
    doc = json.loads(out)
    if doc["finish_reason"] == "stop":
        pytest.skip("the untrained model happened to emit <|endoftext|>")
    assert doc["finish_reason"] == "context"
    assert doc["stats"]["prompt_tokens"] + len(doc["tokens"]) == 64
    code, out, err = run(capsys, tiny_ckpt_dir, *args)
    assert code == 0 and "end of the model's 64-token context" in out


def test_json_and_show_together_are_refused(capsys, tiny_ckpt_dir):
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", PROMPT, "--json", "--show")
    assert code == 2 and "choose one" in err and out == ""


def test_a_trace_into_a_missing_folder_is_refused_before_loading(capsys, tmp_path):
    # No checkpoints at all: the path is checked first, so this is the error a user sees.
    code, out, err = run(
        capsys,
        tmp_path / "no-checkpoints",
        "generate",
        "--prompt",
        PROMPT,
        "--trace",
        str(tmp_path / "missing" / "t.jsonl"),
    )
    assert code == 2 and "does not exist" in err and "missing" in err


def test_help_says_generate_defaults_to_autoregressive(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    assert "(default ar)" in " ".join(capsys.readouterr().out.split())
