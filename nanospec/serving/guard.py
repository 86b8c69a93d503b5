"""What every request passes on its way in, and every error on its way out (server.py).

On the way in (ASGI middleware, before any route reads the body): `ApiKey`, when the server
has a key, and `BodyLimit`, which refuses a body past MAX_BODY_BYTES with a 413 whether or not
it says its length, and one that has not all come within BODY_TIMEOUT_S of its headers with a
408 (and closes the connection). Below ASGI, before there is a request to answer, `timed_h11`
closes a connection whose request line and headers have not all come within HEADERS_TIMEOUT_S:
a client that trickles them in (or opens a connection and sends nothing) holds a socket and
its memory, and a thousand such clients would hold a thousand. Both timeouts are counted
(nanospec:client_timeouts_total, by part). On the way out: every error — the server's own ApiError, FastAPI's 422 for
a body it cannot read, Starlette's 404 and 405 — in OpenAI's shape (api.ApiError.body), and
the OpenAPI schema says so (ERRORS) instead of documenting FastAPI's 422.
"""

import asyncio
import hmac

from fastapi import Request as HttpRequest
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from nanospec.serving.api import ApiError, ErrorBody

# The largest request body (bytes). The longest prompt a context of n tokens can hold is
# n × (the longest token's bytes) characters (Service.max_chars): 256 × 17 = 4352 on the
# shipped models, under 52 KiB even as JSON escapes (12 bytes a character at most), so 1 MiB
# never refuses a request a model here could serve.
MAX_BODY_BYTES = 2**20
# How long a client has to send a request: its request line and headers, from the moment the
# connection opens or its last response ends (so longer than uvicorn's keep-alive of 5 s,
# which closes an idle connection first), and its whole body, from its headers: 30 s is
# 35 KB/s for the largest body, where nginx, for one, allows 60 s between two reads.
HEADERS_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
SERVED = (
    "POST /v1/completions, GET /v1/models, POST /tokenize, POST /detokenize, "
    "GET /health and GET /metrics"
)
# Routes that need the API key when the server has one (vLLM's rule: everything under /v1);
# /health and /metrics stay open to probes and scrapers.
GUARDED = ("/v1/", "/tokenize", "/detokenize")
# Where each route's fields are documented, and the ones it needs (validation_error).
BODIES = {
    "/tokenize": ("prompt", "vLLM's /tokenize"),
    "/detokenize": ("tokens", "vLLM's /detokenize"),
}


def error_response(e: ApiError, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


async def api_error(_, e: ApiError):
    return error_response(e)


async def invalid_request(request: HttpRequest, e: RequestValidationError):
    """FastAPI's 422 for a body it cannot read, as OpenAI's 400 (validation_error)."""
    if "json" not in request.headers.get("content-type", ""):
        return error_response(
            ApiError(
                400,
                "Send the request body as JSON, with the header Content-Type: application/json.",
            )
        )
    return error_response(validation_error(e.errors(), *BODIES.get(request.url.path, ())))


async def http_error(request: HttpRequest, e: HTTPException):
    """FastAPI's own errors (an unknown path, a wrong method: with its Allow header) in
    OpenAI's shape too; an unknown path says what is served."""
    message, headers = str(e.detail).rstrip(".") + ".", getattr(e, "headers", None)
    where = f"{request.method} {request.url.path}"
    if e.status_code == 404:
        message = f"{where} is not served here; nanospec serves text completions only: {SERVED}."
    elif e.status_code == 405 and headers and "Allow" in headers:
        message = f"{where} is not allowed; {request.url.path} takes {headers['Allow']}."
    return error_response(ApiError(e.status_code, message), headers)


class ApiKey:
    """ASGI middleware: every guarded route needs `Authorization: Bearer KEY`; without it, or
    with another key, a 401 in OpenAI's shape (its sentences and codes; a wrong key is never
    repeated back, nor logged). The key is compared in constant time (hmac.compare_digest),
    so how long a refusal takes says nothing about how much of a guess was right."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope["method"] == "OPTIONS"
            or not (path.startswith(GUARDED) or path == "/v1")
        ):
            return await self.app(scope, receive, send)
        scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not given:
            error = ApiError(
                401,
                "You didn't provide an API key; send it in the header Authorization: Bearer KEY.",
            )
        elif not hmac.compare_digest(given.strip(), self.key):
            error = ApiError(
                401,
                "Incorrect API key provided; send this server's key in the "
                "header Authorization: Bearer KEY.",
                code="invalid_api_key",
            )
        else:
            return await self.app(scope, receive, send)
        response = error_response(error, {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class BodyRefused(HTTPException):
    """A body refused while it streams in, past the limit (413) or too slow (408): FastAPI
    passes HTTPExceptions raised while it reads the body through to the app's handler,
    http_error."""


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is a 413 in OpenAI's shape — at once
    if its Content-Length says so, else as soon as the bytes read pass the limit (a chunked
    body has no length). uvicorn discards the rest of a body nobody read. A body that has not
    all come `seconds` after its headers is a 408 (`timed_out()` counts it) that closes the
    connection: the rest would come as slowly."""

    def __init__(self, app, limit: int, seconds: float = BODY_TIMEOUT_S, timed_out=None):
        self.app, self.limit, self.seconds, self.timed_out = app, limit, seconds, timed_out

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await error_response(self.too_large(int(length)))(scope, receive, send)
        seen, whole, due = 0, False, asyncio.get_running_loop().time() + self.seconds

        async def counted():
            nonlocal seen, whole
            if whole:  # what comes after the body is the hang-up, whenever the client leaves
                return await receive()
            try:
                left = due - asyncio.get_running_loop().time()
                message = await asyncio.wait_for(receive(), max(left, 0))
            except TimeoutError:
                if self.timed_out is not None:
                    self.timed_out()
                raise self.too_slow() from None
            whole = not message.get("more_body", False)
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyRefused(413, self.too_large().message)
            return message

        await self.app(scope, counted, send)

    def too_slow(self) -> HTTPException:
        """The 408 of a body too slow to come, closing the connection."""
        return BodyRefused(
            408,
            f"The request body did not all arrive within {self.seconds:g} seconds of its "
            f"headers; send it at once.",
            headers={"Connection": "close"},
        )

    def too_large(self, length: int | None = None) -> ApiError:
        size = "" if length is None else f" ({length} bytes)"
        return ApiError(
            413,
            f"The request body{size} is over this server's limit of "
            f"{self.limit} bytes; no prompt the model can hold needs that "
            f"many.",
        )


def timed_h11(seconds: float, timed_out=None) -> type:
    """uvicorn's h11 protocol (pass it as uvicorn's `http`), except that a request's line and
    headers must all come within `seconds` of the connection's opening or of its last
    response's end, else the connection is closed (there is no request yet to answer). A
    connection that sent part of a request meanwhile is a slow client, and `timed_out()` counts
    it; one that sent nothing is idle, closed uncounted (keep-alive's own timer closes most)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11(H11Protocol):
        received, timer = 0, None  # bytes so far; the pending check

        def connection_made(self, transport):
            super().connection_made(transport)
            self.expect_headers()

        def on_response_complete(self):
            super().on_response_complete()
            self.expect_headers()

        def connection_lost(self, exc):
            if self.timer is not None:
                self.timer.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self.received += len(data)
            super().data_received(data)

        def expect_headers(self):
            """Check in `seconds` that a request has come since now."""
            if self.timer is not None:
                self.timer.cancel()
            if not self.transport.is_closing():
                since = (self.cycle, self.received)
                self.timer = self.loop.call_later(seconds, self.headers_due, *since)

        def headers_due(self, cycle, received: int):
            # subtle: a new cycle means a request's headers came (uvicorn makes one per
            # request); the cycle checked may itself be one still running, pipelined behind
            # the last response, and then the check is its response's end's, not this one's.
            if self.cycle is not cycle or (cycle and not cycle.response_complete):
                return
            if self.received != received and timed_out is not None:
                timed_out()
            self.transport.close()

    return TimedH11


# The OpenAPI schema's errors: what the server sends, not FastAPI's default 422 (whose
# place "default" takes: any other status has the same shape).
ERRORS = {
    400: {"model": ErrorBody, "description": "A bad request; error.param names the field."},
    "default": {
        "model": ErrorBody,
        "description": "Any other error (401, 404, 408, 413, 429, 500, 503), in the same shape.",
    },
}


def validation_error(
    errors: list[dict], needs: str = "model and prompt", api: str = "the OpenAI completions API"
) -> ApiError:
    """FastAPI's validation errors (a body that is not JSON, a wrong type, an unknown or
    missing field) as one 400 that names the first problem (`needs`: the route's required
    fields, `api`: where its fields are documented)."""
    e = errors[0]
    where = [str(x) for x in e.get("loc", ()) if x != "body"]
    field = where[0] if where else None  # the top-level field, which OpenAI's "param" names
    if e["type"] == "json_invalid":
        return ApiError(400, "The request body is not valid JSON.")
    if e["type"] == "extra_forbidden":
        name = ".".join(where)
        return ApiError(
            400, f"Unknown field {name!r}; see {api} for the fields nanospec accepts.", name
        )
    if e["type"] == "missing":
        if field is None:  # no body at all
            return ApiError(
                400, f"The request body is empty; send a JSON object with at least {needs}."
            )
        return ApiError(400, f"The field {field!r} is required.", field)
    if field is None:
        return ApiError(400, "The request body must be a JSON object of completion settings.")
    # (Past the field, a location names the member of a union that failed: "prompt.str".)
    message = e["msg"][0].lower() + e["msg"][1:].rstrip(".")
    return ApiError(400, f"{field}: {message}.", field)
