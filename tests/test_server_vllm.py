"""What a vLLM user expects of `nanospec serve` beyond OpenAI's basics (server.py, api.py).

One server on a loopback port for the module (the tiny untrained models, a draft model with
γ = 3, two slots and a queue of two), started with an API key; its reference tokens come from
the same engine driven directly before the server starts.

- an API key: /v1 routes and /tokenize, /detokenize need it (401 in OpenAI's shape without it,
  or with another), /health and /metrics stay open; the flag wins over NANOSPEC_API_KEY;
- n choices, each its own job with seed + i, streamed with their index; all fit or 429;
- prompts as token ids, as a list, as a list of token-id lists (index p * n + i);
- vLLM's stop_token_ids and ignore_eos end (or do not end) a completion where the engine
  does, the stop token counted but not shown; min_tokens holds EOS, the stop ids and the stop
  strings back until that many tokens are made (above max_tokens: a 400);
- /tokenize and /detokenize in vLLM's shapes, tokenizing exactly as a completion's prompt is.
"""

import json
import threading

import httpx
import openai
import pytest

from nanospec.cli import main
from nanospec.decode import Bundle
from nanospec.serving.engine import Request
from nanospec.serving.launch import api_key_of, build_engine
from nanospec.serving.server import build_app
from tests.test_server import Gate, alone, eventually, serve_in_thread, serve_process, text_of, tiny

KEY = "sk-nanospec-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
SLOTS, MAX_QUEUE = 2, 2
GREEDY = ("The capital of France is", 16)  # (prompt, max_tokens), temperature 0
SAMPLED = {"temperature": 1.0, "top_k": 50, "top_p": 0.95}
PROMPTS = ["The capital", "The quick brown fox"]
SEED, MAX_NEW = 7, 8


class Server:
    def __init__(self, app, gate, tok, port):
        self.app, self.gate, self.tok = app, gate, tok
        self.url = f"http://127.0.0.1:{port}"
        self.scheduler = app.state.service.scheduler
        self.greedy: list[int] = []  # GREEDY's tokens
        self.sampled: dict[tuple[int, int], list[int]] = {}  # (prompt index, seed) -> tokens

    def client(self, key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0)

    def post(self, path: str, body, headers=AUTH) -> httpx.Response:
        return httpx.post(self.url + path, json=body, headers=headers, timeout=120)


@pytest.fixture(scope="module")
def server(tiny_tokenizer):
    tok = tiny_tokenizer
    bundle = Bundle(tok, {"target": tiny(tok, 0, "target"), "draft": tiny(tok, 1, "draft")})
    gate = Gate(build_engine(bundle, "draft", gamma=3, slots=SLOTS))
    greedy = alone(gate, Request(tok.encode_prompt(GREEDY[0]), GREEDY[1], 0.0))
    sampled = {
        (p, s): alone(
            gate, Request(tok.encode_prompt(PROMPTS[p]), MAX_NEW, *SAMPLED.values(), seed=s)
        )
        for p in range(len(PROMPTS))
        for s in (SEED, SEED + 1)
    }
    app = build_app(gate, tok, "nanospec", max_queue=MAX_QUEUE, api_key=KEY)
    uv, thread, port = serve_in_thread(app)
    server = Server(app, gate, tok, port)
    server.greedy, server.sampled = greedy, sampled
    yield server
    gate.open()
    uv.should_exit = True
    thread.join(timeout=60)


def error_of(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param
    assert error["message"].endswith(".") and "\n" not in error["message"]
    return error


def complete(server, **body) -> dict:
    r = server.post("/v1/completions", {"model": "nanospec", **body})
    assert r.status_code == 200, r.text
    return r.json()


# ------------------------------------------------------------ the API key


def test_without_the_key_every_guarded_route_is_401_and_health_stays_open(server):
    body = {"model": "nanospec", "prompt": "The", "max_tokens": 1}
    for path, payload in (
        ("/v1/completions", body),
        ("/tokenize", {"prompt": "The"}),
        ("/detokenize", {"tokens": [1]}),
    ):
        missing = error_of(server.post(path, payload, headers={}), 401)
        assert missing["type"] == "invalid_request_error" and missing["code"] is None
        wrong = server.post(path, payload, headers={"Authorization": "Bearer sk-wrong"})
        assert error_of(wrong, 401)["code"] == "invalid_api_key"
        assert "sk-wrong" not in wrong.text and KEY not in wrong.text
        assert wrong.headers["www-authenticate"] == "Bearer"
    for path in ("/v1/models", "/v1/models/nanospec", "/v1/nothing"):  # GETs too, and 404s
        assert httpx.get(server.url + path).status_code == 401
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 200
    # The scheme is case-insensitive (RFC 6750); the key itself is not.
    ok = server.post("/v1/completions", body, headers={"Authorization": f"bearer {KEY}"})
    assert ok.status_code == 200
    upper = server.post("/v1/completions", body, headers={"Authorization": f"Bearer {KEY.upper()}"})
    assert upper.status_code == 401


def test_the_openai_client_authenticates_with_its_api_key(server):
    assert server.client().models.list().data[0].id == "nanospec"
    done = server.client().completions.create(
        model="nanospec", prompt=GREEDY[0], max_tokens=GREEDY[1], temperature=0
    )
    assert done.choices[0].text == text_of(server.tok, server.greedy)
    with pytest.raises(openai.AuthenticationError) as refused:
        server.client("sk-wrong").completions.create(model="nanospec", prompt="The", max_tokens=1)
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"


def test_the_flag_wins_over_the_environment_and_a_blank_key_is_refused(monkeypatch, capsys):
    args = lambda key: type("Args", (), {"api_key": key})()
    monkeypatch.setenv("NANOSPEC_API_KEY", "from-env")
    assert api_key_of(args(None)) == "from-env" and api_key_of(args("flag")) == "flag"
    monkeypatch.delenv("NANOSPEC_API_KEY")
    assert api_key_of(args(None)) is None
    for bad in ("", " padded", "tab\tin"):
        assert main(["serve", "--api-key", bad]) == 2  # before any model loads
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "API key" in err and (not bad or bad not in err)


@pytest.mark.slow
def test_nanospec_serve_takes_the_flag_over_the_environment_and_never_prints_the_key(monkeypatch):
    monkeypatch.setenv("NANOSPEC_API_KEY", "sk-from-env")
    proc, url = serve_process(
        ["-m", "nanospec"], "--slots", "1", "--max-model-len", "64", "--api-key", "sk-from-flag"
    )
    try:
        body = {"model": "nanospec", "prompt": "The capital", "max_tokens": 2}
        for key, status in (("sk-from-env", 401), ("sk-from-flag", 200)):
            r = httpx.post(
                url + "/v1/completions",
                json=body,
                timeout=120,
                headers={"Authorization": f"Bearer {key}"},
            )
            assert r.status_code == status, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    log = proc.stderr.read()
    assert "API key required" in log and "sk-from" not in log


# ------------------------------------------------------------ n, and the forms of prompt


def test_n_greedy_choices_are_all_the_same_and_usage_counts_them_all(server):
    got = complete(server, prompt=GREEDY[0], max_tokens=GREEDY[1], temperature=0, n=3)
    want = text_of(server.tok, server.greedy)
    assert [c["index"] for c in got["choices"]] == [0, 1, 2]
    assert [c["text"] for c in got["choices"]] == [want] * 3
    prompt = len(server.tok.encode_prompt(GREEDY[0]))
    assert got["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": 3 * len(server.greedy),
        "total_tokens": prompt + 3 * len(server.greedy),
    }


def test_choice_i_samples_with_seed_plus_i_streamed_or_not(server):
    ask = dict(prompt=PROMPTS[0], max_tokens=MAX_NEW, seed=SEED, n=2, **SAMPLED)
    want = [text_of(server.tok, server.sampled[0, SEED + i]) for i in range(2)]
    assert [c["text"] for c in complete(server, **ask)["choices"]] == want
    chunks = list(
        server.client().completions.create(
            model="nanospec",
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"top_k": ask.pop("top_k")},
            **ask,
        )
    )
    texts, finishes = ["", ""], [None, None]
    for c in chunks[:-1]:
        (ch,) = c.choices  # one choice a chunk, at its own index
        texts[ch.index] += ch.text
        finishes[ch.index] = ch.finish_reason or finishes[ch.index]
    assert texts == want and finishes == ["length", "length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2 * MAX_NEW


def test_a_request_whose_choices_do_not_all_fit_is_429_or_400(server):
    """Slots + queue hold 4 jobs. With one held running, n = 4 does not fit now (429: none of
    its choices is queued) and n = 3 does; n = 5 never could (400)."""
    body = {"model": "nanospec", "prompt": "The capital", "max_tokens": 2}
    error = error_of(server.post("/v1/completions", {**body, "n": 5}), 400, "n")
    assert f"holds {SLOTS + MAX_QUEUE}" in error["message"]
    server.gate.close()
    results = {}
    held = threading.Thread(
        target=lambda: results.update(held=server.post("/v1/completions", {**body, "seed": 1}))
    )
    held.start()
    try:
        eventually(lambda: len(server.scheduler.running) == 1, "one request running")
        refused = server.post("/v1/completions", {**body, "n": 4})
        assert error_of(refused, 429)["code"] == "rate_limit_exceeded"
        assert not server.scheduler.waiting  # none of its four was queued
        fits = threading.Thread(
            target=lambda: results.update(fits=server.post("/v1/completions", {**body, "n": 3}))
        )
        fits.start()
        eventually(lambda: len(server.scheduler.waiting) == 3, "all three choices queued")
    finally:
        server.gate.open()
        held.join()
    fits.join()
    assert results["held"].status_code == results["fits"].status_code == 200
    assert len(results["fits"].json()["choices"]) == 3


def test_token_ids_and_lists_of_prompts_are_served_as_openai_numbers_them(server):
    ids = server.tok.encode_prompt(GREEDY[0])  # token ids are used as given: no start token
    by_ids = complete(server, prompt=ids, max_tokens=GREEDY[1], temperature=0)
    assert by_ids["choices"][0]["text"] == text_of(server.tok, server.greedy)
    assert by_ids["usage"]["prompt_tokens"] == len(ids)
    want = [text_of(server.tok, server.sampled[p, SEED + i]) for p in range(2) for i in range(2)]
    lists = [PROMPTS, [server.tok.encode_prompt(p) for p in PROMPTS]]
    for prompt in lists:  # index p * n + i: prompt p, choice i (seed + i), as each alone
        got = complete(server, prompt=prompt, n=2, seed=SEED, max_tokens=MAX_NEW, **SAMPLED)
        assert [c["index"] for c in got["choices"]] == [0, 1, 2, 3]
        assert [c["text"] for c in got["choices"]] == want
        assert got["usage"]["prompt_tokens"] == sum(
            len(server.tok.encode_prompt(p)) for p in PROMPTS
        )  # once each, n or not


def test_stop_token_ids_end_the_completion_and_the_token_is_counted_not_shown(server):
    want = server.greedy
    stop = next(t for t in want[2:] if t != server.tok.eos_id)
    k = want.index(stop)
    ask = dict(prompt=GREEDY[0], max_tokens=GREEDY[1], temperature=0, stop_token_ids=[stop])
    whole = complete(server, **ask)
    got = whole["choices"][0], whole["usage"]
    assert got[0]["text"] == text_of(server.tok, want[:k]) and got[0]["finish_reason"] == "stop"
    assert got[1]["completion_tokens"] == k + 1
    streamed = list(
        server.client().completions.create(
            model="nanospec",
            stream=True,
            extra_body={"stop_token_ids": [stop]},
            **{x: ask[x] for x in ask if x != "stop_token_ids"},
        )
    )
    assert "".join(c.choices[0].text for c in streamed) == got[0]["text"]
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_min_tokens_holds_the_stop_token_and_the_stop_string_back(server):
    """The greedy run's token k as a stop id (and its text as a stop string): with min_tokens
    k + 2 the completion cannot stop there; it makes at least k + 2 tokens, the first k the
    free run's. (test_engine.py checks the held tokens exactly.)"""
    want, tok = server.greedy, server.tok
    stop = next(t for t in want[2:] if t != tok.eos_id and tok.decode([t]).strip())
    k = want.index(stop)
    ask = dict(prompt=GREEDY[0], max_tokens=GREEDY[1], temperature=0, min_tokens=k + 2)
    assert (
        complete(server, **{**ask, "min_tokens": 0}, stop_token_ids=[stop])["usage"][
            "completion_tokens"
        ]
        == k + 1
    )
    held = complete(server, **ask, stop_token_ids=[stop])
    assert held["usage"]["completion_tokens"] >= k + 2  # token k was not the stop token
    assert held["choices"][0]["text"].startswith(text_of(tok, want[:k]))
    text = tok.decode([stop])
    by_string = complete(server, **ask, stop=[text])
    assert by_string["usage"]["completion_tokens"] >= k + 2
    assert by_string["choices"][0]["text"].startswith(text_of(tok, want[:k]))


def test_ignore_eos_goes_on_past_eos_to_max_tokens(server):
    """EOS made a token this greedy run makes mid-way (the engine reads its EOS at insert):
    without ignore_eos the completion ends there ("stop"), with it, at max_tokens."""
    want, engine = server.greedy, server.gate.engine
    eos = next(t for t in want[2:] if t != server.tok.eos_id)
    k, real = want.index(eos), engine.eos_id
    ask = dict(prompt=GREEDY[0], max_tokens=GREEDY[1], temperature=0)
    engine.eos_id = eos
    try:
        stopped = complete(server, **ask)
        ignored = complete(server, **ask, ignore_eos=True)
    finally:
        engine.eos_id = real
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == k + 1
    assert ignored["choices"][0]["finish_reason"] == "length"
    assert ignored["usage"]["completion_tokens"] == GREEDY[1] == len(want)
    assert ignored["choices"][0]["text"] == text_of(server.tok, want)


BAD = [  # (what is wrong, fields, param)
    ("an empty list", {"prompt": []}, "prompt"),
    ("an empty token list", {"prompt": [[]]}, "prompt"),
    ("a token past the vocabulary", {"prompt": [1, 300]}, "prompt"),  # tiny: 300 tokens
    ("a negative token", {"prompt": [[1], [-1]]}, "prompt"),
    ("strings and ids mixed", {"prompt": ["a", 1]}, "prompt"),
    ("a boolean token", {"prompt": [True]}, "prompt"),
    ("token ids past the context", {"prompt": [1] * 64}, "prompt"),
    ("n 0", {"n": 0}, "n"),
    ("best_of above n", {"n": 2, "best_of": 3}, "best_of"),
    ("a stop id past the vocabulary", {"stop_token_ids": [10**6]}, "stop_token_ids"),
    ("65 stop ids", {"stop_token_ids": [1] * 65}, "stop_token_ids"),
    ("ignore_eos a string", {"ignore_eos": "yes"}, "ignore_eos"),
    ("min_tokens above max_tokens", {"min_tokens": 3}, "min_tokens"),
    (
        "min_tokens above the default max_tokens",
        {"min_tokens": 17, "max_tokens": None},
        "min_tokens",
    ),
    ("min_tokens negative", {"min_tokens": -1}, "min_tokens"),
]


@pytest.mark.parametrize("fields, param", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_what_cannot_be_served_is_a_400_naming_the_field(server, fields, param):
    r = server.post(
        "/v1/completions", {"model": "nanospec", "prompt": "The", "max_tokens": 2, **fields}
    )
    error = error_of(r, 400, param)
    if fields.get("min_tokens", 0) > 0:
        assert "lower min_tokens or raise max_tokens" in error["message"]


def test_min_tokens_0_and_best_of_n_ask_for_nothing(server):
    got = complete(
        server, prompt=GREEDY[0], max_tokens=GREEDY[1], temperature=0, min_tokens=0, n=2, best_of=2
    )
    assert [c["text"] for c in got["choices"]] == [text_of(server.tok, server.greedy)] * 2


# ------------------------------------------------------------ /tokenize and /detokenize


def test_tokenize_is_what_a_completion_reads_and_detokenize_inverts_it(server):
    tok, text = server.tok, "The capital of France"
    got = server.post("/tokenize", {"model": "nanospec", "prompt": text}).json()
    assert got == {
        "tokens": tok.encode_prompt(text),
        "count": len(tok.encode_prompt(text)),
        "max_model_len": 64,
        "token_strs": None,
    }
    plain = server.post(
        "/tokenize", {"prompt": text, "add_special_tokens": False, "return_token_strs": True}
    ).json()
    assert plain["tokens"] == tok.encode(text) and "".join(plain["token_strs"]) == text
    back = server.post("/detokenize", {"model": "nanospec", "tokens": got["tokens"]}).json()
    assert back == {"prompt": "<|endoftext|>" + text}  # the start token, as text
    assert server.post("/detokenize", {"tokens": plain["tokens"]}).json() == {"prompt": text}


REFUSED = [  # (path, body, status, param)
    ("/tokenize", {"prompt": "a", "model": "gpt-4o"}, 404, "model"),
    ("/tokenize", {"prompt": ""}, 400, "prompt"),  # as /v1/completions refuses it
    ("/tokenize", {"prompt": 7}, 400, "prompt"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, 400, "add_special_tokens"),
    ("/tokenize", {"prompt": "a", "messages": []}, 400, "messages"),
    ("/tokenize", {}, 400, "prompt"),
    ("/detokenize", {"tokens": [300]}, 400, "tokens"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
    ("/detokenize", {"tokens": [1], "model": "gpt-4o"}, 404, "model"),
]


@pytest.mark.parametrize(
    "path, body, status, param", REFUSED, ids=[f"{r[0]} {json.dumps(r[1])}" for r in REFUSED]
)
def test_tokenize_and_detokenize_refuse_in_openais_shape(server, path, body, status, param):
    error_of(server.post(path, body), status, param)


def test_the_openapi_schema_documents_tokenize_and_detokenize(server):
    schema = httpx.get(server.url + "/openapi.json").json()
    for path, fields in (
        ("/tokenize", {"prompt", "add_special_tokens"}),
        ("/detokenize", {"tokens"}),
    ):
        post = schema["paths"][path]["post"]
        assert "422" not in post["responses"] and "400" in post["responses"]
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert fields <= set(schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"])
