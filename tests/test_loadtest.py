"""`nanospec loadtest` (load/loadgen.py, loadtest.py, load/report.py, launched.py;
cli/loadtest.py).

- the statistics by known answers: TTFT, ITL per chunk, TPOT per token, e2e, percentiles;
- Poisson arrivals: deterministic under a seed, with the mean gap 1/λ (statistical);
- the crossover and "adaptive within 5%" verdicts on rows made by hand;
- the real load generator, through the CLI's --url, against a real server in this process
  (tiny untrained models, a draft model at γ = 3, two slots, an API key): every request
  completes, the tokens the clients counted are the tokens /metrics counted, percentiles are
  ordered, the memory gauges are the engine state's bytes, the JSON is written atomically
  (without the key) and the plots exist; without the key, one sentence that names --api-key;
- every bad flag is one sentence, and so is a `nanospec serve` that cannot start;
- and (slow) the whole command, launching `nanospec serve` processes on the shipped models.
No test asserts a time.
"""

import asyncio
import json
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from nanospec.cli import loadtest as loadtest_command
from nanospec.cli import main
from nanospec.decode import Bundle
from nanospec.errors import UserError
from nanospec.load import loadgen, loadtest
from nanospec.load.launched import Launched
from nanospec.load.loadgen import Ask, Result, arrivals, percentiles, summarize
from nanospec.load.report import adaptive_within, crossover, verdict_lines, verdicts
from nanospec.measure.workloads import workload_prompts
from nanospec.model import GPT, ModelConfig
from nanospec.serving.launch import build_engine, speculative_config
from nanospec.serving.server import build_app
from tests.conftest import SHIPPED
from tests.test_server import serve_in_thread

KEY = "sk-loadtest"  # the API key of the module's server


def test_the_statistics_of_one_request_by_hand():
    # Chunks at 0.5, 0.7, 1.1 s carrying 1, 3, 2 tokens: a speculative round's chunk holds
    # several tokens, so ITL (per chunk) has two gaps while TPOT spreads 0.6 s over 5 tokens.
    r = Result(True, [0.5, 0.7, 1.1], 6)
    assert (r.ttft, r.e2e) == (0.5, 1.1)
    assert r.itl == pytest.approx([0.2, 0.4]) and r.tpot == pytest.approx(0.12)
    assert Result(True, [0.3], 1).tpot is None  # one token: no time *per* further token
    empty = Result(True, [], 1)  # the model ended at once: no text, no latency to report
    assert empty.ttft is empty.e2e is empty.tpot is None and empty.itl == []
    s = summarize([r, Result(True, [0.1, 0.3], 2), Result(False, error="HTTP 429: full.")], 2.0)
    assert (s["requests"], s["completed"], s["failed"], s["errors"]) == (
        3,
        2,
        1,
        ["HTTP 429: full."],
    )
    assert s["output_tokens"] == 8 and s["tokens_per_s"] == 4.0 and s["requests_per_s"] == 1.0
    assert s["tokens_per_chunk"] == 8 / 5
    assert s["ttft_ms"]["p50"] == pytest.approx(300.0)  # the median of 0.5 and 0.1
    assert s["itl_ms"]["mean"] == pytest.approx(1e3 * (0.2 + 0.4 + 0.2) / 3)  # every gap pooled
    assert s["tpot_ms"]["p50"] == pytest.approx(1e3 * (0.12 + 0.2) / 2)


def test_percentiles_by_hand():
    assert percentiles([0.1, 0.2, 0.3, 0.4]) == {
        "p50": 250.0,
        "p90": 370.0,
        "p99": 397.0,
        "mean": 250.0,
    }
    assert percentiles([None, 0.5]) == {"p50": 500.0, "p90": 500.0, "p99": 500.0, "mean": 500.0}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None, "mean": None}


def test_doctests():
    import doctest

    from nanospec.load import report as loadtest_report

    assert doctest.testmod(loadgen).failed == doctest.testmod(loadtest_report).failed == 0


def test_poisson_arrivals_are_seeded_and_have_mean_gap_one_over_rate():
    a = arrivals(4.0, 20_000, seed=3)
    assert a[0] == 0 and np.all(np.diff(a) > 0) and np.array_equal(a, arrivals(4.0, 20_000, 3))
    # The mean of 19,999 exponential gaps of mean 0.25 has standard error 0.25/√19999 ≈ 0.0018;
    # five of those: a false failure about once in 1.7 million runs.
    assert abs(np.diff(a).mean() - 0.25) < 5 * 0.25 / np.sqrt(19_999)


def row(c, **tps):
    return {"concurrency": c, **{s: {"tokens_per_s": v} for s, v in tps.items()}}


def test_the_crossover_and_the_adaptive_verdict_on_rows_made_by_hand():
    rows = [
        row(1, ar=100, draft=180, adaptive=175),
        row(4, ar=300, draft=330, adaptive=300),
        row(16, ar=400, draft=380, adaptive=400),
        row(64, ar=420, draft=500, adaptive=420),
    ]
    assert crossover(rows) == 16  # the first level below AR, even though 64 recovers
    assert crossover(rows[:2]) is None and crossover(rows, "adaptive") is None
    assert crossover([row(1, draft=5)]) is None  # no AR to compare with
    within = adaptive_within(rows)
    assert [(w["best"], w["ok"]) for w in within] == [
        ("draft", True),
        ("draft", False),
        ("ar", True),
        ("draft", False),
    ]
    assert within[0]["share"] == round(175 / 180, 4)
    lines = verdict_lines(verdicts(rows, ["ar", "draft", "adaptive"]), 64)
    assert lines[0] == "crossover (draft below ar): at C = 16"
    assert lines[1] == "crossover (adaptive below ar): none up to C = 64"
    assert lines[2].startswith(
        "adaptive within 5% of the better of ar and draft at every "
        "level: no — C = 4: 91% of draft, C = 64: 84% of draft"
    )
    assert verdicts([row(1, ar=1)], ["ar"]) == {"crossover": {}, "adaptive_within_5pct": []}


def test_every_table_fits_an_80_column_terminal_uncut(monkeypatch):
    """The load test's and the engine sweep's tables, with the widest cells a real sweep
    prints (p99s in the hundreds of ms, four strategies, four γ in a policy's mix): rich
    would cut a cell that does not fit to "…", and a cut number is a wrong number."""
    import io

    from rich.console import Console

    from nanospec.load import crossover as engine_sweep
    from nanospec.load import report
    from nanospec.measure import tables

    screen = Console(file=io.StringIO(), width=80)
    monkeypatch.setattr(tables, "CONSOLE", screen)
    wide = {"p50": 123.4, "p90": 999.9, "p99": 1234.5, "mean": 200.0}
    server = {
        "acceptance_rate": 0.81,
        "mean_acceptance_length": 4.22,
        "rss_bytes": 2**31,
        "kv_cache_bytes": 2**28,
        "draft_state_bytes": 2**26,
    }
    run = {
        "tokens_per_s": 12345.6,
        "requests_per_s": 123.45,
        "tokens_per_chunk": 4.22,
        "completed": 1024,
        "requests": 1024,
        "server": server,
        **{f"{m}_ms": wide for m in ("ttft", "itl", "tpot", "e2e")},
    }
    strategies = ["ar", "draft", "adaptive", "vllm-disable"]
    rows = [{"concurrency": c, "rate": c, **{s: run for s in strategies}} for c in (1, 64)]
    report.print_levels(
        "facts, T = 1, 128 tokens a request, 1024 requests a level", rows, strategies
    )
    report.print_rates("facts", rows, strategies)
    mix = {"0": 0.5, "1": 0.1, "2": 0.15, "4": 0.25}
    engine_rows = [
        {
            "slots": s,
            **{
                m: {
                    "tokens_per_s": 12345.6,
                    "gamma_share": mix if m in ("adaptive", "disable") else None,
                }
                for m in ("ar", "draft", "adaptive", "disable")
            },
        }
        for s in (1, 64)
    ]
    engine_sweep.print_rows(
        engine_rows,
        ["ar", "draft", "adaptive", "disable"],
        "closed loop (γ = 4, T = 1, mixed, 128 tokens a request)",
    )
    text = screen.file.getvalue()
    assert "1234.5" not in text and "1234" in text and "12346 (1.00×)" in text
    assert "0:50% 1:10% 2:15% 4:25%" in text
    assert "…" not in text and max(map(len, text.splitlines())) <= 80


def test_the_mixed_workload_takes_each_kind_in_turn():
    kinds = [workload_prompts(w, 2) for w in ("facts", "repetitive", "code")]
    assert loadtest.prompts_for("mixed", 6) == [kinds[i % 3][i // 3] for i in range(6)]
    assert loadtest.prompts_for("code", 3) == workload_prompts("code", 3)


def test_vllm_disable_is_serves_own_reading_of_vllms_config():
    flags = loadtest.serve_flags("vllm-disable", 4, 16)
    assert flags[0] == "--speculative-config"
    assert speculative_config(flags[1]) == {"method": "draft", "gamma": 4, "disable_at": 16}
    # The same strategies with another drafter: vLLM's name for it in the config.
    ngram = loadtest.serve_flags("vllm-disable", 4, 16, "ngram")
    assert speculative_config(ngram[1]) == {"method": "ngram", "gamma": 4, "disable_at": 16}
    assert loadtest.serve_flags("adaptive", 7, 16, "ngram") == [
        "--method",
        "ngram",
        "--gamma",
        "7",
        "--adaptive",
    ]
    assert loadtest.serve_flags("draft", 7, 16, "eagle") == ["--method", "eagle", "--gamma", "7"]
    plan = loadtest.Plan(("ar",), ("facts",), (1,), 1, (), 8, 0.0, max_len=80)
    assert plan.serve_flags("ar") == ["--method", "ar", "--max-model-len", "80"]


@pytest.fixture(scope="module")
def server(tiny_tokenizer):
    """A real server in this process: tiny draft and target models with room for the facts
    prompts (n_ctx 192), speculative at γ = 3, two slots, guarded by the API key KEY."""

    def tiny(seed, name):
        cfg = ModelConfig.from_dict(
            {**ModelConfig.tiny(tiny_tokenizer.vocab_size, 192).to_dict(), "name": name}
        )
        return (cfg, *nnx.split(GPT(cfg, nnx.Rngs(seed))))

    bundle = Bundle(tiny_tokenizer, {"target": tiny(0, "target"), "draft": tiny(1, "draft")})
    engine = build_engine(bundle, "draft", gamma=3, slots=2)
    uv, thread, port = serve_in_thread(
        build_app(engine, tiny_tokenizer, "nanospec", 64, api_key=KEY)
    )
    yield f"http://127.0.0.1:{port}", engine
    uv.should_exit = True
    thread.join(timeout=60)


def test_the_memory_gauges_are_the_engine_states_bytes(server):
    url, engine = server
    m = loadgen.scrape(url)
    nbytes = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree))
    assert m["nanospec:kv_cache_bytes"] == nbytes(engine.state.cache) > 0
    assert m["nanospec:draft_state_bytes"] == nbytes(engine.state.dstate) > 0
    assert m["process_resident_memory_bytes"] > m["nanospec:kv_cache_bytes"]


def test_a_load_test_of_a_running_server(server, tmp_path, monkeypatch, capsys):
    url, _ = server
    monkeypatch.delenv("NANOSPEC_API_KEY", raising=False)
    writes = []
    real_write = loadtest_command.atomic_write
    monkeypatch.setattr(
        loadtest_command, "atomic_write", lambda p, d: (writes.append(p), real_write(p, d))
    )
    before = loadgen.scrape(url)
    out = tmp_path / "load.json"
    assert (
        main(
            [
                "loadtest",
                "--url",
                url + "/v1",
                "--concurrency",
                "1,2",
                "--rates",
                "50",
                "--requests-per-level",
                "3",
                "--max-tokens",
                "8",
                "--json",
                str(out),
                "--plots",
                str(tmp_path / "plots"),
                "--ignore-eos",
                "--api-key",
                KEY,
            ]
        )
        == 0
    )
    after = loadgen.scrape(url)
    assert KEY not in out.read_text()  # the key is sent, never written
    assert writes == [out] and [p.name for p in tmp_path.iterdir() if p.is_file()] == [out.name]
    report = json.loads(out.read_text())
    found = report["workloads"]["facts"]
    assert report["plan"]["strategies"] == ["nanospec"]  # --url: labelled by /v1/models
    assert report["plan"]["ignore_eos"] is True  # and Ask.body sends it (its doctest)
    levels = found["levels"] + found["rates"]
    assert [lv.get("concurrency", lv.get("rate")) for lv in levels] == [1, 2, 50.0]
    runs = [lv["nanospec"] for lv in levels]
    for run in runs:
        assert (run["requests"], run["completed"], run["failed"]) == (3, 3, 0)
        # What the clients counted (usage chunks) is what the server counted, level by level.
        assert run["output_tokens"] == run["server"]["generation_tokens"] > 0
        assert run["output_tokens"] == 3 * 8  # --ignore-eos: every request runs to max_tokens
        assert 0 <= run["server"]["accepted_tokens"] <= run["server"]["draft_tokens"]
        for name in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            p = run[name]
            assert 0 <= p["p50"] <= p["p90"] <= p["p99"], (name, p)
        assert run["ttft_ms"]["p50"] <= run["e2e_ms"]["p50"]
    assert (
        sum(r["output_tokens"] for r in runs)
        == after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    )
    assert set(found["crossover"]) == set() and found["adaptive_within_5pct"] == []
    for name in ("throughput-facts.svg", "tpot-facts.svg"):
        assert (tmp_path / "plots" / name).read_text().lstrip().startswith("<?xml")
    text = capsys.readouterr().out  # (the tables go to rich's console, made before capsys)
    assert text.count("3/3 done") == 3 and "written:" in text and "Traceback" not in text


def test_the_load_generator_counts_a_refusal_as_a_failure(server):
    url, _ = server
    bad = Ask("not-the-model", 4, api_key=KEY)
    results, _ = asyncio.run(loadgen.closed_loop(url, ["The capital"], bad, 1, 2))
    assert [r.ok for r in results] == [False, False]
    assert results[0].error.startswith("HTTP 404: ") and results[0].error.endswith(".")


def test_a_server_that_needs_a_key_is_one_sentence_without_it(server, monkeypatch, capsys):
    url, _ = server
    monkeypatch.delenv("NANOSPEC_API_KEY", raising=False)
    for key, fragment in (
        ([], "needs an API key: give it with --api-key"),
        (["--api-key", "no"], "other than the one given"),
    ):
        assert main(["loadtest", "--url", url, "--requests-per-level", "64", *key]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


BAD = [
    (["--strategies", "ar,nope"], "--strategies takes"),
    (["--api-key", "k"], "--api-key is the key of a --url server"),
    (["--workloads", "poems"], "--workloads takes"),
    (["--concurrency", "0,2"], "--concurrency values"),
    (["--concurrency", "4", "--requests-per-level", "3"], "at least the largest"),
    (["--rates", "fast"], "--rates takes"),
    (["--rates", "0"], "--rates takes"),
    (["--temperature", "-1"], "--temperature"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--json", "report.txt"], ".json"),
    (["--url", "localhost:8000"], "http://"),
    (["--url", "http://127.0.0.1:1"], "No server answers"),
    (["--url", "http://127.0.0.1:1", "--strategies", "ar"], "one or the other"),
    (["--label", "mine"], "--label names"),
    (["--method", "medusa"], "--method takes one of draft, ngram, eagle"),
    (["--method", "eagle"], "with --method eagle choose --strategies ar,draft"),
    (["--url", "http://127.0.0.1:1", "--method", "ngram"], "--method sets up the servers"),
    (["--url", "http://127.0.0.1:1", "--max-model-len", "80"], "--max-model-len sets up"),
    (["--frobnicate"], "unrecognized"),
]


def exit_code(argv: list[str]) -> int:
    """main's exit code, whether it returns it or argparse raises SystemExit with it."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("argv, fragment", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_a_bad_flag_is_one_sentence(argv, fragment, capsys):
    assert exit_code(["loadtest", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_plots_without_matplotlib_are_one_sentence(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    assert main(["loadtest", "--plots", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plots needs matplotlib" in err


def test_a_server_that_cannot_start_is_one_sentence_with_its_own(tmp_path):
    server = Launched(str(tmp_path), ["--gamma", "0"], slots=1)
    with pytest.raises(UserError) as e:
        server.wait_ready()
    message = str(e.value)
    assert message.startswith("`nanospec serve --gamma 0` exited with status 2: nanospec: error:")
    assert "\n" not in message and server.stop() == 2


@pytest.mark.slow
@pytest.mark.skipif(
    sys.platform == "win32",
    reason="on Windows SIGTERM is TerminateProcess: the server cannot exit 0",
)
def test_the_whole_command_launches_and_stops_servers(tmp_path):
    """The real thing on the shipped models: `nanospec serve` launched per strategy on a port
    the system picks, loaded, and stopped with SIGTERM (each exits 0)."""
    out = tmp_path / "load.json"
    assert (
        main(
            [
                "--checkpoints",
                str(SHIPPED),
                "loadtest",
                "--strategies",
                "ar,draft",
                "--concurrency",
                "2",
                "--requests-per-level",
                "2",
                "--max-tokens",
                "8",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    (level,) = json.loads(out.read_text())["workloads"]["facts"]["levels"]
    for s in ("ar", "draft"):
        assert (
            level[s]["completed"] == 2
            and 2 <= level[s]["output_tokens"] == level[s]["server"]["generation_tokens"] <= 16
        )
        assert level[s]["server"]["rss_bytes"] > level[s]["server"]["kv_cache_bytes"] > 0
    assert (
        level["ar"]["server"]["draft_state_bytes"]
        == 0
        < level["draft"]["server"]["draft_state_bytes"]
    )
    assert level["draft"]["server"]["acceptance_rate"] > 0.3  # trained models agree often
