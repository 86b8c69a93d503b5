"""No single request may stop the server's engine (serving/scheduler.py, "Faults").

Faults are injected into a real server on a loopback port (the tiny untrained models, a draft
model with γ = 3, two slots), through an engine wrapper that fails on cue: a job whose
admission raises, a step that raises once, and one job's output that cannot be decoded. Each
time the failing request gets a 500 in OpenAI's shape, and every other request, running beside
it or waiting behind it, completes with exactly the tokens it gets alone.

Then the engine thread itself is killed (a fault outside every per-job guard): every client it
held is answered at once, /health says 503, and the real `nanospec serve` process exits 1, so
that a supervisor restarts it.
"""

import threading

import httpx
import pytest

from nanospec.decode import Bundle
from nanospec.serving.engine import Request
from nanospec.serving.launch import build_engine
from nanospec.serving.server import build_app
from tests.test_server import (
    CASES,
    Gate,
    alone,
    eventually,
    serve_in_thread,
    serve_process,
    text_of,
    tiny,
)

NO_ADMISSION, NO_TEXT = 4242, 4343  # the seeds of the requests the injected faults pick on


class Faulty(Gate):
    """The gated engine, with faults on cue: `insert` raises for a NO_ADMISSION request,
    the next `step_fails` steps raise, and a NO_TEXT request's tokens come out as an id past
    the vocabulary (which its text cannot decode)."""

    def __init__(self, engine):
        super().__init__(engine)
        self.step_fails = 0

    def insert(self, request: Request) -> int:
        if request.seed == NO_ADMISSION:
            raise RuntimeError("injected: this request cannot be admitted")
        return self.engine.insert(request)

    def step(self):
        out = super().step()  # subtle: the gate first, so a test can line the fault up
        if self.step_fails:
            self.step_fails -= 1
            raise RuntimeError("injected: this step failed")
        poisoned = {i for i, s in enumerate(self.engine.slots) if s and s.request.seed == NO_TEXT}
        return [o._replace(tokens=[10**6]) if o.slot in poisoned and o.tokens else o for o in out]


@pytest.fixture(scope="module")
def faulty(tiny_tokenizer):
    bundle = Bundle(
        tiny_tokenizer,
        {"target": tiny(tiny_tokenizer, 0, "target"), "draft": tiny(tiny_tokenizer, 1, "draft")},
    )
    engine = Faulty(build_engine(bundle, "draft", gamma=3, slots=2))
    engine.reference = {
        case: alone(engine, Request(tiny_tokenizer.encode_prompt(case[0]), *case[1:]))
        for case in CASES
    }
    app = build_app(engine, tiny_tokenizer, "nanospec", max_queue=8)
    server, thread, port = serve_in_thread(app)
    engine.url, engine.tok = f"http://127.0.0.1:{port}", tiny_tokenizer
    engine.scheduler = app.state.service.scheduler
    yield engine
    engine.open()
    server.should_exit = True
    thread.join(timeout=60)


def body(case, **kw) -> dict:
    prompt, max_tokens, temperature, top_k, top_p, seed = case
    return {
        "model": "nanospec",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "seed": seed,
        **kw,
    }


def ask_all(url: str, bodies: dict[str, dict]) -> dict[str, httpx.Response]:
    """Send every body at once, each from its own client; their responses by name."""
    results = {}

    def ask(name):
        results[name] = httpx.post(url + "/v1/completions", json=bodies[name], timeout=120)

    threads = [threading.Thread(target=ask, args=(name,)) for name in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def assert_server_error(r: httpx.Response, fragment: str) -> None:
    assert r.status_code == 500, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "server_error" and fragment in error["message"]


def assert_exact(engine, r: httpx.Response, case) -> None:
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == text_of(engine.tok, engine.reference[case])


def test_a_request_whose_admission_fails_fails_alone(faulty):
    faulty.close(steps=1)  # the first request is running when the poisoned one arrives
    results = {}
    runner = threading.Thread(
        target=lambda: results.update(ask_all(faulty.url, {"running": body(CASES[1])}))
    )
    runner.start()
    eventually(lambda: len(faulty.scheduler.running) == 1, "the first request is running")
    eventually(lambda: faulty.budget == 0, "its engine step is held")
    rest = threading.Thread(
        target=lambda: results.update(
            ask_all(
                faulty.url,
                {"poisoned": body(CASES[0], seed=NO_ADMISSION), "beside": body(CASES[0])},
            )
        )
    )
    rest.start()
    eventually(lambda: len(faulty.scheduler.waiting) == 2, "the others are waiting")
    faulty.open()
    runner.join(), rest.join()
    assert_server_error(results["poisoned"], "cannot be admitted")
    assert_exact(faulty, results["running"], CASES[1])
    assert_exact(faulty, results["beside"], CASES[0])
    assert httpx.get(faulty.url + "/health").status_code == 200


def test_a_step_that_fails_fails_its_job_and_the_waiting_ones_complete(faulty):
    """The held step holds one request; three wait. The step fails: that request gets its 500,
    the engine starts again from empty slots, and the three complete exactly, two at a time."""
    faulty.close()
    results, cases = {}, {"a": CASES[1], "b": CASES[1], "c": CASES[0], "d": CASES[1]}
    threads = []
    for name in cases:
        threads.append(
            threading.Thread(
                target=lambda n=name: results.update(ask_all(faulty.url, {n: body(cases[n])}))
            )
        )
        threads[-1].start()
        if name == "a":
            eventually(lambda: len(faulty.scheduler.running) == 1, "a is running")
    eventually(lambda: len(faulty.scheduler.waiting) == 3, "three waiting")
    faulty.step_fails = 1
    faulty.open()
    for t in threads:
        t.join()
    assert_server_error(results["a"], "this step failed")
    for name in "bcd":
        assert_exact(faulty, results[name], cases[name])
    assert faulty.free_slots == faulty.n_slots


def test_a_job_whose_text_fails_ends_alone_and_its_neighbour_is_exact(faulty):
    results = ask_all(
        faulty.url,
        {
            "poisoned": body(CASES[1], seed=NO_TEXT),
            "neighbour": body(CASES[1]),
            "greedy": body(CASES[0]),
        },
    )
    assert_server_error(results["poisoned"], "failed on this request")
    assert_exact(faulty, results["neighbour"], CASES[1])
    assert_exact(faulty, results["greedy"], CASES[0])
    metrics = httpx.get(faulty.url + "/metrics").text
    assert 'finished_reason="error"' in metrics


def test_when_the_engine_thread_dies_every_client_is_answered(tiny_tokenizer):
    """A fault outside every per-job guard: the thread dies, and the clients it held —
    running and waiting — get their 500 at once, not at their timeouts."""
    bundle = Bundle(
        tiny_tokenizer,
        {"target": tiny(tiny_tokenizer, 0, "target"), "draft": tiny(tiny_tokenizer, 1, "draft")},
    )
    gate = Gate(build_engine(bundle, "ar", gamma=1, slots=1))
    app = build_app(gate, tiny_tokenizer, "nanospec", max_queue=4)
    scheduler, crashed = app.state.service.scheduler, threading.Event()
    scheduler.on_crash = crashed.set
    server, thread, port = serve_in_thread(app)
    url = f"http://127.0.0.1:{port}"
    try:
        gate.close(steps=1)
        results = {}
        runner = threading.Thread(
            target=lambda: results.update(ask_all(url, {"running": body(CASES[1], max_tokens=50)}))
        )
        runner.start()
        eventually(lambda: len(scheduler.running) == 1, "one running")
        waiter = threading.Thread(
            target=lambda: results.update(ask_all(url, {"waiting": body(CASES[0])}))
        )
        waiter.start()
        eventually(lambda: len(scheduler.waiting) == 1, "one waiting")

        def broken(*_):
            raise RuntimeError("injected: the engine thread's own loop broke")

        scheduler.drop_cancelled = broken
        gate.open()
        runner.join(timeout=30), waiter.join(timeout=30)
        assert not runner.is_alive() and not waiter.is_alive()
        for name in ("running", "waiting"):
            assert_server_error(results[name], "the server is exiting")
        assert crashed.wait(timeout=30)
        assert httpx.get(url + "/health").status_code == 503
        assert httpx.post(url + "/v1/completions", json=body(CASES[0])).status_code == 503
    finally:
        server.should_exit = True
        thread.join(timeout=60)


CRASHING_SERVE = """
import sys
from nanospec.cli import main
from nanospec.serving.scheduler import Scheduler

def broken(self):
    raise RuntimeError("injected: the engine thread's own loop broke")

Scheduler.drop_cancelled = broken
sys.exit(main(sys.argv[1:]))
"""


def test_nanospec_serve_exits_1_when_its_engine_thread_dies():
    """The real command: the first request kills the engine thread; its client gets a 500,
    and the process exits 1 (for a supervisor to restart it) with one line saying why."""
    proc, url = serve_process(
        ["-c", CRASHING_SERVE], "--method", "ar", "--slots", "1", "--max-model-len", "24"
    )
    try:
        r = httpx.post(
            url + "/v1/completions",
            timeout=60,
            json={"model": "nanospec", "prompt": "The capital", "max_tokens": 4},
        )
        assert_server_error(r, "the server is exiting")
        assert proc.wait(timeout=60) == 1
        log = proc.stderr.read()
        assert "nanospec: the engine stopped (RuntimeError: injected" in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
