"""`nanospec serve`: an OpenAI-compatible HTTP server over the continuous-batching engine.

    nanospec serve --method draft --gamma 4 --slots 8          # then, from anywhere:
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"model": "nanospec", "prompt": "The capital of France is", "max_tokens": 8}'

Or with OpenAI's own client: `OpenAI(base_url="http://localhost:8000/v1", api_key="-")`.

    POST /v1/completions   text, or server-sent events with "stream": true (api.py)
    GET  /v1/models        the one served model (and /v1/models/{id}: that model)
    POST /tokenize         vLLM's: a text's token ids, as /v1/completions reads a prompt
    POST /detokenize       vLLM's: token ids' text
    GET  /health           200 {"status": "ok"} while the engine thread runs, else 503
    GET  /metrics          Prometheus text, vLLM's metric names, and memory (metrics.py)

Anything else is a 404 (or a 405, with its Allow header) in OpenAI's error shape, saying what
is served: /v1/chat/completions and /v1/embeddings included.

The layers: FastAPI (on uvicorn) passes a request through guard.py (the API key, the body's
size), parses and checks it (api.py) and turns it into Jobs, one per choice (service.py); the
engine thread (scheduler.py) runs every job through the engine (engine.py) and posts
each step's text (text.py) back to the job's handler, which answers in one piece or streams.
The command itself — flags, warm-up, the socket, signals — is launch.py.

A client that leaves cancels its request, whatever it was waiting for: its place in the queue,
its whole completion, or the next event of its stream; its slot is free before the next step.

A request body is at most MAX_BODY_BYTES (413 past it, whether or not it says its length) and
must come within BODY_TIMEOUT_S of its headers, which must come within HEADERS_TIMEOUT_S
(guard.py); a prompt longer in characters than any the context can hold is refused before it
is tokenized (/v1/completions and /tokenize alike; /detokenize takes at most the context's
ids), and all text work happens on one worker thread (service.py), so one huge request cannot
stall every other client. A prompt scored without generating (echo, max_tokens 0) is admitted,
drained and counted like generation (scheduler.py).

With an API key (`nanospec serve --api-key`, or NANOSPEC_API_KEY), /v1/... and /tokenize,
/detokenize need `Authorization: Bearer KEY` (else 401, OpenAI's shape); /health and /metrics
stay open, as vLLM leaves them.

Shutting down (SIGTERM or Ctrl-C): the engine thread refuses anything new (503, /health too)
and finishes what it has, while the server still listens; then uvicorn stops listening, waits
for the open connections, and the engine thread ends (launch.draining).

What this file deliberately leaves out: chat completions, embeddings, TLS (put a proxy in
front), several keys or models.
"""

import asyncio
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from nanospec.serving.api import (
    ApiError,
    CompletionBody,
    DetokenizeBody,
    ErrorBody,
    TokenizeBody,
    completion_id,
)
from nanospec.serving.engine import Engine
from nanospec.serving.guard import (
    BODY_TIMEOUT_S,
    ERRORS,
    HEADERS_TIMEOUT_S,
    MAX_BODY_BYTES,
    ApiKey,
    BodyLimit,
    api_error,
    error_response,
    http_error,
    invalid_request,
    timed_h11,
)
from nanospec.serving.logprobs import target_scorer
from nanospec.serving.metrics import ServerMetrics
from nanospec.serving.scheduler import Scheduler
from nanospec.serving.service import Service


async def hung_up(request: HttpRequest) -> None:
    """Return when the client hangs up.

    Once the body is read, the server's next ASGI message for this request is
    `http.disconnect`, sent the moment the connection closes: waiting for it notices a client
    that leaves within a step, however fast the steps come (a poll between deltas would not)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def create_completion(body: CompletionBody, request: HttpRequest):
    """POST /v1/completions: the whole completion, or (stream) server-sent events."""
    svc: Service = request.app.state.service
    choices, cid = await svc.open(body), completion_id()
    # subtle: this handler listens for the hang-up only until it returns; a stream's response
    # then listens itself (Starlette's StreamingResponse), and two listeners must not overlap.
    gone = asyncio.ensure_future(hung_up(request))
    try:
        # Even a stream waits for its first delta, so that a request the engine refuses is
        # still an HTTP error rather than an error inside a 200 stream.
        first = await choices.next(gone)
        if body.stream and body.max_tokens != 0:
            return StreamingResponse(
                svc.events(choices, first, body, cid), media_type="text/event-stream"
            )
        texts, finish = [[] for _ in choices.jobs], [None] * len(choices.jobs)
        index, delta = first
        while True:
            texts[index].append(delta.text)
            finish[index] = delta.finish
            if choices.done:
                break
            index, delta = await choices.next(gone)
        whole = await svc.reply(choices, ["".join(t) for t in texts], finish, body, cid)
        return svc.prompts_only(whole, body, cid) if body.stream else whole
    finally:
        gone.cancel()


async def tokenize(body: TokenizeBody, request: HttpRequest):
    """POST /tokenize (vLLM's): a text's token ids, with the start token /v1/completions puts
    before a text prompt unless add_special_tokens is false. token_strs are each token's own
    text (a piece of a character shows as U+FFFD)."""
    svc: Service = request.app.state.service
    svc.check_model(body.model)
    # Exactly what /v1/completions runs and refuses (with add_special_tokens): a prompt longer
    # in characters than the context can hold is a 400 unread, the rest is tokenized (and its
    # token_strs made) on the text thread.
    ids, strs = await svc.encode(body.prompt, body.add_special_tokens, body.return_token_strs)
    return {"count": len(ids), "max_model_len": svc.n_ctx, "tokens": ids, "token_strs": strs}


async def detokenize(body: DetokenizeBody, request: HttpRequest):
    """POST /detokenize (vLLM's): the text of token ids, <|endoftext|> included as text."""
    svc: Service = request.app.state.service
    svc.check_model(body.model)
    return {"prompt": await svc.decode(body.tokens)}  # at most n_ctx ids, on the text thread


async def list_models(request: HttpRequest):
    return {"object": "list", "data": [request.app.state.service.model()]}


async def retrieve_model(model_id: str, request: HttpRequest):
    """GET /v1/models/{id}: the model object, as OpenAI's API answers it."""
    svc: Service = request.app.state.service
    svc.check_model(model_id)
    return svc.model()


async def health(request: HttpRequest):
    """200 with a small JSON body while the engine runs and takes requests, else 503 (a
    draining server finishes what it has: a load balancer should send the rest elsewhere).
    (vLLM's is an empty 200; probes read only the status, and a body with a content type is
    kinder to a person or a client that parses what it gets — the 503 is JSON too.)"""
    scheduler = request.app.state.service.scheduler
    if not scheduler.alive:
        why = "The engine thread is not running."
    elif scheduler.draining:
        why = "The server is shutting down: it finishes the requests it has and takes no new ones."
    else:
        return {"status": "ok"}
    return error_response(ApiError(503, why, code="service_unavailable", kind="server_error"))


async def metrics(request: HttpRequest):
    return Response(request.app.state.service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def served_schema(openapi, svc: Service):
    """FastAPI's schema with what this server takes written in: the one value `model` may take
    (an enum) in every body and path that has it — any other name is a 404, and a client or a
    fuzzer reading the schema should know that (schemathesis otherwise spends its cases on
    model_not_found) — and the longest prompt text (maxLength: svc.max_chars characters, in
    /v1/completions and /tokenize) and id list /detokenize takes (maxItems: svc.n_ctx)."""

    def schema() -> dict:
        spec = openapi()  # FastAPI builds it once and keeps it
        bodies = spec["components"]["schemas"]
        for body in bodies.values():
            model = body.get("properties", {}).get("model")
            for branch in model.get("anyOf", [model]) if model else []:
                if branch.get("type") == "string":
                    branch["enum"] = [svc.name]
        for param in spec["paths"]["/v1/models/{model_id}"]["get"]["parameters"]:
            param["schema"]["enum"] = [svc.name]
        texts = [bodies["TokenizeBody"]["properties"]["prompt"]]
        for branch in bodies["CompletionBody"]["properties"]["prompt"]["anyOf"]:
            texts.append(branch.get("items", branch))
        for text in texts:
            if text["type"] == "string":
                text["maxLength"] = svc.max_chars
        bodies["DetokenizeBody"]["properties"]["tokens"]["maxItems"] = svc.n_ctx
        return spec

    return schema


def build_app(
    engine: Engine,
    tokenizer,
    served_name: str = "nanospec",
    max_queue: int = 64,
    max_body_bytes: int = MAX_BODY_BYTES,
    api_key: str | None = None,
    headers_timeout: float = HEADERS_TIMEOUT_S,
    body_timeout: float = BODY_TIMEOUT_S,
) -> FastAPI:
    """The HTTP app over `engine` (with `api_key`, the guarded routes need it); its lifespan
    starts the engine thread and, at shutdown, drains and stops it. Serve it with uvicorn's
    http=app.state.http: the h11 protocol with `headers_timeout` (guard.timed_h11)."""
    meters = ServerMetrics(served_name, positions=engine.loop.depth)
    meters.memory(engine.state)
    scheduler = Scheduler(engine, meters, max_queue, target_scorer(engine))
    svc = Service(served_name, tokenizer, engine.max_len, scheduler, meters, int(time.time()))

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.stop)
        svc.text.shutdown()

    app = FastAPI(title="nanospec", lifespan=lifespan)
    app.state.service = svc
    app.state.http = timed_h11(headers_timeout, meters.timed_out["headers"].inc)
    app.add_api_route("/v1/completions", create_completion, methods=["POST"], responses=ERRORS)
    app.add_api_route("/v1/models", list_models, methods=["GET"])
    app.add_api_route(
        "/v1/models/{model_id:path}",
        retrieve_model,
        methods=["GET"],
        responses={
            404: {"model": ErrorBody, "description": "No such model."},
            "default": ERRORS["default"],
        },
    )
    app.add_api_route("/tokenize", tokenize, methods=["POST"], responses=ERRORS)
    app.add_api_route("/detokenize", detokenize, methods=["POST"], responses=ERRORS)
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route(
        "/metrics",
        metrics,
        methods=["GET"],
        response_class=PlainTextResponse,
        responses={
            200: {
                "description": "Prometheus's text format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    )
    app.openapi = served_schema(app.openapi, svc)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_middleware(
        BodyLimit,
        limit=max_body_bytes,
        seconds=body_timeout,
        timed_out=meters.timed_out["body"].inc,
    )
    if api_key:  # added last, so outermost: a client without the key is refused unread
        app.add_middleware(ApiKey, key=api_key)
    return app
