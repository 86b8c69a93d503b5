"""The benchmark runs end to end on a tiny model and reports every column; it asserts no times.

Also: a γ a method cannot run is skipped out loud (refused when nothing is left), speedups are
ratios within one timing pass, and a TPOT speedup out of line with end to end is flagged —
all checked on synthetic numbers, never on wall-clock times.
"""

import doctest
import io
import json
import math

import pytest
from flax import nnx
from rich.console import Console

import nanospec.measure.bench
import nanospec.measure.probes
from nanospec.cli import main
from nanospec.decode import METHODS, Bundle
from nanospec.errors import UserError
from nanospec.heads.modules import KINDS, HeadConfig, build
from nanospec.measure.bench import (
    expected_tokens,
    iid_acceptance,
    latency_flags,
    plan_runs,
    run_bench,
)
from nanospec.measure.probes import paired_latency
from nanospec.measure.tables import print_bench
from nanospec.model import GPT, ModelConfig, count_params
from nanospec.trees.tree import Tree


def test_doctests():
    assert doctest.testmod(nanospec.measure.bench).failed == 0
    assert doctest.testmod(nanospec.measure.probes).failed == 0


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
    printed = io.StringIO()
    # Every method but MTP, whose runs are Medusa's in every respect bench sees (heads with a
    # depth) and SSD (planned in test_ssd.py): each run compiles its own programs.
    methods = [m for m in METHODS if m not in ("mtp", "ssd")]
    report = run_bench(
        bundle,
        methods,
        (1, 3),
        tokens=4,
        repeats=1,
        n_prompts=1,
        json_path=str(out),
        trees={"2,1": Tree.from_branching((2, 1))},
        console=Console(file=printed, width=250),
        roofline_mb=1,  # the roofline's large buffer: 1 MiB here, not 256
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    runs = [(r["method"], r["gamma"]) for r in report["rows"]]
    # Medusa has 2 heads here, so it skips γ = 3; every other method runs both.
    # Every method but prompt lookup also grows the tree.
    assert runs == [
        ("draft", 1),
        ("draft", 3),
        ("ngram", 1),
        ("ngram", 3),
        ("medusa", 1),
        ("eagle", 1),
        ("eagle", 3),
    ] + [(m, "tree 2,1") for m in ("draft", "medusa", "eagle")]
    # ... and says so, in the JSON and on screen.
    assert [(s["method"], s.get("gammas", s.get("tree"))) for s in report["skipped"]] == [
        ("medusa", [3]),
        ("ngram", "2,1"),
    ]
    printed = printed.getvalue()
    assert "skipped: medusa γ = 3 (medusa has 2 heads, so γ can be at most 2)" in printed
    assert "skipped: ngram tree 2,1" in printed
    # The roofline ran in the same pool: every pass it bounds was timed, every limit measured.
    roof = report["roofline"]
    passes = ["decode step", "pass over 1", "pass over 2", "pass over 4"]  # γ + 1 of γ = 1, 3
    assert [p["pass"] for p in roof["passes"]] == passes
    for p in roof["passes"]:
        assert p["measured_ms"] > 0 and p["bound_ms"] > 0 and math.isfinite(p["of_bound"])
    assert roof["passes"][2]["r"] > 0 and roof["passes"][2]["r_at_bound"] > 0
    assert set(roof["bandwidth_gbs"]) == {"copy", "read", "read pass"}
    assert all(math.isfinite(x) and x > 0 for x in roof["bandwidth_gbs"].values())
    assert all(list(by) == ["1", "2", "4", "16"] for by in roof["matmul_gflops"].values())
    assert "where the target's passes stand" in printed and "4 tokens" in printed
    # ... and the run ends with the paragraph that explains its fastest chain.
    assert report["explanation"].startswith("Why ") and "What limits it most" in printed
    for r in report["rows"]:  # TPOT: measured, or flagged as not measurable
        assert isinstance(r["flags"], list)
        assert (r["tpot_speedup"] or 0) > 0 or "tpot_unmeasured" in r["flags"]
    for r in report["rows"][-3:]:
        assert r["tree_nodes"] == 5 and r["measured_speedup"] > 0 and "c" not in r
        assert r["ttft_ms"] > 0
    for r in report["rows"][:-3]:
        for key in (
            "acceptance_rate",
            "alpha",
            "c",
            "tau_per_draft_cost",
            "verify_over_ar",
            "predicted_decode_speedup",
            "predicted_speedup",
            "measured_speedup",
            "efficiency",
            "extra_memory_mb",
            "ttft_ms",
            "rounds_without_drafts",
        ):
            if key == "tau_per_draft_cost" and r["c"] == 0:
                assert r[key] is None  # drafting cheaper than the timing noise: not a number
                continue
            assert r[key] == r[key] and r[key] >= 0, key  # a number, not NaN
    extra = {r["method"]: r["extra_params"] for r in report["rows"]}
    assert extra["ngram"] == 0 and extra["draft"] == count_params(bundle.models["draft"][2])
    assert extra["eagle"] == count_params(bundle.models["eagle"][2]) > 0  # the target's not counted
    assert report["best"] in report["rows"]
    out = io.StringIO()  # a tree row (no prediction) can be the best one too: it must print
    print_bench(Console(file=out, width=200), {**report, "best": report["rows"][-1]})
    assert "best: eagle with γ = tree 2,1" in out.getvalue()
    # The same decode step timed two ways: when they disagree, the report says so. TPOT here is
    # 3 decode steps, a difference of two runs' times, so on a loaded machine it can come out
    # at or below 0 (seen under make test): only its being a number is asserted, and such a run is flagged.
    assert math.isfinite(report["ar"]["tpot_over_decode_probe"])
    for agree, warned in ((1.05, False), (1.3, True), (0.8, True), (-0.5, True)):
        out = io.StringIO()
        ar = {**report["ar"], "tpot_over_decode_probe": agree}
        print_bench(Console(file=out, width=200), {**report, "ar": ar})
        assert ("noisy run" in out.getvalue()) == warned, agree
    assert report["ar"]["ttft_ms"] > 0 and math.isfinite(report["ar"]["tpot_ms"])
    # Only prompt lookup may skip drafting; every other drafter drafts in every round.
    assert all(
        r["rounds_without_drafts"] == 0 for r in report["rows"][:-4] if r["method"] != "ngram"
    )


def test_a_method_left_with_no_gamma_is_refused_naming_its_largest(bundle):
    with pytest.raises(UserError, match="mtp has 2 heads, so it drafts at most γ = 2"):
        plan_runs(bundle, ["ar", "draft", "mtp"], [3, 4])
    runs, _, skipped = plan_runs(bundle, ["ar", "medusa"], [2, 3, 4])
    assert runs == [("medusa", 2)]
    assert skipped == [
        {
            "method": "medusa",
            "gammas": [3, 4],
            "reason": "medusa has 2 heads, so γ can be at most 2",
        }
    ]


def test_bench_medusa_gamma_8_is_one_sentence_and_exit_2(capsys, tiny_ckpt_dir):
    """`generate --method medusa --gamma 8` refuses; `bench` must not drop Medusa silently."""
    code = main(
        [
            "--checkpoints",
            str(tiny_ckpt_dir),
            "bench",
            "--methods",
            "ar,medusa",
            "--gamma",
            "8",
            "--tokens",
            "2",
            "--prompts",
            "1",
            "--repeats",
            "1",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "nanospec: error: medusa has 4 heads, so it drafts at most γ = 4 "
        "tokens per round; --gamma 8 leaves it nothing to run."
    ]


def test_speedups_are_ratios_within_a_pass():
    # Pass 2 ran on a machine half as fast: both runs took twice as long, the ratio stayed 2.
    # (The TPOT ratio of the medians would be 2.5 / 1.0: numbers from different passes.)
    lat = paired_latency(
        full=[1.0, 2.0, 1.5],
        first=[0.5, 1.0, 0.5],
        ar_full=[2.0, 4.0, 3.0],
        ar_first=[0.5, 1.0, 0.5],
        n_prompts=1,
        n_after_first=10,
    )
    assert lat["measured_speedup"] == 2.0
    assert lat["tpot_speedup"] == 3.0  # (2 − .5) / (1 − .5), (4 − 1) / (2 − 1), (3 − .5) / 1
    assert lat["ttft_ms"] == 500.0 and lat["tpot_ms"] == pytest.approx(100.0)  # 1.0 s / 10
    assert lat["decode_share"] == 0.5
    # The first token took the whole run: there is no TPOT to speak of.
    lat = paired_latency([1.0], [1.0], [2.0], [0.5], 1, 10)
    assert lat["tpot_speedup"] is None and lat["decode_share"] == 0.0


@pytest.mark.parametrize(
    "measured, tpot, share, flags",
    [
        (2.04, 54.45, 0.30, ["tpot_inconsistent"]),  # the run that printed 54.45× beside 2.04×
        (2.04, 3.50, 0.50, []),  # speculation paid its draft's prefill up front: TPOT may lead
        (2.04, 3.60, 0.50, ["tpot_inconsistent"]),  # ... but not by more than 1.5× + 0.5
        (1.30, None, 0.00, ["tpot_unmeasured", "ttft_dominates"]),  # nothing left after TTFT
        (1.30, 1.40, 0.05, ["ttft_dominates"]),  # TPOT from 5% of the run: noise decides it
        (0.80, 0.90, 0.60, []),  # a slowdown, consistently measured, is not flagged
    ],
)
def test_a_tpot_speedup_out_of_line_with_end_to_end_is_flagged(measured, tpot, share, flags):
    assert latency_flags(measured, tpot, share) == flags


def test_flagged_rows_are_named_in_one_line_each():
    report = {
        "workload": "facts",
        "temperature": 0.0,
        "prompts": 1,
        "tokens_per_prompt": 8,
        "repeats": 1,
        "skipped": [],
        "draft_model_decode_ms_per_token": {},
        "ar": {
            "ttft_ms": 1.0,
            "tpot_ms": 1.0,
            "tokens_per_second": 1e3,
            "decode_ms_per_token": 1.0,
            "tpot_over_decode_probe": 1.0,
        },
        "rows": [
            {
                "method": "ngram",
                "gamma": 15,
                "measured_speedup": 2.04,
                "tpot_speedup": 54.45,
                "decode_share": 0.3,
                "ttft_ms": 2.0,
                "flags": latency_flags(2.04, 54.45, 0.3),
            }
        ],
        "best": None,
    }
    out = io.StringIO()
    print_bench(Console(file=out, width=250), report)
    warnings = [line for line in out.getvalue().splitlines() if "ngram γ = 15" in line]
    assert len(warnings) == 1 and "54.45× per output token beside 2.04× end to end" in warnings[0]
    assert "54.45×!" in out.getvalue()


def test_a_prompt_too_long_for_the_context_is_a_user_error(tiny_ckpt_dir):
    with pytest.raises(UserError, match="context"):  # the tiny checkpoints hold only 64 tokens
        run_bench(
            Bundle.load(tiny_ckpt_dir), ("ar", "draft"), (2,), tokens=4, repeats=1, n_prompts=1
        )


def test_each_pair_of_c_probes_runs_back_to_back_in_every_pass():
    """c is a difference of two probe times; both halves must see the machine in one state."""
    from nanospec.measure.probes import paired_median_differences

    calls = []
    pairs = {
        k: (lambda k=k: calls.append((k, "round")), lambda k=k: calls.append((k, "pass")))
        for k in ("x", "y")
    }
    out = paired_median_differences(pairs, repeats=3)
    assert set(out) == {"x", "y"}
    one_pass = [("x", "round"), ("x", "pass"), ("y", "round"), ("y", "pass")]
    assert calls == one_pass * 4  # a warm-up pass, then 3 timed ones
