"""The server's per-request histograms, per-position acceptance, KV-cache usage and what a
"request" is (vLLM's: a choice; a prompt to score is one too) (serving/metrics.py), read from
/metrics the way Prometheus scrapes it.

A server on a loopback port over the tiny untrained models (a draft model, γ = 3, two slots),
its steps behind the gate of tests/test_server.py, which holds a request mid-decode so that
the KV-cache gauge can be read while it runs — exactly, without any sleep.
"""

import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nanospec.decode import Bundle
from nanospec.serving.launch import build_engine
from nanospec.serving.server import build_app
from tests.test_server import CASES, Gate, eventually, serve_in_thread, tiny

GAMMA, SLOTS = 3, 2
PHASES = (
    "request_queue_time",
    "request_prefill_time",
    "request_decode_time",
    "request_inference_time",
    "request_time_per_output_token",
    "time_to_first_token",
    "e2e_request_latency",
)


@pytest.fixture(scope="module")
def live(tiny_tokenizer):
    tok = tiny_tokenizer
    bundle = Bundle(tok, {"target": tiny(tok, 0, "target"), "draft": tiny(tok, 1, "draft")})
    gate = Gate(build_engine(bundle, "draft", gamma=GAMMA, slots=SLOTS))
    app = build_app(gate, tok, "nanospec", max_queue=4)
    server, thread, port = serve_in_thread(app)
    gate.url, gate.tok = f"http://127.0.0.1:{port}", tok
    yield gate
    gate.open()
    server.should_exit = True
    thread.join(timeout=60)


def scrape(live) -> dict[str, float]:
    """Every sample: {name: value}, a position label kept as name{i}."""
    out = {}
    for family in text_string_to_metric_families(httpx.get(live.url + "/metrics").text):
        for s in family.samples:
            reason, pos = s.labels.get("finished_reason"), s.labels.get("position")
            out[s.name + (f"{{{reason}}}" if reason else "") + (f"{{{pos}}}" if pos else "")] = (
                s.value
            )
    return out


def ask(live, case, **kw) -> dict:
    prompt, max_tokens, temperature, top_k, top_p, seed = case
    r = httpx.post(
        live.url + "/v1/completions",
        timeout=120,
        json={
            "model": "nanospec",
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "seed": seed,
            **kw,
        },
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_each_request_is_one_observation_of_every_phase(live):
    before = scrape(live)
    got = [ask(live, case) for case in CASES + CASES[:1]]
    eventually(lambda: scrape(live)["vllm:num_requests_running"] == 0, "idle")
    after = scrape(live)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    for name in PHASES:
        assert delta[f"vllm:{name}_seconds_count"] == len(got), name
    # The phases add up: waiting + prefill is the time to the first token, prefill + decode
    # the time in a slot.
    s = {name: delta[f"vllm:{name}_seconds_sum"] for name in PHASES}
    assert s["request_queue_time"] + s["request_prefill_time"] == pytest.approx(
        s["time_to_first_token"], rel=1e-6
    )
    assert s["request_prefill_time"] + s["request_decode_time"] == pytest.approx(
        s["request_inference_time"], rel=1e-6
    )
    assert all(r["usage"]["completion_tokens"] > 1 for r in got) and s["request_decode_time"] > 0


def test_a_prompt_is_counted_once_a_choice_and_a_scored_prompt_like_any(live):
    """vllm:prompt_tokens_total has vLLM's meaning: each choice is an engine request that reads
    its prompt, so n = 2 counts the prompt twice, where usage counts it once (vLLM's v1
    counts a request's prompt_len per child request: metrics.py). A prompt scored without
    generating (echo, max_tokens 0) is counted like any request: its prompt tokens, its end
    (finished_reason "length", as its reply says), its queue time and latency. (Scoring was
    once counted nowhere.)"""
    before = scrape(live)
    made = ask(live, CASES[0], n=2)
    scored = ask(live, CASES[0], n=2, max_tokens=0, echo=True, logprobs=1)
    eventually(lambda: scrape(live)["vllm:num_requests_running"] == 0, "idle")
    delta = {k: v - before.get(k, 0) for k, v in scrape(live).items()}
    prompt = made["usage"]["prompt_tokens"]  # counted once in usage, whatever n
    assert scored["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": 0,
        "total_tokens": prompt,
    }
    assert delta["vllm:prompt_tokens_total"] == 2 * prompt + 2 * prompt
    assert delta["vllm:generation_tokens_total"] == made["usage"]["completion_tokens"]
    ended = sum(delta[f"vllm:request_success_total{{{r}}}"] for r in ("stop", "length"))
    assert ended == 4 and delta["vllm:request_success_total{length}"] >= 2
    for name in ("request_queue_time", "e2e_request_latency"):
        assert delta[f"vllm:{name}_seconds_count"] == 4, name
    assert delta["vllm:time_to_first_token_seconds_count"] == 2  # scoring has no tokens


def test_per_position_acceptance_falls_with_position_and_sums_to_accepted(live):
    before = scrape(live)
    for seed in range(4):
        ask(live, CASES[1][:-1] + (seed,))
        ask(live, CASES[0])
    after = scrape(live)
    per_pos = [
        after[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{i}}}"]
        - before[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{i}}}"]
        for i in range(GAMMA)
    ]  # every position is exported, 0 or not
    accepted = (
        after["vllm:spec_decode_num_accepted_tokens_total"]
        - before["vllm:spec_decode_num_accepted_tokens_total"]
    )
    drafts = (
        after["vllm:spec_decode_num_drafts_total"] - before["vllm:spec_decode_num_drafts_total"]
    )
    assert per_pos == sorted(per_pos, reverse=True) and sum(per_pos) == accepted > 0
    assert per_pos[0] <= drafts
    assert not any(k.endswith(f"{{{GAMMA}}}") for k in after)  # positions 0 to γ-1 only


def test_kv_cache_usage_is_zero_when_idle_and_the_held_tokens_while_running(live):
    key = "vllm:kv_cache_usage_perc"
    eventually(lambda: scrape(live)["vllm:num_requests_running"] == 0, "idle")
    assert scrape(live)[key] == 0
    case = CASES[1]
    prompt = len(live.tok.encode_prompt(case[0]))
    capacity = SLOTS * live.max_len
    live.close()  # it takes a slot and is held before its first step
    result = {}
    asking = threading.Thread(target=lambda: result.update(ask(live, case)))
    asking.start()
    try:
        eventually(lambda: scrape(live)["vllm:num_requests_running"] == 1, "running")
        assert scrape(live)[key] == pytest.approx(prompt / capacity)  # the prompt alone
        live.close(steps=1)  # one step through, then held again
        with live.cond:
            live.cond.notify_all()
        eventually(lambda: scrape(live)[key] > prompt / capacity, "one step later, more")
        assert scrape(live)[key] < 1
    finally:
        live.open()
        asking.join()
    eventually(lambda: scrape(live)["vllm:num_requests_running"] == 0, "idle")
    assert scrape(live)[key] == 0 and result["usage"]["completion_tokens"] > 0
