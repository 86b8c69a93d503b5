"""The benchmark runs end to end on a tiny model and reports every column; it asserts no times."""

import doctest
import io
import json

import pytest
from flax import nnx
from rich.console import Console

import nanospec.bench
from nanospec.bench import _print, expected_tokens, iid_acceptance, run_bench
from nanospec.decode import METHODS, Bundle
from nanospec.heads import KINDS, HeadConfig, build
from nanospec.tree import Tree
from nanospec.errors import UserError
from nanospec.model import GPT, ModelConfig, count_params


def test_doctests():
    assert doctest.testmod(nanospec.bench).failed == 0


def test_expected_tokens_per_round():
    assert expected_tokens(0.0, 4) == 1.0  # only the residual token
    assert expected_tokens(1.0, 4) == 5.0  # all four drafts and the bonus
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_iid_acceptance_ignores_discarded_drafts():
    # γ = 3: rounds accepted 1, 1 and 3 drafts; rejections 2; accepted 5 -> α = 5/7
    assert iid_acceptance([0, 2, 0, 1]) == pytest.approx(5 / 7)


@pytest.fixture(scope="module")
def bundle(tiny_tokenizer):
    """Tiny untrained models with the shipped context length, so workload prompts fit."""
    def tiny(name, seed):
        cfg = ModelConfig.tiny(vocab_size=tiny_tokenizer.vocab_size, n_ctx=256)
        cfg = ModelConfig.from_dict({**cfg.to_dict(), "name": name})
        return (cfg, *nnx.split(GPT(cfg, nnx.Rngs(seed))))
    target = tiny("target", 0)
    heads = {}
    for kind in KINDS:
        hc = HeadConfig.for_target(kind, target[0], depth=2)
        heads[kind] = (hc, *nnx.split(build(hc)))
    return Bundle(tiny_tokenizer, {"target": target, "draft": tiny("draft", 1), **heads})


def test_bench_reports_every_column_and_writes_json(bundle, tmp_path):
    out = tmp_path / "bench.json"
    report = run_bench(bundle, METHODS, (1, 3), tokens=4, repeats=1, n_prompts=1,
                       json_path=str(out), trees={"2,1": Tree.from_branching((2, 1))})
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    runs = [(r["method"], r["gamma"]) for r in report["rows"]]
    # Medusa and MTP have 2 heads here, so they skip γ = 3; every other method runs both.
    # Every method but prompt lookup also grows the tree.
    assert runs == [("draft", 1), ("draft", 3), ("ngram", 1), ("ngram", 3), ("medusa", 1),
                    ("eagle", 1), ("eagle", 3), ("mtp", 1)] + [
                        (m, "tree 2,1") for m in ("draft", "medusa", "eagle", "mtp")]
    for r in report["rows"][-4:]:
        assert r["tree_nodes"] == 5 and r["measured_speedup"] > 0 and "c" not in r
        assert r["ttft_ms"] > 0 and r["tpot_speedup"] > 0
    for r in report["rows"][:-4]:
        for key in ("acceptance_rate", "alpha", "c", "tau_per_draft_cost", "verify_over_ar",
                    "predicted_decode_speedup", "predicted_speedup", "measured_speedup",
                    "efficiency", "extra_memory_mb", "ttft_ms", "tpot_ms", "tpot_speedup",
                    "rounds_without_drafts"):
            if key == "tau_per_draft_cost" and r["c"] == 0:
                assert r[key] is None  # drafting cheaper than the timing noise: not a number
                continue
            assert r[key] == r[key] and r[key] >= 0, key  # a number, not NaN
    extra = {r["method"]: r["extra_params"] for r in report["rows"]}
    assert extra["ngram"] == 0 and extra["draft"] == count_params(bundle.models["draft"][2])
    assert extra["eagle"] == count_params(bundle.models["eagle"][2]) > 0  # the target's not counted
    assert report["best"] in report["rows"]
    out = io.StringIO()  # a tree row (no prediction) can be the best one too: it must print
    _print(Console(file=out, width=200), {**report, "best": report["rows"][-1]})
    assert "best: mtp with γ = tree 2,1" in out.getvalue()
    # The same decode step timed two ways: when they disagree, the report says so.
    assert report["ar"]["tpot_over_decode_probe"] > 0
    for agree, warned in ((1.05, False), (1.3, True), (0.8, True)):
        out = io.StringIO()
        ar = {**report["ar"], "tpot_over_decode_probe": agree}
        _print(Console(file=out, width=200), {**report, "ar": ar})
        assert ("noisy run" in out.getvalue()) == warned, agree
    assert report["ar"]["ttft_ms"] > 0 and report["ar"]["tpot_ms"] > 0
    # Only prompt lookup may skip drafting; every other drafter drafts in every round.
    assert all(r["rounds_without_drafts"] == 0 for r in report["rows"][:-4] if r["method"] != "ngram")


def test_a_prompt_too_long_for_the_context_is_a_user_error(tiny_ckpt_dir):
    with pytest.raises(UserError, match="context"):  # the tiny checkpoints hold only 64 tokens
        run_bench(Bundle.load(tiny_ckpt_dir), ("ar", "draft"), (2,), tokens=4, repeats=1, n_prompts=1)


def test_each_pair_of_c_probes_runs_back_to_back_in_every_pass():
    """c is a difference of two probe times; both halves must see the machine in one state."""
    from nanospec.probes import paired_median_differences
    calls = []
    pairs = {k: (lambda k=k: calls.append((k, "round")), lambda k=k: calls.append((k, "pass")))
             for k in ("x", "y")}
    out = paired_median_differences(pairs, repeats=3)
    assert set(out) == {"x", "y"}
    one_pass = [("x", "round"), ("x", "pass"), ("y", "round"), ("y", "pass")]
    assert calls == one_pass * 4  # a warm-up pass, then 3 timed ones
