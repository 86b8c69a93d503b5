"""`nanospec serve`: an OpenAI-compatible HTTP server over the continuous-batching engine.

    nanospec serve --method draft --gamma 4 --slots 8          # then, from anywhere:
    curl localhost:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"model": "nanospec", "prompt": "The capital of France is", "max_tokens": 8}'

Or with OpenAI's own client: `OpenAI(base_url="http://localhost:8000/v1", api_key="-")`.

    POST /v1/completions   text, or server-sent events with "stream": true (api.py)
    GET  /v1/models        the one served model
    GET  /health           200 while the engine thread runs
    GET  /metrics          Prometheus text, vLLM's metric names, and memory (metrics.py)

The layers: FastAPI (on uvicorn) parses and checks a request (api.py) and turns it into a
Job; the engine thread (scheduler.py) runs every job through the engine (engine.py) and posts
each step's text (text.py) back to the job's handler, which answers in one piece or streams.
The command itself — flags, warm-up, the socket, signals — is launch.py.

A client that leaves cancels its request, whatever it was waiting for: its place in the queue,
its whole completion, or the next event of its stream; its slot is free before the next step.

Shutting down (SIGTERM or Ctrl-C): uvicorn stops accepting connections and waits for the open
ones; the engine thread refuses anything new (503) and finishes what it has; then it ends.

What this file deliberately leaves out: chat completions, authentication, TLS, several models.
"""

import asyncio
import json
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from nanospec.cli_args import INT32_MAX
from nanospec.errors import UserError
from nanospec.serving.api import (ApiError, CompletionBody, check_body, completion,
                                  completion_id, prompt_text, sampling, stops, usage,
                                  validation_error)
from nanospec.serving.engine import Engine, Request
from nanospec.serving.metrics import ServerMetrics
from nanospec.serving.scheduler import Job, Scheduler
from nanospec.serving.text import TextStream

HANG_UP_POLL = 0.25  # seconds between looks for a client that left before its response began


@dataclass
class Service:
    """What the handlers share: the served model's name, tokenizer and engine thread."""

    name: str
    tok: object
    n_ctx: int  # tokens a request may hold, prompt and completion (engine.max_len)
    scheduler: Scheduler
    metrics: ServerMetrics
    created: int  # when the server started (GET /v1/models)

    def open(self, body: CompletionBody) -> Job:
        """Check `body`, tokenize its prompt and queue it; any refusal is an ApiError."""
        check_body(body, self.name)
        try:
            ids = self.tok.encode_prompt(prompt_text(body))
        except UserError as e:
            raise ApiError(400, str(e), "prompt") from None
        if len(ids) >= self.n_ctx:
            raise ApiError(400, f"The prompt is {len(ids)} tokens long but a request here holds "
                                f"{self.n_ctx}, leaving no room to generate; shorten it.",
                           "prompt", "context_length_exceeded")
        seed = secrets.randbelow(INT32_MAX + 1) if body.seed is None else body.seed
        # subtle: the context bounds any completion, so a huge max_tokens is the context's end.
        max_new = min(16 if body.max_tokens is None else body.max_tokens, self.n_ctx)
        request = Request(ids, max_new, *sampling(body), seed=seed)
        job = Job(request, TextStream(self.tok, stops(body)), asyncio.get_running_loop())
        self.scheduler.submit(job)
        return job

    async def next_delta(self, job: Job, request: HttpRequest):
        """The job's next delta, or, if its client hangs up first, an end to the job.

        Until a response starts, nothing notices a client that leaves — one waiting in the
        queue, or for a whole completion — so this looks every HANG_UP_POLL seconds."""
        getting = asyncio.ensure_future(job.next())
        try:
            while not (await asyncio.wait({getting}, timeout=HANG_UP_POLL))[0]:
                if await request.is_disconnected():
                    raise ApiError(499, "The client closed the request.", kind="client_closed")
            return getting.result()
        except BaseException:  # the client left, the engine refused it, or we were cancelled
            getting.cancel()
            self.scheduler.cancel(job)
            raise

    async def events(self, job: Job, delta, body: CompletionBody, cid: str):
        """The stream of server-sent events, from the job's first delta to `data: [DONE]`."""
        options = body.stream_options
        with_usage = bool(options and options.include_usage)
        every = with_usage and options.continuous_usage_stats  # vLLM's extension (guidellm)
        prompt = len(job.request.prompt)
        try:
            while True:
                if delta.text or delta.finish:
                    extra = {"usage": usage(prompt, delta.tokens) if every else None}
                    yield sse(completion(cid, self.name, delta.text, delta.finish,
                                         **(extra if with_usage else {})))
                if delta.finish:
                    break
                delta = await job.next()
            if with_usage:
                yield sse(completion(cid, self.name, "", None, choices=False,
                                     usage=usage(prompt, delta.tokens)))
        except ApiError as e:  # the engine failed mid-stream: say so in the stream itself
            yield sse(e.body())
        finally:  # a client that disconnects lands here too (its task is cancelled)
            if not delta.finish:
                self.scheduler.cancel(job)
        yield "data: [DONE]\n\n"


def sse(obj: dict) -> str:
    """One server-sent event."""
    # subtle: ASCII only (non-ASCII text as \uXXXX escapes). Raw text may hold U+2028 or U+0085,
    # which some clients' line splitters (Python's str.splitlines, as httpx's aiter_lines
    # uses) take for line ends, cutting an event's JSON in two; an escape cannot be misread.
    return f"data: {json.dumps(obj)}\n\n"


async def create_completion(body: CompletionBody, request: HttpRequest):
    """POST /v1/completions: the whole completion, or (stream) server-sent events."""
    svc: Service = request.app.state.service
    job, cid = svc.open(body), completion_id()
    # Even a stream waits for its first delta, so that a request the engine refuses is
    # still an HTTP error rather than an error inside a 200 stream.
    delta = await svc.next_delta(job, request)
    if body.stream:
        return StreamingResponse(svc.events(job, delta, body, cid),
                                 media_type="text/event-stream")
    text = [delta.text]
    while not delta.finish:
        delta = await svc.next_delta(job, request)
        text.append(delta.text)
    return completion(cid, svc.name, "".join(text), delta.finish,
                      usage=usage(len(job.request.prompt), delta.tokens))


async def list_models(request: HttpRequest):
    svc: Service = request.app.state.service
    return {"object": "list", "data": [{"id": svc.name, "object": "model",
                                        "created": svc.created, "owned_by": "nanospec",
                                        "max_model_len": svc.n_ctx}]}


async def health(request: HttpRequest):
    if request.app.state.service.scheduler.alive:
        return Response(status_code=200)
    return error_response(ApiError(503, "The engine thread is not running.",
                                   kind="server_error"))


async def metrics(request: HttpRequest):
    return Response(request.app.state.service.metrics.exposition(),
                    media_type=CONTENT_TYPE_LATEST)


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


async def api_error(_, e: ApiError):
    return error_response(e)


async def invalid_request(request: HttpRequest, e: RequestValidationError):
    """FastAPI's 422 for a body it cannot read, as OpenAI's 400 (api.validation_error)."""
    if "json" not in request.headers.get("content-type", ""):
        return error_response(ApiError(400, "Send the request body as JSON, with the header "
                                            "Content-Type: application/json."))
    return error_response(validation_error(e.errors()))


async def http_error(_, e: HTTPException):
    """FastAPI's own errors (an unknown path, a wrong method) in OpenAI's shape too."""
    return error_response(ApiError(e.status_code, str(e.detail).rstrip(".") + "."))


def build_app(engine: Engine, tokenizer, served_name: str = "nanospec",
              max_queue: int = 64) -> FastAPI:
    """The HTTP app over `engine`; its lifespan starts the engine thread and, at shutdown,
    drains and stops it."""
    meters = ServerMetrics(served_name)
    meters.memory(engine.state)
    scheduler = Scheduler(engine, meters, max_queue, tokenizer.eos_id)

    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        yield
        await asyncio.to_thread(scheduler.stop)

    app = FastAPI(title="nanospec", lifespan=lifespan)
    app.state.service = Service(served_name, tokenizer, engine.max_len, scheduler,
                                meters, int(time.time()))
    app.add_api_route("/v1/completions", create_completion, methods=["POST"])
    app.add_api_route("/v1/models", list_models, methods=["GET"])
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    return app

