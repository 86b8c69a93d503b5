"""`nanospec serve` (serving/server.py), tested over real HTTP the way clients use it.

One uvicorn server runs on a loopback port for the whole module, over the continuous-batching
engine with the tiny untrained models (speculative: a draft model, γ = 3, two slots, a queue of
one), so the module compiles once. The engine's steps pass through a gate the tests can close,
which holds requests mid-decode without any sleep: that is how a full queue and a client that
disconnects mid-stream are reproduced exactly.

- the official `openai` client gets the engine's own tokens as text, streamed or not (the
  reference tokens come from the same engine, driven directly, before the server starts);
- /v1/models, /health, and /metrics under vLLM's names, counting what the clients received;
- every bad request is its 4xx with OpenAI's error shape, one sentence;
- slots + queue requests are taken, however fast they come, and the next is 429 — prompts to
  score (echo, max_tokens 0) included; a client that disconnects frees its slot (within a
  step or two, streaming or not); stop strings cut the text and never show; a draining server
  is 503, /health too;
- ~1 MB /tokenize and /detokenize requests stall neither /health nor a running stream;
- TextStream (serving/text.py) by known answers: a character split across tokens, a stop
  string split across steps, and stop strings within min_tokens (text, not a stop);
- and one real `nanospec serve` process on the shipped checkpoints: the same text streamed or
  not, and SIGTERM drains an in-flight stream to its end, then the process exits 0.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
import uvicorn
from flax import nnx
from prometheus_client.parser import text_string_to_metric_families

from nanospec.cli import main
from nanospec.decode import Bundle
from nanospec.load.soak import HUGE
from nanospec.model import GPT, ModelConfig
from nanospec.serving.engine import Request
from nanospec.serving.launch import build_engine, speculative_config
from nanospec.serving.server import build_app
from nanospec.serving.text import TextStream
from tests.conftest import REPO, SHIPPED

MAX_QUEUE = 1


class Gate:
    """The engine, except that each step first waits for the gate: open (the default), or
    closed with a budget of steps that `allow` adds to. It counts the steps (`steps`, and
    `cancelled_at`: the step count at each cancel), can take `pace` seconds a step (an engine
    whose steps come faster than any poll, yet slowly enough to count), and holds each insert
    while `inserts` is clear (the engine thread stopped before a job reaches its slot)."""

    def __init__(self, engine):
        self.engine, self.budget, self.cond = engine, None, threading.Condition()
        self.steps, self.pace, self.cancelled_at = 0, 0.0, []
        self.inserts = threading.Event()
        self.inserts.set()

    def __getattr__(self, name):  # free_slots, loop, ...: the engine's own
        return getattr(self.engine, name)

    def step(self):
        with self.cond:
            self.cond.wait_for(lambda: self.budget is None or self.budget > 0)
            if self.budget is not None:
                self.budget -= 1
        time.sleep(self.pace)
        self.steps += 1
        return self.engine.step()

    def insert(self, request: Request) -> int:
        self.inserts.wait()
        return self.engine.insert(request)

    def cancel(self, slot: int) -> None:
        self.cancelled_at.append(self.steps)
        self.engine.cancel(slot)

    def close(self, steps: int = 0):
        """Let `steps` more steps through, then hold every step until `open`."""
        with self.cond:
            self.budget = steps

    def open(self):
        with self.cond:
            self.budget = None
            self.cond.notify_all()


def alone(engine, request: Request) -> list[int]:
    """The request's tokens, from the engine driven directly (nothing else in it)."""
    slot, tokens = engine.insert(request), []
    while engine.busy:
        tokens += [t for o in engine.step() if o.slot == slot for t in o.tokens]
    return tokens


def tiny(tok, seed: int, name: str):
    cfg = ModelConfig.from_dict(
        {**ModelConfig.tiny(vocab_size=tok.vocab_size, n_ctx=64).to_dict(), "name": name}
    )
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(seed)))
    return cfg, graphdef, params


# (prompt, max_tokens, temperature, top_k, top_p, seed): greedy, and sampled with every filter.
CASES = [
    ("The capital of France is", 12, 0.0, 0, 1.0, 0),
    ("The quick brown fox", 30, 1.0, 50, 0.95, 7),
]


class Live:
    """The module's server: base URL, app, gate, tokenizer and reference completions."""

    def __init__(self, app, gate, tok, port):
        self.app, self.gate, self.tok = app, gate, tok
        self.url = f"http://127.0.0.1:{port}"
        self.scheduler = app.state.service.scheduler
        self.reference: dict[tuple, list[int]] = {}

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0)

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics: {name or name{label=value}: value} (the engine labels
        dropped, the finished_reason kept)."""
        text = httpx.get(self.url + "/metrics").text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                reason = s.labels.get("finished_reason")
                out[s.name + (f"{{{reason}}}" if reason else "")] = s.value
        return out


def eventually(check, what: str, limit: float = 60.0):
    """Wait until check() holds (a safety limit only: no test asserts how long it takes)."""
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.01)


def serve_in_thread(app):
    """(uvicorn server, its thread, port) on a free loopback port, once it is listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http=app.state.http))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: server.started, "the server started")
    return server, thread, sock.getsockname()[1]


@pytest.fixture(scope="module")
def live(tiny_tokenizer):
    bundle = Bundle(
        tiny_tokenizer,
        {"target": tiny(tiny_tokenizer, 0, "target"), "draft": tiny(tiny_tokenizer, 1, "draft")},
    )
    gate = Gate(build_engine(bundle, "draft", gamma=3, slots=2))
    references = {
        case: alone(gate, Request(tiny_tokenizer.encode_prompt(case[0]), *case[1:]))
        for case in CASES
    }
    app = build_app(gate, tiny_tokenizer, "nanospec", max_queue=MAX_QUEUE)
    server, thread, port = serve_in_thread(app)
    live = Live(app, gate, tiny_tokenizer, port)
    live.reference = references
    yield live
    gate.open()
    server.should_exit = True
    thread.join(timeout=60)
    assert not thread.is_alive() and not live.scheduler.thread.is_alive()


def create(client, case, **kw):
    prompt, max_tokens, temperature, top_k, top_p, seed = case
    return client.completions.create(
        model="nanospec",
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        extra_body={"top_k": top_k},
        **kw,
    )


def text_of(tok, tokens: list[int]) -> str:
    return tok.decode(t for t in tokens if t != tok.eos_id)


@pytest.mark.parametrize("case", CASES, ids=["greedy", "sampled"])
def test_the_openai_client_gets_the_engines_tokens_streamed_or_not(live, case):
    want = live.reference[case]
    reason = "stop" if want[-1] == live.tok.eos_id else "length"
    whole = create(live.client(), case)
    assert whole.object == "text_completion" and whole.model == "nanospec"
    assert whole.choices[0].text == text_of(live.tok, want)
    assert whole.choices[0].finish_reason == reason
    prompt_tokens = len(live.tok.encode_prompt(case[0]))
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens) == (
        prompt_tokens,
        len(want),
        prompt_tokens + len(want),
    )

    chunks = list(create(live.client(), case, stream=True, stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole.choices[0].text and len(texts) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == reason
    assert all(c.id == chunks[0].id for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(want)
    # vLLM's continuous_usage_stats (guidellm asks for it): the counts so far in every chunk
    counted = list(
        create(
            live.client(),
            case,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
    )
    so_far = [c.usage.completion_tokens for c in counted]
    assert so_far == sorted(so_far) and so_far[-1] == len(want)
    assert all(c.usage.prompt_tokens == prompt_tokens for c in counted)


def test_models_and_health(live):
    models = live.client().models.list()
    assert [m.id for m in models.data] == ["nanospec"]
    assert httpx.get(live.url + "/health").status_code == 200


def test_metrics_count_what_the_clients_received(live):
    before = live.metrics()
    got = [create(live.client(), case) for case in CASES + CASES[:1]]
    eventually(lambda: live.metrics()["vllm:num_requests_running"] == 0, "the engine is idle")
    after = live.metrics()
    delta = {k: after[k] - before.get(k, 0) for k in after}
    assert delta["vllm:generation_tokens_total"] == sum(r.usage.completion_tokens for r in got)
    assert delta["vllm:prompt_tokens_total"] == sum(r.usage.prompt_tokens for r in got)
    assert delta["vllm:request_success_total{stop}"] + delta[
        "vllm:request_success_total{length}"
    ] == len(got)
    for name in ("time_to_first_token", "e2e_request_latency"):
        assert delta[f"vllm:{name}_seconds_count"] == len(got)
        assert delta[f"vllm:{name}_seconds_sum"] > 0
    assert delta["vllm:inter_token_latency_seconds_count"] > 0
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    drafted = delta["vllm:spec_decode_num_draft_tokens_total"]
    accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert 0 < drafts and drafted <= 3 * drafts and 0 <= accepted <= drafted
    # Each round emits its accepted drafts plus one token (a resample or the bonus), the last
    # round perhaps cut short by max_tokens.
    # (The draft model drafts every round; prompt lookup may not, and then this is looser.)
    assert delta["vllm:generation_tokens_total"] <= accepted + drafts
    assert after["vllm:num_requests_waiting"] == 0


GOOD = {"model": "nanospec", "prompt": "The capital", "max_tokens": 2}
BAD = [  # (what is wrong, body: a dict or raw text, status, param)
    ("not JSON", "{not json", 400, None),
    ("not an object", [1, 2], 400, None),
    ("unknown field", {**GOOD, "frobnicate": 1}, 400, "frobnicate"),
    (
        "unknown nested field",
        {**GOOD, "stream_options": {"include_usage": True, "extra": 1}},
        400,
        "stream_options.extra",
    ),
    ("no prompt", {"model": "nanospec"}, 400, "prompt"),
    ("prompt of wrong type", {**GOOD, "prompt": 7}, 400, "prompt"),
    ("seventeen prompts", {**GOOD, "prompt": ["one"] * 17}, 400, "prompt"),
    ("empty prompt", {**GOOD, "prompt": ""}, 400, "prompt"),
    ("prompt past the context", {**GOOD, "prompt": "word " * 80}, 400, "prompt"),  # ctx 64
    ("negative temperature", {**GOOD, "temperature": -1}, 400, "temperature"),
    ("temperature not a number", {**GOOD, "temperature": "hot"}, 400, "temperature"),
    ("top_p 0", {**GOOD, "top_p": 0}, 400, "top_p"),
    ("top_p above 1", {**GOOD, "top_p": 1.5}, 400, "top_p"),
    ("negative top_k", {**GOOD, "top_k": -2}, 400, "top_k"),
    ("max_tokens 0", {**GOOD, "max_tokens": 0}, 400, "max_tokens"),
    ("n 17", {**GOOD, "n": 17}, 400, "n"),
    ("logprobs past 20", {**GOOD, "logprobs": 21}, 400, "logprobs"),
    ("logprobs in a stream", {**GOOD, "logprobs": 1, "stream": True}, 400, "logprobs"),
    ("negative seed", {**GOOD, "seed": -1}, 400, "seed"),
    # Past int32, which JAX holds them in: top_k's once crashed the engine for good.
    ("top_k past int32", {**GOOD, "top_k": 2**31}, 400, "top_k"),
    ("seed past int32", {**GOOD, "seed": 2**31}, 400, "seed"),
    ("max_tokens past int32", {**GOOD, "max_tokens": 2**31}, 400, "max_tokens"),
    (
        "infinite temperature",
        '{"model": "nanospec", "prompt": "a", "temperature": Infinity}',
        400,
        "temperature",
    ),
    ("temperature 1e308", {**GOOD, "temperature": 1e308}, 400, "temperature"),
    ("temperature 100", {**GOOD, "temperature": 100}, 400, "temperature"),
    ("NaN top_p", '{"model": "nanospec", "prompt": "a", "top_p": NaN}', 400, "top_p"),
    ("empty stop string", {**GOOD, "stop": ""}, 400, "stop"),
    ("unknown model", {**GOOD, "model": "gpt-4o"}, 404, "model"),
]


@pytest.mark.parametrize("body, status, param", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_request_gets_its_status_and_openai_error_shape(live, body, status, param):
    raw = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(
        live.url + "/v1/completions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(r.json()) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].endswith(".") and "\n" not in error["message"]
    assert error["code"] == {404: "model_not_found"}.get(status, error["code"])


def test_other_mistakes_have_the_error_shape_too(live):
    no_json = httpx.post(live.url + "/v1/completions", content="model=nanospec")
    assert no_json.status_code == 400 and "Content-Type" in no_json.json()["error"]["message"]
    nothing = httpx.get(live.url + "/v1/nothing").json()["error"]["message"]
    assert nothing.startswith("GET /v1/nothing is not served here") and "/v1/completions" in nothing
    # The standard fields the official client may send, at values that ask for nothing, pass.
    ok = live.client().completions.create(
        model="nanospec",
        prompt="The",
        max_tokens=2,
        n=1,
        echo=False,
        best_of=1,
        logprobs=None,
        presence_penalty=0,
        frequency_penalty=0,
        logit_bias={},
        user="u1",
        suffix=None,
        stop=None,
    )
    assert ok.choices[0].finish_reason in ("stop", "length")


def hang_up(live, body: dict) -> None:
    """Send a request and close the connection without waiting for any answer."""
    raw = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", int(live.url.rsplit(":", 1)[1]))) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw)
        )


def test_a_full_queue_is_429_and_a_waiting_client_that_leaves_is_dropped(live):
    before = live.metrics()
    live.gate.close()  # the first request takes the slot it gets and stays there ...
    results = {}

    def ask(name):
        results[name] = create(live.client(), CASES[1])

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    eventually(lambda: live.metrics()["vllm:num_requests_running"] == 1, "first running")
    # A client that queues and leaves is dropped from the queue without ever running.
    hang_up(live, {**GOOD, "stream": True})
    eventually(
        lambda: (
            live.metrics()["vllm:request_success_total{abort}"]
            == before["vllm:request_success_total{abort}"] + 1
        ),
        "the leaver dropped",
    )
    assert live.metrics()["vllm:num_requests_waiting"] == 0
    # ... and while the first decodes (its step held), two more wait: one for the slot the
    # held engine cannot fill yet, one in the queue (of one). Slots and queue are all taken.
    others = [threading.Thread(target=ask, args=(name,)) for name in ("second", "third")]
    for t in others:
        t.start()
    eventually(lambda: live.metrics()["vllm:num_requests_waiting"] == 2, "two waiting")
    with pytest.raises(openai.RateLimitError) as refused:
        create(live.client(), CASES[0])
    assert refused.value.status_code == 429
    assert refused.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    live.gate.open()
    first.join()
    for t in others:
        t.join()
    want = text_of(live.tok, live.reference[CASES[1]])
    assert [results[n].choices[0].text for n in ("first", "second", "third")] == [want] * 3
    assert (
        live.metrics()["vllm:prompt_tokens_total"]
        == before["vllm:prompt_tokens_total"] + 3 * results["first"].usage.prompt_tokens
    )  # the leaver was never prefilled


def test_a_burst_fills_every_slot_and_the_queue_before_a_429(live):
    """Slots + queue requests are taken, however fast they come: a burst of S + Q + k gets
    exactly k 429s. The engine thread is held at its first insert, so the burst arrives while
    slots stand free but unfilled (as it does when requests come faster than admission) and
    nothing finishes meanwhile: the count is exact."""
    slots, k = live.gate.n_slots, 2
    live.gate.inserts.clear()
    results = {}

    def ask(i):
        results[i] = httpx.post(
            live.url + "/v1/completions", timeout=120, json={**GOOD, "max_tokens": 4, "seed": i}
        )

    burst = [threading.Thread(target=ask, args=(i,)) for i in range(slots + MAX_QUEUE + k)]
    try:
        for t in burst:
            t.start()
        s = live.scheduler
        eventually(
            lambda: len(results) + len(s.waiting) + len(s.admitting) + len(s.running) == len(burst),
            "every request answered or in flight",
        )
        refused = [r for r in results.values() if r.status_code == 429]
        assert len(refused) == len(results) == k, [r.text for r in results.values()]
        assert refused[0].json()["error"]["type"] == "rate_limit_error"
    finally:
        live.gate.inserts.set()
        for t in burst:
            t.join()
    assert (
        sorted(r.status_code for r in results.values()) == [200] * (slots + MAX_QUEUE) + [429] * k
    )


def test_prompts_to_score_are_admitted_like_generation(live):
    """echo with max_tokens 0 (scoring a prompt, as lm-eval does) takes a place in slots +
    queue like any request: with the engine thread held at a first request's insert, a burst
    of S + Q - 1 + k prompts to score gets exactly k 429s, and the rest wait their turn, then
    are answered. (Scoring once skipped the queue: the whole burst was taken at once, however
    large, and ran beside everything else.)"""
    slots, k, s = live.gate.n_slots, 2, live.scheduler
    score = {**GOOD, "echo": True, "max_tokens": 0, "logprobs": 2}
    results = {}

    def ask(i, body):
        results[i] = httpx.post(live.url + "/v1/completions", timeout=120, json=body)

    live.gate.inserts.clear()
    first = threading.Thread(target=ask, args=("first", {**GOOD, "max_tokens": 4}))
    burst = [
        threading.Thread(target=ask, args=(i, score)) for i in range(slots + MAX_QUEUE - 1 + k)
    ]
    try:
        first.start()
        eventually(lambda: len(s.admitting) == 1, "the engine thread holds the first request")
        for t in burst:
            t.start()
        eventually(
            lambda: len(results) + len(s.waiting) + len(s.admitting) == 1 + len(burst),
            "every request answered or in flight",
        )
        refused = [r for r in results.values() if r.status_code == 429]
        assert len(refused) == len(results) == k, [r.status_code for r in results.values()]
    finally:
        live.gate.inserts.set()
        for t in [first, *burst]:
            t.join()
    statuses = sorted(r.status_code for r in results.values())
    assert statuses == [200] * (slots + MAX_QUEUE) + [429] * k
    for r in results.values():
        if r.status_code == 200 and r.json()["choices"][0]["logprobs"]:  # the scored ones
            one = r.json()["choices"][0]
            assert one["text"] == GOOD["prompt"] and one["finish_reason"] == "length"
            assert len(one["logprobs"]["tokens"]) == r.json()["usage"]["prompt_tokens"]


def test_a_non_streaming_client_that_disconnects_is_cancelled_within_a_step(live):
    """Deltas come every step, here every 50 ms (faster than any poll for a hang-up would
    look): clients that wait for whole completions and hang up mid-decode are cancelled within
    a step or two, counted in engine steps, and their requests never run to max_tokens."""
    before = live.metrics()
    prompt_tokens = len(live.tok.encode_prompt(GOOD["prompt"]))
    body = {**GOOD, "max_tokens": 64 - prompt_tokens, "temperature": 1.0, "seed": 3}
    raw = json.dumps(body).encode()
    n = live.gate.n_slots + MAX_QUEUE  # every slot decoding, one waiting
    live.gate.pace = 0.05
    try:
        socks = []
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", int(live.url.rsplit(":")[-1]))))
            socks[-1].sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw)
            )
        eventually(
            lambda: (
                len(live.scheduler.running) == live.gate.n_slots
                and live.metrics()["vllm:generation_tokens_total"]
                > before["vllm:generation_tokens_total"]
            ),
            "every slot decoding",
        )
        live.gate.cancelled_at.clear()
        at_close = live.gate.steps
        for s in socks:
            s.close()
        eventually(
            lambda: not live.scheduler.running and not live.scheduler.waiting, "every slot free"
        )
    finally:
        live.gate.pace = 0.0
    eventually(
        lambda: (
            live.metrics()["vllm:request_success_total{abort}"]
            == before["vllm:request_success_total{abort}"] + n
        ),
        "all of them aborted",
        limit=5,
    )
    after = live.metrics()
    assert len(live.gate.cancelled_at) == live.gate.n_slots  # the waiting one left the queue
    # (the step running at the close, one more, and one for a busy machine)
    assert max(live.gate.cancelled_at) - at_close <= 3, (at_close, live.gate.cancelled_at)
    for reason in ("stop", "length"):  # none ran to its end
        assert (
            after[f"vllm:request_success_total{{{reason}}}"]
            == before[f"vllm:request_success_total{{{reason}}}"]
        )
    assert after["vllm:num_requests_running"] == after["vllm:num_requests_waiting"] == 0


def test_a_client_that_disconnects_mid_stream_frees_its_slot(live):
    before = live.metrics()
    live.gate.close(steps=1)  # one step: the request is running, and far from its 40 tokens
    body = {**GOOD, "max_tokens": 40, "temperature": 0, "seed": 0, "stream": True}
    with httpx.stream("POST", live.url + "/v1/completions", json=body) as r:
        assert r.status_code == 200  # the headers came: it is decoding; now hang up
    eventually(
        lambda: any(j.cancelled for j in live.scheduler.running.values()),
        "the server saw the client go",
    )
    live.gate.open()
    eventually(lambda: live.metrics()["vllm:num_requests_running"] == 0, "the slot is free")
    after = live.metrics()
    assert (
        after["vllm:request_success_total{abort}"]
        == before["vllm:request_success_total{abort}"] + 1
    )
    assert live.gate.free_slots == live.gate.n_slots
    again = create(live.client(), CASES[0])  # and the server goes on serving
    assert again.choices[0].text == text_of(live.tok, live.reference[CASES[0]])


def stop_for(text: str) -> str:
    """A two-character stop string from the middle of `text` (printable ASCII)."""
    return next(
        text[i : i + 2]
        for i in range(3, len(text) - 1)
        if text[i : i + 2].isascii() and text[i : i + 2].isprintable()
    )


def test_stop_strings_cut_the_text_and_free_the_slot(live):
    case = CASES[1]
    full = text_of(live.tok, live.reference[case])
    stop = stop_for(full)
    want = full[: full.index(stop)]
    whole = create(live.client(), case, stop=[stop, "never-in-here"])
    assert whole.choices[0].text == want and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens < len(live.reference[case])
    chunks = list(create(live.client(), case, stop=stop, stream=True))
    texts = [c.choices[0].text for c in chunks]
    # The pieces join to exactly the text before the stop: not even its first character,
    # which the server held back until the next step showed the stop, was ever sent.
    assert "".join(texts) == want and chunks[-1].choices[0].finish_reason == "stop"
    eventually(lambda: live.metrics()["vllm:num_requests_running"] == 0, "slots freed")


def test_a_draining_server_refuses_new_requests_with_503(live):
    """Generation and prompts to score alike (scoring was once answered, draining or not), and
    /health says 503 too, so that a load balancer sends the next request elsewhere."""
    live.scheduler.drain()
    try:
        for body in (GOOD, {**GOOD, "echo": True, "max_tokens": 0}):
            r = httpx.post(live.url + "/v1/completions", json=body)
            assert r.status_code == 503 and r.json()["error"]["type"] == "server_error", r.text
        health = httpx.get(live.url + "/health")
        assert health.status_code == 503 and "shutting down" in health.json()["error"]["message"]
    finally:
        live.scheduler.draining = False  # the module's other tests go on using it


def test_text_stream_holds_back_half_characters_and_stop_beginnings(tiny_tokenizer):
    tok = tiny_tokenizer
    s = TextStream(tok, [])
    assert s.push([0xC3]) == "" and s.push([0xA9]) == "é"  # "é" is the bytes c3 a9
    assert s.push([0xC3]) == "" and s.finish() == "\ufffd"  # cut off for good
    s = TextStream(tok, ["END"])
    assert s.push(tok.encode("the E")) == "the "
    assert s.push(tok.encode("N")) == "" and not s.stopped
    assert s.push(tok.encode("D and more")) == "" and s.stopped
    assert s.push(tok.encode("x")) == s.finish() == ""
    s = TextStream(tok, ["END"])
    assert s.push(tok.encode("the EN")) == "the " and s.finish() == "EN"  # no stop came


def test_text_stream_counts_a_stop_string_only_where_it_ends_after_min_tokens(tiny_tokenizer):
    """vLLM's min_tokens: a stop string that ends within the first min_tokens tokens is text
    like any other; one ending later (even one begun earlier) stops the stream. Byte tokens
    here, so each character is one token, pushed one at a time or all at once."""
    tok = tiny_tokenizer
    for pushes in ([[c] for c in b"a.b.c"], [list(b"a.b.c")]):
        s = TextStream(tok, ["."], min_tokens=2)
        assert "".join(s.push(ids) for ids in pushes) == "a.b" and s.stopped
    s = TextStream(tok, ["ab"], min_tokens=1)  # begun in the first token, ended in the second
    assert s.push([ord("a")]) == "" and s.push([ord("b")]) == "" and s.stopped
    s = TextStream(tok, ["."], min_tokens=3)
    assert s.push(list(b"a.b")) == "a.b" and s.finish() == "" and not s.stopped


def test_speculative_config_is_read_like_vllms(capsys):
    assert speculative_config('{"method": "draft_model", "num_speculative_tokens": 4}') == {
        "method": "draft",
        "gamma": 4,
    }
    assert speculative_config('{"method": "eagle"}') == {"method": "eagle"}
    for bad, fragment in (
        ("{oops", "JSON"),
        ('{"method": "suffix"}', "method"),
        ('{"method": "ngram", "model": "x"}', "does not know model"),
        ('{"method": "ngram", "num_speculative_tokens": 0}', "1 to 32"),
    ):
        assert main(["serve", "--speculative-config", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_process(
    python_args: list[str], *flags: str, checkpoints=SHIPPED
) -> tuple[subprocess.Popen, str]:
    """`nanospec serve FLAGS` on `checkpoints` (default the shipped ones) as its own process
    (started by `python PYTHON_ARGS`), and its URL, once /health answers 200."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            *python_args,
            "--checkpoints",
            str(checkpoints),
            "serve",
            "--port",
            str(port),
            *flags,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, proc.stderr.read()
        try:
            return httpx.get(url + "/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        eventually(up, "the server is up", limit=300)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, url


@pytest.mark.skipif(
    sys.platform == "win32",
    reason="on Windows SIGTERM is TerminateProcess: there is no drain to test",
)
def test_nanospec_serve_streams_and_drains_on_sigterm():
    """The real command on the shipped checkpoints, as a process: the same text streamed or
    not, then SIGTERM while a stream is in flight — it ends normally and the process exits 0.
    With --max-model-len: /v1/models says it, and a prompt past it is a 400."""
    proc, url = serve_process(
        ["-m", "nanospec"],
        "--speculative-config",
        '{"method": "draft_model", "num_speculative_tokens": 4}',
        "--slots",
        "2",
        "--max-model-len",
        "200",
    )
    try:
        assert httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"] == 200
        long = httpx.post(
            url + "/v1/completions", json={"model": "nanospec", "prompt": "Paris, " * 120}
        )
        assert long.status_code == 400 and "holds 200" in long.json()["error"]["message"]
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        ask = dict(
            model="nanospec", prompt="The capital of France is", max_tokens=24, temperature=0
        )
        whole = client.completions.create(**ask).choices[0].text
        streamed = "".join(c.choices[0].text for c in client.completions.create(**ask, stream=True))
        assert whole == streamed and whole.startswith(" Paris")
        # max_tokens must fit the context after the prompt (vLLM's rule): 8 + 200 > 200.
        over = httpx.post(
            url + "/v1/completions",
            json={"model": "nanospec", "prompt": "def capital_of(country):", "max_tokens": 200},
        )
        assert over.status_code == 400 and over.json()["error"]["param"] == "max_tokens"
        assert (
            "max_tokens is 200 but the prompt is 8 tokens and a request here holds 200"
            in over.json()["error"]["message"]
        )
        # A long one (132 tokens, then <|endoftext|>), signalled after its first chunk.
        stream = client.completions.create(
            **{**ask, "prompt": "def capital_of(country):", "max_tokens": 180}, stream=True
        )
        chunks = [next(stream)]
        proc.send_signal(signal.SIGTERM)  # mid-stream
        chunks += list(stream)
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        assert proc.wait(timeout=120) == 0
        log = proc.stderr.read()
        assert "draining: finishing 1 request in flight" in log and "Traceback" not in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_doctests():
    import doctest

    from nanospec.serving import api, launch, text

    assert [doctest.testmod(m).failed for m in (api, launch, text)] == [0, 0, 0]


def test_a_port_in_use_is_one_sentence(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", "--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Cannot listen on 127.0.0.1" in err


def test_a_huge_tokenize_stalls_neither_health_nor_a_running_stream(live):
    """While ~1 MB /tokenize requests (with token_strs) and /detokenize requests of 250k ids
    keep arriving, four at a time, /health answers and a running stream's chunks keep coming,
    each within 2 s: eight of this test's slowed steps, generous for a loaded 2-core machine.
    (Before the guard, each such /tokenize held the event loop for seconds while its 700k ids
    became JSON: measured here, /health and the stream stalled 2.7-4.4 s.) Both are refused
    unread now: the text is longer than any prompt the context holds, the ids more than it
    holds."""
    pace, bound = 0.25, 2.0  # seconds: a step, and the longest wait allowed
    bodies = {  # (about 1 MB each: the soak's, load/soak.py)
        "/tokenize": json.dumps({**HUGE["/tokenize"], "return_token_strs": True}).encode(),
        "/detokenize": json.dumps(HUGE["/detokenize"]).encode(),
    }
    flooding, codes, waits = threading.Event(), [], {"health": [], "chunks": []}

    def flood(path):
        while flooding.is_set():
            r = httpx.post(
                live.url + path,
                content=bodies[path],
                headers={"Content-Type": "application/json"},
                timeout=300,
            )
            codes.append(r.status_code)

    def probe():
        while flooding.is_set():
            start = time.monotonic()
            assert httpx.get(live.url + "/health", timeout=300).status_code == 200
            waits["health"].append(time.monotonic() - start)
            time.sleep(0.05)

    helpers = [threading.Thread(target=flood, args=(p,)) for p in ["/tokenize"] * 3]
    helpers += [
        threading.Thread(target=flood, args=("/detokenize",)),
        threading.Thread(target=probe),
    ]
    body = {**GOOD, "max_tokens": 40, "ignore_eos": True, "temperature": 0, "stream": True}
    live.gate.pace = pace
    flooding.set()
    try:
        with httpx.stream("POST", live.url + "/v1/completions", json=body, timeout=300) as r:
            last = None
            for line in (line for line in r.iter_lines() if line.startswith("data: ")):
                if last is None:  # the stream runs: now the flood begins
                    for t in helpers:
                        t.start()
                else:
                    waits["chunks"].append(time.monotonic() - last)
                last = time.monotonic()
    finally:
        flooding.clear()
        live.gate.pace = 0.0
        for t in helpers:
            if t.ident is not None:
                t.join()
    assert max(waits["chunks"]) < bound and max(waits["health"]) < bound, waits
    assert codes and set(codes) == {400}  # refused unread, every one
