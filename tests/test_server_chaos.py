"""The server tried the way it fails, as a real `nanospec serve` process: a bounded
schemathesis run against its own /openapi.json (no case may get a 5xx or break the schema),
and SIGTERM with requests running and waiting (every one completes, exactly).

The fault injections (a failing admission, a failing step, a dying engine thread), the burst
that gets exactly the right number of 429s and the disconnects that free their slots within
a step or two live in tests/test_server_faults.py and tests/test_server.py."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.conftest import SHIPPED
from tests.test_server import eventually, serve_process

EXAMPLES = 40  # schemathesis cases per operation and phase: ~1,000 requests in all


def launch(checkpoints, *flags: str) -> tuple[subprocess.Popen, str]:
    """`nanospec serve FLAGS` on `checkpoints` as its own process, and its URL."""
    return serve_process(["-m", "nanospec"], *flags, checkpoints=checkpoints)


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(tiny_ckpt_dir, tmp_path):
    """Every operation in /openapi.json, fuzzed from the schema (valid and invalid bodies,
    headers, methods): no 5xx, every reply as documented, and the server still healthy."""
    proc, url = launch(tiny_ckpt_dir, "--slots", "2", "--max-queue", "64")
    report = tmp_path / "events.ndjson"
    try:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{url}/openapi.json",
                "--checks",
                "not_a_server_error,status_code_conformance,"
                "response_schema_conformance,content_type_conformance",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                "1",
                "--workers",
                "2",
                "--report",
                "ndjson",
                "--report-ndjson-path",
                str(report),
                "--no-color",
            ],
            cwd=tmp_path,
            capture_output=True,
            encoding="utf-8",
            timeout=900,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
        )
        assert run.returncode == 0, run.stdout[-4000:]
        assert httpx.get(url + "/health").status_code == 200
        events = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines()]
        assert len(events) > 100  # it really ran cases, not nothing
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


@pytest.mark.slow
@pytest.mark.skipif(
    sys.platform == "win32",
    reason="on Windows SIGTERM is TerminateProcess: there is no drain to test",
)
def test_sigterm_under_load_finishes_every_request_running_or_waiting():
    """One slot, eight requests in flight (one running, the rest waiting; half of them
    streamed), then SIGTERM: each completes with exactly the text it gets alone, and the
    process exits 0. (The shipped models, 96 tokens each: the tiny ones, or shorter
    requests, finish eight before the last has arrived, once their programs are compiled.)"""
    proc, url = launch(SHIPPED, "--slots", "1", "--max-queue", "16")
    prompts = [
        f"The capital of {c} is"
        for c in ("France", "Spain", "Peru", "Chad", "Fiji", "Laos", "Mali", "Oman")
    ]
    body = lambda i: {
        "model": "nanospec",
        "prompt": prompts[i],
        "max_tokens": 96,
        "min_tokens": 96,  # no early stop: the queue lasts the eight requests' 768 tokens
        "temperature": 0.8,
        "seed": i,
        "stream": i % 2 == 1,
    }

    def ask(i) -> str:
        with httpx.stream("POST", url + "/v1/completions", json=body(i), timeout=300) as r:
            assert r.status_code == 200, r.read()
            if not body(i)["stream"]:
                return json.loads(r.read())["choices"][0]["text"]
            chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
            assert chunks[-1] == "[DONE]"
            return "".join(json.loads(c)["choices"][0]["text"] for c in chunks[:-1])

    def count(name: str) -> float:
        return sum(
            float(ln.split()[-1])
            for ln in httpx.get(url + "/metrics").text.splitlines()
            if ln.startswith(name)
        )

    try:
        alone = [ask(i) for i in range(len(prompts))]
        before = count("vllm:request_success_total")
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            futures = [pool.submit(ask, i) for i in range(len(prompts))]

            def all_in():  # every request arrived, and some still wait for the slot
                waiting = count("vllm:num_requests_waiting")
                return waiting > 0 and count("vllm:num_requests_running") + waiting + count(
                    "vllm:request_success_total"
                ) - before == len(prompts)

            eventually(all_in, "every request is in flight", limit=120)
            proc.send_signal(signal.SIGTERM)
            assert [f.result(timeout=300) for f in futures] == alone
        assert proc.wait(timeout=120) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_the_soak_script_counts_every_kind_of_request(tiny_ckpt_dir, tmp_path, capsys):
    """load/soak.py (docs/results.md's soak), briefly: every request it sends is counted
    once, nothing is lost, and the report holds the server's memory before and after."""
    from nanospec.load.soak import main as soak_main

    proc, url = launch(tiny_ckpt_dir, "--slots", "2", "--max-queue", "16")
    try:
        out = tmp_path / "soak.json"
        assert (
            soak_main(["--url", url, "--seconds", "4", "--concurrency", "4", "--json", str(out)])
            == 0
        )
        report = json.loads(out.read_text(encoding="utf-8"))
        assert report["requests"] == sum(
            report[k] for k in ("completed", "left", "refused", "lost", "errors")
        )
        assert report["completed"] > 0 and report["lost"] == report["errors"] == 0
        assert report["rss_mb_after"] > 0 and report["running_after"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    assert soak_main(["--url", url, "--seconds", "1"]) == 2  # nobody answers: one sentence
    assert "No nanospec server answers" in capsys.readouterr().err
