"""What every request passes on its way in, and every error on its way out (server.py).

On the way in (ASGI middleware, before any route reads the body): `ApiKey`, when the server
has a key, and `BodyLimit`, which refuses a body past MAX_BODY_BYTES with a 413 whether or not
it says its length. On the way out: every error — the server's own ApiError, FastAPI's 422 for
a body it cannot read, Starlette's 404 and 405 — in OpenAI's shape (api.ApiError.body), and
the OpenAPI schema says so (ERRORS) instead of documenting FastAPI's 422.
"""

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


class BodyTooLarge(HTTPException):
    """A body past the limit, found while it streams in (FastAPI passes HTTPExceptions raised
    while it reads the body through to the app's handler: http_error, a 413)."""


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is a 413 in OpenAI's shape — at once
    if its Content-Length says so, else as soon as the bytes read pass the limit (a chunked
    body has no length). uvicorn discards the rest of a body nobody read."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await error_response(self.too_large(int(length)))(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyTooLarge(413, self.too_large().message)
            return message

        await self.app(scope, counted, send)

    def too_large(self, length: int | None = None) -> ApiError:
        size = "" if length is None else f" ({length} bytes)"
        return ApiError(
            413,
            f"The request body{size} is over this server's limit of "
            f"{self.limit} bytes; no prompt the model can hold needs that "
            f"many.",
        )


# The OpenAPI schema's errors: what the server sends, not FastAPI's default 422 (whose
# place "default" takes: any other status has the same shape).
ERRORS = {
    400: {"model": ErrorBody, "description": "A bad request; error.param names the field."},
    "default": {
        "model": ErrorBody,
        "description": "Any other error (401, 404, 413, 429, 500, 503), in the same shape.",
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
