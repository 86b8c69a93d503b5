"""`logprobs` and `echo` on /v1/completions (serving/logprobs.py), over real HTTP.

A server on a loopback port over the tiny untrained models (a draft model, γ = 3, two slots).
Every logprob it reports is checked against the target's law from a plain forward pass over
the same ids, computed here (jax.nn.log_softmax of the model's logits, nothing from score.py):
for a greedy and a sampled speculative completion, with and without echo, and for echo with
max_tokens 0 (a prompt's own log-likelihood, how lm-eval scores a model). The tokens the
server lists are the engine's own (from the engine driven directly, before the server starts),
top_logprobs are sorted and hold the argmax and the chosen token, and the official client
parses the reply; the passes run one at a time, however many ask. Bad values are 400s naming
the field.
"""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jax
import numpy as np
import pytest

from nanospec.decode import Bundle
from nanospec.model import forward
from nanospec.serving import logprobs
from nanospec.serving.engine import Request
from nanospec.serving.launch import build_engine
from nanospec.serving.server import build_app
from tests.test_server import CASES, Gate, alone, serve_in_thread, text_of, tiny

TOP = 3


@pytest.fixture(scope="module")
def live(tiny_tokenizer):
    tok = tiny_tokenizer
    target = tiny(tok, 0, "target")
    bundle = Bundle(tok, {"target": target, "draft": tiny(tok, 1, "draft")})
    gate = Gate(build_engine(bundle, "draft", gamma=3, slots=2))
    gate.reference = {
        case: alone(gate, Request(tok.encode_prompt(case[0]), *case[1:])) for case in CASES
    }
    app = build_app(gate, tok, "nanospec", max_queue=4)
    server, thread, port = serve_in_thread(app)
    gate.url, gate.tok, gate.target = f"http://127.0.0.1:{port}", tok, target
    yield gate
    server.should_exit = True
    thread.join(timeout=60)


def laws(target, ids: list[int]) -> np.ndarray:
    """(len(ids), V): the target's log-law after each position, one plain forward pass."""
    _, graphdef, params = target
    logits, _, _ = forward(graphdef, params, np.asarray([ids]), np.arange(len(ids))[None])
    return np.asarray(jax.nn.log_softmax(logits[0].astype(np.float32), axis=-1))


def shown(tok, token: int) -> str:
    """A token as the reply should show it: its text, or "bytes:\\xNN..." if not whole UTF-8."""
    data = tok.token_bytes(token)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data)


def post(live, **body) -> dict:
    r = httpx.post(live.url + "/v1/completions", timeout=120, json={"model": "nanospec", **body})
    assert r.status_code == 200, r.text
    return r.json()


def body_of(case, **kw) -> dict:
    prompt, max_tokens, temperature, top_k, top_p, seed = case
    return dict(
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        **kw,
    )


def check_against_forward(live, lp: dict, ids: list[int], listed: list[int]):
    """Each listed position's token, logprob and top_logprobs, against the forward pass."""
    law = laws(live.target, ids)
    assert lp["tokens"] == [shown(live.tok, ids[i]) for i in listed]
    for k, i in enumerate(listed):
        if i == 0:  # no context: no law
            assert lp["token_logprobs"][k] is None and lp["top_logprobs"][k] is None
            continue
        row = law[i - 1]
        assert lp["token_logprobs"][k] == pytest.approx(row[ids[i]], abs=1e-4)
        top = lp["top_logprobs"][k]
        values = list(top.values())
        assert values == sorted(values, reverse=True)
        assert TOP <= len(top) <= TOP + 1 and lp["tokens"][k] in top
        best = int(np.argmax(row))
        assert top[shown(live.tok, best)] == pytest.approx(row[best], abs=1e-4)
        assert values[0] == pytest.approx(row.max(), abs=1e-4)


@pytest.mark.parametrize("echo", [False, True], ids=["completion", "echo"])
@pytest.mark.parametrize("case", CASES, ids=["greedy", "sampled"])
def test_logprobs_are_the_targets_for_a_speculative_completion(live, case, echo):
    tok, generated = live.tok, live.reference[case]
    prompt = tok.encode_prompt(case[0])
    reply = post(live, **body_of(case, logprobs=TOP, echo=echo))
    c = reply["choices"][0]
    text = text_of(tok, generated)
    assert c["text"] == (case[0] + text if echo else text)
    ids = prompt + generated
    made_text = [len(prompt) + j for j, t in enumerate(generated) if t != tok.eos_id]
    listed = (list(range(len(prompt))) if echo else []) + made_text
    check_against_forward(live, c["logprobs"], ids, listed)
    offsets = c["logprobs"]["text_offset"]
    assert offsets == sorted(offsets) and all(o <= len(case[0] + text) for o in offsets)
    # Offsets count from the start of the prompt's text, echo or not (OpenAI's rule).
    assert offsets[len(listed) - len(made_text)] == len(case[0])
    if echo:
        assert offsets[:2] == [0, 0]  # the start token the server puts first spans no text
        assert len(prompt) == reply["usage"]["prompt_tokens"]


def test_echo_with_max_tokens_0_scores_the_prompt_alone(live):
    tok = live.tok
    text = "The capital of France is"
    prompt = tok.encode_prompt(text)
    reply = post(live, prompt=text, max_tokens=0, echo=True, logprobs=TOP)
    c = reply["choices"][0]
    assert c["text"] == text and c["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 0
    check_against_forward(live, c["logprobs"], prompt, list(range(len(prompt))))
    # Token ids as the prompt (lm-eval's way: no start token is added): the first is null.
    ids = tok.encode(text)
    c = post(live, prompt=ids, max_tokens=0, echo=True, logprobs=TOP)["choices"][0]
    assert c["text"] == text and c["logprobs"]["token_logprobs"][0] is None
    check_against_forward(live, c["logprobs"], ids, list(range(len(ids))))
    # Streamed, it is one chunk: the prompt's text.
    with httpx.stream(
        "POST",
        live.url + "/v1/completions",
        json={"model": "nanospec", "prompt": text, "max_tokens": 0, "echo": True, "stream": True},
    ) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == text


def test_scoring_runs_one_pass_at_a_time(live, monkeypatch):
    """Prompts to score (echo, max_tokens 0) and finished completions' logprobs share one
    scoring thread: six asked at once, the target's passes run one after another, each
    over at most the context, so however many wait, scoring's work at any moment is one pass
    (the server's slots + queue bound how many wait). (Each once took a worker thread of its
    own: six at once ran six passes side by side, slowing every stream.)"""
    real, lock, running, most = logprobs.score, threading.Lock(), [0], [0]

    def watched(*args, **kw):  # the real pass, counted, made long enough to overlap
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            time.sleep(0.05)
            return real(*args, **kw)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(logprobs, "score", watched)
    scored = dict(prompt="The capital of France is", max_tokens=0, echo=True, logprobs=TOP)
    bodies = [scored] * 4 + [body_of(CASES[0], logprobs=TOP)] * 2
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = list(pool.map(lambda body: post(live, **body), bodies))
    assert all(r["choices"][0]["logprobs"]["tokens"] for r in replies)
    assert most[0] == 1, f"{most[0]} passes at once"


def test_echo_streams_the_prompt_first(live):
    case = CASES[0]
    with httpx.stream(
        "POST",
        live.url + "/v1/completions",
        json={"model": "nanospec", **body_of(case, echo=True, stream=True)},
    ) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    texts = [e["choices"][0]["text"] for e in events]
    assert texts[0].startswith(case[0])
    assert "".join(texts) == case[0] + text_of(live.tok, live.reference[case])


def test_every_choice_has_its_own_logprobs(live):
    case = CASES[1]
    reply = post(live, **body_of(case, logprobs=0, n=2))
    for c in reply["choices"]:
        lp = c["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) > 0
        # logprobs 0: the chosen token alone
        assert all(list(top) == [t] for top, t in zip(lp["top_logprobs"], lp["tokens"]))


def test_the_openai_client_parses_logprobs_and_echo(live):
    import openai

    client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    got = client.completions.create(
        model="nanospec", prompt="The capital", max_tokens=4, temperature=0, logprobs=2, echo=True
    )
    lp = got.choices[0].logprobs
    assert got.choices[0].text.startswith("The capital")
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert (
        len(lp.tokens)
        == len(lp.token_logprobs)
        == len(lp.top_logprobs)
        == len(lp.text_offset)
        >= got.usage.prompt_tokens
    )
    assert all(isinstance(v, float) for v in lp.token_logprobs[1:])


GOOD = {"model": "nanospec", "prompt": "The capital", "max_tokens": 2}


@pytest.mark.parametrize(
    "body, param",
    [
        ({**GOOD, "logprobs": 21}, "logprobs"),
        ({**GOOD, "logprobs": -1}, "logprobs"),
        ({**GOOD, "logprobs": "2"}, "logprobs"),
        ({**GOOD, "echo": "yes"}, "echo"),
        ({**GOOD, "max_tokens": 0}, "max_tokens"),
        ({**GOOD, "max_tokens": -1, "echo": True}, "max_tokens"),
        ({**GOOD, "logprobs": 1, "stream": True}, "logprobs"),
    ],
    ids=[
        "logprobs 21",
        "logprobs -1",
        "logprobs a string",
        "echo a string",
        "max_tokens 0 without echo",
        "max_tokens -1",
        "logprobs in a stream",
    ],
)
def test_bad_logprobs_and_echo_are_400s_naming_the_field(live, body, param):
    r = httpx.post(live.url + "/v1/completions", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].endswith(".") and "\n" not in error["message"]
