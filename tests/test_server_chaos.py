"""The server tried the way it fails, as a real `nanospec serve` process: a bounded
schemathesis run against its own /openapi.json (no case may get a 5xx or break the schema),
and SIGTERM with requests running and waiting — completions and prompts to score, while ~1 MB
/tokenize and /detokenize requests keep arriving — every one completes, exactly, and what
comes during the drain is a 503.

The fault injections (a failing admission, a failing step, a dying engine thread), the burst
that gets exactly the right number of 429s and the disconnects that free their slots within
a step or two live in tests/test_server_faults.py and tests/test_server.py."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from nanospec.load.soak import HUGE
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


class Flood:
    """A thread sending ~1 MB /tokenize and /detokenize requests back to back (each must be a
    400: longer than any prompt, more ids than the context), and probing /health between
    them: how many it sent, and the longest /health took. It stops when told, or when the
    server has gone (after its drain)."""

    def __init__(self, url: str):
        self.url, self.sent, self.slowest, self.codes = url, 0, 0.0, set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        with httpx.Client(timeout=300) as client:
            while not self.stop.is_set():
                try:
                    for path, body in HUGE.items():
                        assert client.post(self.url + path, json=body).status_code == 400
                        self.sent += 1
                    start = time.monotonic()
                    self.codes.add(client.get(self.url + "/health").status_code)
                    self.slowest = max(self.slowest, time.monotonic() - start)
                except httpx.TransportError:  # the drained server has exited
                    return

    def end(self) -> "Flood":
        self.stop.set()
        self.thread.join()
        return self


@pytest.mark.slow
@pytest.mark.skipif(
    sys.platform == "win32",
    reason="on Windows SIGTERM is TerminateProcess: there is no drain to test",
)
def test_sigterm_under_load_finishes_every_request_running_or_waiting():
    """One slot, eight completions in flight (one running, the rest waiting; half of them
    streamed) and two prompts to score queued behind them, ~1 MB /tokenize and /detokenize
    requests arriving all the while; then SIGTERM: each completion and each score is exactly
    what it is alone, a request sent while the server drains gets a 503 (and /health says
    503), every huge request was a 400 and /health kept answering, and the process exits 0.
    (The shipped models, 96 tokens each: the tiny ones, or shorter requests, finish eight
    before the last has arrived, once their programs are compiled.)"""
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
    scored = lambda i: {  # a prompt to score (lm-eval's way): echo, max_tokens 0, logprobs
        "model": "nanospec",
        "prompt": prompts[i],
        "max_tokens": 0,
        "echo": True,
        "logprobs": 3,
    }

    def ask(i):
        with httpx.stream("POST", url + "/v1/completions", json=body(i), timeout=300) as r:
            assert r.status_code == 200, r.read()
            if not body(i)["stream"]:
                return json.loads(r.read())["choices"][0]["text"]
            chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
            assert chunks[-1] == "[DONE]"
            return "".join(json.loads(c)["choices"][0]["text"] for c in chunks[:-1])

    def score(i):
        r = httpx.post(url + "/v1/completions", json=scored(i), timeout=300)
        assert r.status_code == 200, r.text
        lp = r.json()["choices"][0]["logprobs"]
        return lp["tokens"], lp["token_logprobs"][1:]  # (the first has no context: null)

    def count(name: str) -> float:
        return sum(
            float(ln.split()[-1])
            for ln in httpx.get(url + "/metrics").text.splitlines()
            if ln.startswith(name)
        )

    def in_flight(n: int) -> bool:  # n requests arrived, and some still wait for the slot
        waiting = count("vllm:num_requests_waiting")
        return (
            waiting > 0
            and count("vllm:num_requests_running")
            + waiting
            + count("vllm:request_success_total")
            - before
            == n
        )

    log: list[str] = []  # the server's stderr, read as it comes (its access log fills a pipe)
    reader = threading.Thread(target=lambda: log.extend(iter(proc.stderr.readline, "")))
    reader.start()
    try:
        alone = [ask(i) for i in range(len(prompts))]
        alone_scores = [score(i) for i in range(2)]
        before, flood = count("vllm:request_success_total"), Flood(url)
        with concurrent.futures.ThreadPoolExecutor(len(prompts) + 2) as pool:
            futures = [pool.submit(ask, i) for i in range(len(prompts))]
            eventually(lambda: in_flight(len(prompts)), "every request is in flight", limit=120)
            scores = [pool.submit(score, i) for i in range(2)]  # behind them in the queue
            eventually(lambda: in_flight(len(prompts) + 2), "both scores wait", limit=120)
            proc.send_signal(signal.SIGTERM)
            eventually(lambda: any("draining" in line for line in log), "the drain began")
            late = httpx.post(url + "/v1/completions", json=body(0), timeout=60)
            assert late.status_code == 503, late.text  # not a refused connection
            assert late.json()["error"]["code"] == "service_unavailable"
            assert httpx.get(url + "/health").status_code == 503
            assert [f.result(timeout=300) for f in futures] == alone
            for f, (tokens, logprobs) in zip(scores, alone_scores):
                assert f.result(timeout=300) == (tokens, pytest.approx(logprobs, abs=1e-5))
        flood.end()
        assert flood.sent > 0 and flood.codes <= {200, 503} and flood.slowest < 5.0
        assert proc.wait(timeout=120) == 0
        reader.join()
        assert "Traceback" not in "".join(log)
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
