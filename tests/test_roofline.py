"""The roofline's arithmetic and bench's closing paragraph, on configs and made-up reports.

Known answers for a pass's bytes and FLOPs (counted by hand, and the parameter count checked
against the models model.py builds), the roofline's verdicts on made-up probe times, and the
paragraph on made-up reports that put each limit first. Nothing here times anything (bench's
own test runs the probes: tests/test_bench.py).
"""

import doctest
import io

import pytest
from flax import nnx
from rich.console import Console

import nanospec.measure.explain
import nanospec.measure.roofline
from nanospec.measure.explain import explain, limit, what_if
from nanospec.measure.probes import FORWARD_CALLS
from nanospec.measure.roofline import main, matmul_shapes, param_count, pass_cost, stand
from nanospec.measure.tables import print_roofline
from nanospec.model import GPT, ModelConfig, count_params

CONFIGS = [ModelConfig.target(), ModelConfig.draft(), ModelConfig.tiny()]


def test_doctests():
    assert doctest.testmod(nanospec.measure.roofline).failed == 0
    assert doctest.testmod(nanospec.measure.explain).failed == 0


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_the_parameter_count_is_the_models(cfg):
    _, state = nnx.split(nnx.eval_shape(lambda: GPT(cfg, nnx.Rngs(0))))  # shapes, no weights
    assert param_count(cfg) == count_params(state)


def test_a_pass_costs_counted_by_hand():
    cfg = ModelConfig.tiny()  # V 64, n_ctx 32, 2 layers, d 32
    one, four = pass_cost(cfg, 1, 16), pass_cost(cfg, 4, 16)
    # the weights, less the 31 position rows a one-token pass does not look up
    assert one["weight_bytes"] == 4 * (param_count(cfg) - 31 * 32)
    assert four["weight_bytes"] - one["weight_bytes"] == 4 * 3 * 32  # three more position rows
    assert one["cache_bytes"] == four["cache_bytes"] == 4 * 2 * 2 * 16 * 32  # K, V; layers; slots
    # per token: 2 flops a multiply-add; 12d² per block, d·V for the output layer
    assert one["matmul_flops"] == 2 * (2 * 12 * 32 * 32 + 32 * 64)
    assert one["attention_flops"] == 2 * 2 * 16 * 32 * 2  # two einsums over 16 slots, 2 layers
    assert four["flops"] == 4 * one["flops"]  # arithmetic grows with the tokens, bytes do not
    assert sum(k for _, _, k in matmul_shapes(cfg).values()) == 4 * cfg.n_layer + 1


def made_up_roofline(cfg, t_ar, t_pass, gbs=10.0, gflops=None, chain=None):
    """Probe medians that give `gbs` GB/s for every read, `gflops[n]` GFLOP/s at n rows, and
    `chain[n]` seconds for a pass's matmuls alone at n rows."""
    gflops = gflops or {n: 10.0 * n for n in {1, 16, *t_pass}}
    med, work = {}, {}
    for n, seconds in (chain or {}).items():  # FORWARD_CALLS passes a call, as the probe's
        work["roofline", "chain", n] = FORWARD_CALLS * pass_cost(cfg, n, 0)["matmul_flops"]
        med["roofline", "chain", n] = FORWARD_CALLS * seconds
    for name in ("copy", "read", "read pass"):
        work["roofline", name], med["roofline", name] = 1e9, 1e9 / (gbs * 1e9)
    for name, (i, o, _) in matmul_shapes(cfg).items():
        for n, rate in gflops.items():
            work["roofline", "matmul", name, n] = 10 * 2 * n * i * o  # 10 products a call
            med["roofline", "matmul", name, n] = 10 * 2 * n * i * o / (rate * 1e9)
    return stand(cfg, cfg.n_ctx, med, work, t_ar, t_pass, 1.0)


def test_the_roofline_bounds_each_pass_by_its_slower_roof():
    cfg = ModelConfig.target()
    one, eight = pass_cost(cfg, 1, 256), pass_cost(cfg, 8, 256)
    memory = one["bytes"] / 10e9  # 10 GB/s: 5.0 ms for every pass here
    roof = made_up_roofline(cfg, t_ar=2 * memory, t_pass={1: 2 * memory, 8: 4 * memory})
    assert roof["bandwidth_gbs"] == pytest.approx({"copy": 10, "read": 10, "read pass": 10})
    assert roof["matmul_gflops"]["one pass"]["8"] == pytest.approx(80.0)
    step, p1, p8 = roof["passes"]
    assert [p["pass"] for p in roof["passes"]] == ["decode step", "pass over 1", "pass over 8"]
    assert step["bound_by"] == p1["bound_by"] == "memory"  # 25 MFLOP at 10 GFLOP/s: 2.5 ms
    assert step["of_bound"] == pytest.approx(0.5) and p1["r"] == 1.0
    # 201 MFLOP at 80 GFLOP/s is 2.5 ms, under the 5.0 ms of bytes: memory-bound still
    assert p8["bound_by"] == "memory" and p8["r_at_bound"] == pytest.approx(
        eight["bytes"] / one["bytes"]
    )
    assert p8["r"] == 2.0 and p8["of_bound"] == pytest.approx(eight["bytes"] / 10e9 / (4 * memory))
    # A slow matmul at 8 rows makes the wide pass compute-bound, and r at its bound grows.
    roof = made_up_roofline(
        cfg, 2 * memory, {1: memory, 8: 4 * memory}, gflops={1: 10, 8: 20, 16: 40}
    )
    p8 = roof["passes"][2]
    assert p8["bound_by"] == "compute"
    assert p8["bound_ms"] == pytest.approx(1e3 * eight["flops"] / 20e9)
    assert p8["r_at_bound"] == pytest.approx(eight["flops"] / 20e9 / memory)
    out = io.StringIO()
    print_roofline(Console(file=out, width=200), roof)
    assert "8 tokens" in out.getvalue() and "compute" in out.getvalue()
    assert "matmuls alone" not in out.getvalue()  # no chain probe, no line


def test_the_matmuls_alone_give_their_own_r():
    cfg = ModelConfig.target()
    # a 1 ms step, 2.5 ms at 8 tokens; the matmuls alone 0.75 and 1.5 ms: r 2.5, alone 2.0
    roof = made_up_roofline(cfg, 1e-3, {1: 1e-3, 8: 2.5e-3}, chain={1: 0.75e-3, 8: 1.5e-3})
    step, p1, p8 = roof["passes"]
    assert "matmuls_ms" not in step  # the decode step is bench's T_ar, not a probe's pass
    assert p1["matmuls_ms"] == pytest.approx(0.75) and p1["r_matmuls"] == pytest.approx(1.0)
    assert p8["matmuls_ms"] == pytest.approx(1.5) and p8["r_matmuls"] == pytest.approx(2.0)
    assert p8["r"] == pytest.approx(2.5)
    out = io.StringIO()
    print_roofline(Console(file=out, width=80), roof)
    line = " ".join(out.getvalue().split())  # the console wraps at 80 columns
    assert "8 tokens 1.500 ms (60% of the pass), r 2.00; 1 token 0.750 ms" in line
    assert max(len(x) for x in out.getvalue().splitlines()) <= 80


def bench_report(**row) -> dict:
    """A made-up bench report with one draft-model row (the fields explain reads)."""
    base = {
        "method": "draft",
        "gamma": 7,
        "alpha": 0.92,
        "c": 0.086,
        "verify_over_ar": 1.87,
        "expected_tokens_per_round": 6.04,
        "rounds_without_drafts": 0.0,
        "predicted_decode_speedup": 2.44,
        "predicted_speedup": 2.37,
        "measured_speedup": 2.66,
        "efficiency": 1.12,
    }
    return {
        "rows": [{**base, **row}],
        "ar": {"tpot_over_decode_probe": 1.02},
        "machine": {"cpu": "AMD EPYC", "cores": 2},
    }


# Each row puts one limit first: (its what-if bounds: r = 1, c = 0, α = 1).
LIMITED = {
    # the shipped pair on a CPU where the wide pass is dear: 3.77×, 3.23×, 3.24×
    "verify": {},
    # a dear drafter beside a cheap verify pass: 1.61×, 4.55×, 2.50×
    "drafting": {"c": 0.3, "verify_over_ar": 1.1, "expected_tokens_per_round": 5.0, "alpha": 0.85},
    # a poor drafter: at α = 0.3, E = 1.43 of 8 tokens; 1.25×, 1.30×, 6.45×
    "acceptance": {
        "c": 0.02,
        "verify_over_ar": 1.1,
        "expected_tokens_per_round": 1.43,
        "alpha": 0.3,
    },
}


@pytest.mark.parametrize("term", LIMITED)
def test_the_paragraph_names_the_term_that_limits_the_speedup(term):
    report = bench_report(**LIMITED[term])
    row = report["rows"][0]
    gains = what_if(row)
    assert limit(row) == term and max(gains, key=gains.get) == term
    text = explain(report)
    named = {
        "verify": "What limits it most is the verify pass",
        "drafting": "What limits it most is drafting",
        "acceptance": "What limits it most is acceptance",
    }
    assert [t for t, words in named.items() if words in text] == [term]
    assert f"r = {row['verify_over_ar']:.2f} one-token passes" in text
    assert f"c = {row['c']:.3f}" in text and f"α = {row['alpha']:.2f}" in text
    assert "2.66× end to end" in text and "(AMD EPYC, 2 cores)" in text
    assert "on a GPU it costs about 1, because" in text  # the reason, in every branch
    assert "\n" not in text  # one paragraph


def test_the_paragraph_uses_the_cost_model_of_the_fastest_row():
    slow = {**bench_report()["rows"][0], "gamma": 2, "measured_speedup": 1.5}
    report = bench_report()
    report["rows"].insert(0, slow)
    report["rows"].append({"method": "draft", "gamma": "tree 2,1", "measured_speedup": 9.0})
    text = explain(report)
    assert text.startswith("Why draft at γ = 7 gave 2.66×")  # the tree has no cost model
    assert "E / (γc + r) = 6.04 / 2.47 = 2.44×" in text
    # prompt lookup's empty rounds cost one plain step, and the paragraph says how many
    empty = explain(bench_report(rounds_without_drafts=0.25))
    assert "25% of rounds drafting nothing" in empty


def test_the_paragraph_quotes_the_roofline_and_warns_of_noise():
    report = bench_report()
    report["roofline"] = {
        "passes": [
            {"pass": "decode step", "tokens": 1, "of_bound": 0.4},
            {"pass": "pass over 1", "tokens": 1, "of_bound": 0.41, "r": 1.0, "r_at_bound": 1.0},
            {"pass": "pass over 8", "tokens": 8, "of_bound": 0.35, "r": 1.87, "r_at_bound": 1.57},
        ]
    }
    assert "matmuls alone" not in explain(report)  # a roofline without the chain probe
    report["roofline"]["passes"][2].update(measured_ms=2.4, matmuls_ms=1.6, r_matmuls=1.62)
    report["ar"]["tpot_over_decode_probe"] = 1.3
    text = explain(report)
    assert "would cost 1.57 one-token passes if both ran at their bounds" in text
    assert "they ran at 0.35 and 0.41" in text
    assert "Its matmuls alone take 1.60 of its 2.40 ms" in text
    assert "with everything else free, r would be 1.62" in text
    assert "The run was noisy" in text
    assert "Nothing here has a cost model" in explain({**report, "rows": []})
    assert "roofline" not in explain({**report, "roofline": None})  # bench without one


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--gamma", "0"], "--gamma takes whole numbers from 1 to 32"),
        (["--gamma", "2,x"], "--gamma takes whole numbers from 1 to 32"),
        (["--json", "/no/such/folder/roof.json"], "the folder /no/such/folder does not exist"),
    ],
)
def test_the_script_refuses_bad_input_in_one_sentence(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and words in capsys.readouterr().err
