"""`nanospec serve` at the edges of the protocol: what it refuses, and how (server.py, api.py).

One server on a loopback port for the module (the tiny untrained target decoding plainly, one
slot, a context of 64), its tokenizer watched: a test sees which prompts were tokenized, and
can hold the tokenizing of a marked prompt.

- a body over the limit is a 413 in OpenAI's shape, whether it says its length or comes
  chunked; a prompt longer in characters than any the context holds is a 400 without being
  tokenized, at /tokenize as at /v1/completions, and /detokenize takes no more ids than the
  context; tokenizing runs off the event loop (/health answers while a prompt is held);
- a client that trickles its headers or its body in is cut off (this module's server allows
  SLOW seconds for each), and counted;
- what OpenAI or vLLM refuse is a 400 that names the field: a value of the wrong JSON type
  (no coercion), five stop strings, stream_options without stream, a max_tokens the context
  cannot hold after the prompt (an omitted max_tokens never is);
- a 405 carries its Allow header, the OpenAPI schema documents the 400s (no 422), /health
  has a JSON body, an empty body is one clear sentence;
- /v1/chat/completions and /v1/embeddings are 404s that say what is served, and
  /v1/models/{id} is the model (an unknown id: 404 naming it).
"""

import json
import socket
import threading
import time

import httpx
import openai
import pytest
from flax import nnx

from nanospec.decode import Bundle
from nanospec.model import GPT, ModelConfig
from nanospec.serving.launch import build_engine
from nanospec.serving.server import MAX_BODY_BYTES, build_app
from tests.test_server import serve_in_thread

N_CTX = 64
SLOW = 1.5  # seconds this module's server allows for a request's headers, and for its body
GOOD = {"model": "nanospec", "prompt": "The capital", "max_tokens": 2}
HOLD = "HOLD "  # a prompt that begins so waits, mid-tokenize, for its test to let it go


class Watched:
    """The tokenizer, recording every prompt it encodes and holding a HOLD prompt until
    `release` is set."""

    def __init__(self, tok):
        self.tok, self.encoded = tok, []
        self.holding, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def encode_prompt(self, text: str) -> list[int]:
        self.encoded.append(text)
        if text.startswith(HOLD):
            self.holding.set()
            assert self.release.wait(timeout=60)
        return self.tok.encode_prompt(text)


class Server:
    def __init__(self, app, tok, port):
        self.app, self.tok, self.url = app, tok, f"http://127.0.0.1:{port}"
        self.service = app.state.service

    def post(self, body, **kw) -> httpx.Response:
        raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return httpx.post(
            self.url + "/v1/completions",
            content=raw,
            timeout=60,
            headers={"Content-Type": "application/json"},
            **kw,
        )


@pytest.fixture(scope="module")
def server(tiny_tokenizer):
    cfg = ModelConfig.from_dict(
        {
            **ModelConfig.tiny(vocab_size=tiny_tokenizer.vocab_size, n_ctx=N_CTX).to_dict(),
            "name": "target",
        }
    )
    target = (cfg, *nnx.split(GPT(cfg, nnx.Rngs(0))))
    engine = build_engine(Bundle(tiny_tokenizer, {"target": target}), "ar", gamma=1, slots=1)
    tok = Watched(tiny_tokenizer)
    app = build_app(engine, tok, "nanospec", max_queue=4, headers_timeout=SLOW, body_timeout=SLOW)
    uv, thread, port = serve_in_thread(app)
    yield Server(app, tok, port)
    tok.release.set()
    uv.should_exit = True
    thread.join(timeout=60)


def openai_error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    """The error of `r`, checked: its status, OpenAI's shape, one sentence, the field named."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(r.json()) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["message"].endswith(".") and "\n" not in error["message"]
    return error


# ------------------------------------------------------------ size, and the event loop


def test_a_body_over_the_limit_is_413_with_or_without_its_length(server):
    raw = json.dumps({**GOOD, "prompt": "a" * MAX_BODY_BYTES}).encode()
    half = len(raw) // 2
    with httpx.Client(timeout=60) as client:  # one connection: it survives each refusal
        url, json_type = server.url + "/v1/completions", {"Content-Type": "application/json"}
        said = client.post(url, content=raw, headers=json_type)
        assert str(len(raw)) in openai_error(said, 413)["message"]
        # An iterator goes chunked, without a Content-Length: the bytes read are counted.
        chunked = client.post(url, content=iter([raw[:half], raw[half:]]), headers=json_type)
        assert chunked.request.headers.get("transfer-encoding") == "chunked"
        assert f"limit of {MAX_BODY_BYTES} bytes" in openai_error(chunked, 413)["message"]
        assert client.post(url, json=GOOD).status_code == 200
    assert not any(len(text) >= MAX_BODY_BYTES for text in server.tok.encoded)  # nor tokenized


def test_a_prompt_no_context_could_hold_is_refused_before_tokenizing(server):
    longest = server.service.max_chars  # n_ctx × the longest token's bytes
    r = server.post({**GOOD, "prompt": "x" * (longest + 1)})
    error = openai_error(r, 400, "prompt")
    assert error["code"] == "context_length_exceeded"
    assert f"{longest + 1} characters" in error["message"]
    assert "x" * (longest + 1) not in server.tok.encoded


def test_tokenizing_runs_off_the_event_loop(server):
    """While a prompt is held mid-tokenize, the server still answers everyone else."""
    results = {}
    held = threading.Thread(
        target=lambda: results.update(r=server.post({**GOOD, "prompt": HOLD + "the capital"}))
    )
    held.start()
    try:
        assert server.tok.holding.wait(timeout=60)
        assert httpx.get(server.url + "/health", timeout=20).status_code == 200
    finally:
        server.tok.release.set()
        held.join()
    assert results["r"].status_code == 200, results["r"].text


def test_tokenize_and_detokenize_are_bounded_like_a_prompt(server):
    """/tokenize refuses a text longer than any prompt the context holds, unread, as
    /v1/completions does (its tokenizer never sees it), and /detokenize more ids than the
    context holds; the schema says both limits."""
    longest = server.service.max_chars
    r = httpx.post(server.url + "/tokenize", json={"prompt": "x" * (longest + 1)})
    assert openai_error(r, 400, "prompt")["code"] == "context_length_exceeded"
    assert "x" * (longest + 1) not in server.tok.encoded
    fits = httpx.post(server.url + "/tokenize", json={"prompt": "x" * longest})
    assert fits.status_code == 200 and fits.json()["count"] > N_CTX  # counted, not refused
    r = httpx.post(server.url + "/detokenize", json={"tokens": [65] * (N_CTX + 1)})
    assert f"more than a request here holds ({N_CTX})" in openai_error(r, 400, "tokens")["message"]
    assert httpx.post(server.url + "/detokenize", json={"tokens": [65] * N_CTX}).status_code == 200
    bodies = httpx.get(server.url + "/openapi.json").json()["components"]["schemas"]
    assert bodies["TokenizeBody"]["properties"]["prompt"]["maxLength"] == longest
    assert bodies["DetokenizeBody"]["properties"]["tokens"]["maxItems"] == N_CTX
    text = bodies["CompletionBody"]["properties"]["prompt"]["anyOf"][0]
    assert text == {"type": "string", "maxLength": longest}


def trickle(server, head: bytes, drip: bytes) -> tuple[bytes, float]:
    """Send `head` at once, then `drip` a byte every 0.1 s until the server closes the
    connection (or 20 s pass): what it answered, and how long after `head` it closed."""
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as s:
        s.sendall(head)
        s.settimeout(0.1)
        start, answer = time.monotonic(), b""
        for byte in drip:
            if time.monotonic() - start > 20:  # held open: the caller says so
                break
            try:
                s.sendall(bytes([byte]))
                got = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset: closed
                break
            if not got:
                break
            answer += got
        return answer, time.monotonic() - start


def test_a_client_that_trickles_its_headers_or_body_is_closed_and_counted(server):
    """Headers that never end, and a body sent a byte at a time, each on its own connection:
    both are closed once SLOW seconds have passed (the body with a 408 in OpenAI's shape,
    which says so; headers have no request to answer), and /metrics counts one of each.
    (Both were once held open without limit.)"""

    def timeouts() -> dict[str, float]:
        text = httpx.get(server.url + "/metrics").text
        return {
            part: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            for part in ("headers", "body")
            if line.startswith("nanospec:client_timeouts_total{") and f'part="{part}"' in line
        }

    before, got = timeouts(), {}
    post = b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
    cases = {
        "headers": (b"", post + b"X-Slow: " + b"a" * 1000),
        "body": (post + b"Content-Length: 1000\r\n\r\n", b'{"model": "nanospec", ' + b" " * 900),
    }
    threads = [
        threading.Thread(target=lambda k=k: got.update({k: trickle(server, *cases[k])}))
        for k in cases
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for part, (_, seconds) in got.items():
        assert SLOW <= seconds < SLOW + 10, f"a trickling {part} was held {seconds:.1f} s"
    assert got["headers"][0] == b""
    status, _, body = got["body"][0].partition(b"\r\n")
    assert status == b"HTTP/1.1 408 Request Timeout", got["body"][0]
    error = json.loads(body.split(b"\r\n\r\n", 1)[1])["error"]
    assert "did not all arrive within 1.5 seconds" in error["message"]
    after = timeouts()
    assert {k: after[k] - before.get(k, 0) for k in after} == {"headers": 1, "body": 1}
    assert httpx.get(server.url + "/health").status_code == 200


# ------------------------------------------------------------ what OpenAI and vLLM refuse


REFUSED = [  # (what is wrong, body, param)
    ("five stop strings", {**GOOD, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    (
        "stream_options without stream",
        {**GOOD, "stream_options": {"include_usage": True}},
        "stream_options",
    ),
    (
        "stream_options with stream false",
        {**GOOD, "stream": False, "stream_options": {"include_usage": True}},
        "stream_options",
    ),
    ("max_tokens a string", {**GOOD, "max_tokens": "16"}, "max_tokens"),
    ("max_tokens true", {**GOOD, "max_tokens": True}, "max_tokens"),
    ("max_tokens 2.0", {**GOOD, "max_tokens": 2.0}, "max_tokens"),
    ("stream a string", {**GOOD, "stream": "yes"}, "stream"),
    ("stream 1", {**GOOD, "stream": 1}, "stream"),
    ("temperature a string", {**GOOD, "temperature": "1"}, "temperature"),
    ("seed a string", {**GOOD, "seed": "7"}, "seed"),
    (
        "include_usage a string",
        {**GOOD, "stream": True, "stream_options": {"include_usage": "yes"}},
        "stream_options",
    ),
    ("max_tokens past the context", {**GOOD, "max_tokens": N_CTX}, "max_tokens"),
]


@pytest.mark.parametrize("body, param", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_what_openai_or_vllm_refuse_is_a_400_naming_the_field(server, body, param):
    error = openai_error(server.post(body), 400, param)
    assert error["type"] == "invalid_request_error"


def test_max_tokens_must_fit_the_context_after_the_prompt(server):
    prompt = len(server.tok.encode_prompt(GOOD["prompt"]))
    room = N_CTX - prompt
    error = openai_error(server.post({**GOOD, "max_tokens": room + 1}), 400, "max_tokens")
    assert f"max_tokens is {room + 1} but the prompt is {prompt} tokens" in error["message"]
    assert f"holds {N_CTX}" in error["message"]
    full = server.post({**GOOD, "max_tokens": room, "temperature": 1})  # an int temperature
    assert full.status_code == 200, full.text
    assert full.json()["usage"]["completion_tokens"] <= room
    # Left out, max_tokens is OpenAI's 16, or the room left: never a 400.
    words = "The capital"
    while len(server.tok.encode_prompt(words + " of")) < N_CTX - 4:
        words += " of"
    long = len(server.tok.encode_prompt(words))
    assert N_CTX - long < 16
    for text, most in ((words, N_CTX - long), (GOOD["prompt"], 16)):
        r = server.post({"model": "nanospec", "prompt": text, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] <= most


# ------------------------------------------------------------ protocol and schema


def test_a_405_names_the_allowed_methods(server):
    for method, path, allowed in (
        ("GET", "/v1/completions", "POST"),
        ("POST", "/v1/models", "GET"),
    ):
        r = httpx.request(method, server.url + path)
        openai_error(r, 405)
        assert r.headers["allow"] == allowed


def test_the_openapi_schema_documents_the_400s_the_server_sends(server):
    schema = httpx.get(server.url + "/openapi.json").json()
    responses = schema["paths"]["/v1/completions"]["post"]["responses"]
    assert "422" not in responses and "422" not in json.dumps(schema["paths"])
    ref = responses["400"]["content"]["application/json"]["schema"]["$ref"]
    error = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert list(error["properties"]) == ["error"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_health_answers_with_a_small_json_body(server):
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"status": "ok"}


def test_an_empty_body_is_one_clear_sentence(server):
    error = openai_error(server.post(""), 400)
    assert error["message"] == (
        "The request body is empty; send a JSON object with at least model and prompt."
    )


# ------------------------------------------------------------ what is served


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_chat_and_embeddings_are_404s_that_say_what_is_served(server, path):
    r = httpx.post(server.url + path, json={"model": "nanospec", "input": "x"})
    message = openai_error(r, 404)["message"]
    assert message.startswith(f"POST {path} is not served") and "POST /v1/completions" in message


def test_a_model_is_retrieved_by_its_id(server):
    listed = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert httpx.get(server.url + "/v1/models/nanospec").json() == listed
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    assert client.models.retrieve("nanospec").id == "nanospec"
    error = openai_error(httpx.get(server.url + "/v1/models/gpt-4o"), 404, "model")
    assert error["code"] == "model_not_found" and "'gpt-4o'" in error["message"]
