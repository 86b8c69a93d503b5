"""The OpenAI completions API as nanospec speaks it: the request body, its checks, the replies.

A request body (https://platform.openai.com/docs/api-reference/completions):

    {"model": "nanospec", "prompt": "The capital of France is", "max_tokens": 16,
     "temperature": 0, "top_p": 1, "top_k": 0, "seed": 7, "stop": ["\\n"], "stream": true,
     "stream_options": {"include_usage": true}}

`top_k` is vLLM's extension (0 or -1: off). The other standard OpenAI fields are accepted at
the values that ask for nothing (the official client may send them: "n": 1, "echo": false,
"logprobs": null, "presence_penalty": 0, ...); any other value is a 400 that names the field,
and so is a field OpenAI does not have. Every error has OpenAI's shape:

    {"error": {"message": "temperature must be between 0 and 2, got -1.0.",
               "type": "invalid_request_error", "param": "temperature", "code": null}}

What this file deliberately leaves out: chat completions, logprobs, echo, n > 1, penalties.
"""

import json
import time
import uuid

from pydantic import BaseModel, ConfigDict

from nanospec.cli_args import INT32_MAX, check_sampling
from nanospec.errors import UserError


class ApiError(Exception):
    """A request the server refuses: HTTP status, one sentence, and OpenAI's param and code."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (status, message, param,
                                                                       code, kind)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False  # one last chunk with the token counts
    continuous_usage_stats: bool = False  # vLLM's: the counts so far in every chunk too


class CompletionBody(BaseModel):
    """POST /v1/completions: every field OpenAI documents, plus vLLM's top_k."""

    model_config = ConfigDict(extra="forbid")
    model: str
    prompt: str | list[str]  # a list may hold one string (one prompt per request)
    max_tokens: int | None = 16  # OpenAI's default
    temperature: float | None = 1.0  # 0 = greedy
    top_p: float | None = 1.0  # 1 = off
    top_k: int | None = 0  # vLLM's extension: 0 or -1 = off
    seed: int | None = None  # none: the server draws one
    stop: str | list[str] | None = None  # the text ends before the first of these
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    # OpenAI fields accepted only at the value that asks for nothing:
    n: int | None = 1
    best_of: int | None = None
    echo: bool | None = False
    logprobs: int | None = None
    suffix: str | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # an end-user id; nanospec has no use for it


# field -> the values at which an unsupported OpenAI feature is off.
NOTHING_ASKED = {"n": (None, 1), "best_of": (None, 1), "echo": (None, False),
                 "logprobs": (None,), "suffix": (None, ""), "presence_penalty": (None, 0),
                 "frequency_penalty": (None, 0), "logit_bias": (None, {})}


# field -> the closed range of its values (JAX holds the integers as int32; OpenAI's range for
# temperature). top_p's range, (0, 1], is checked with the sampling settings below.
RANGES = {"max_tokens": (1, INT32_MAX), "seed": (0, INT32_MAX), "top_k": (-1, INT32_MAX),
          "temperature": (0, 2)}


def check_body(body: CompletionBody, served: str) -> None:
    """Raise ApiError (one sentence, the field named) for anything nanospec cannot serve."""
    if body.model != served:
        raise ApiError(404, f"The model {body.model!r} does not exist; this server serves "
                            f"{served!r}.", "model", "model_not_found")
    for field, off in NOTHING_ASKED.items():
        if getattr(body, field) not in off:
            raise ApiError(400, f"{field} is not supported by nanospec; leave it out "
                                f"(or at {json.dumps(off[-1])}).", field)
    if isinstance(body.prompt, list) and len(body.prompt) != 1:
        raise ApiError(400, f"prompt must be one string (or a list of one), got a list of "
                            f"{len(body.prompt)}.", "prompt")
    for field, (lo, hi) in RANGES.items():
        value = getattr(body, field)
        if value is not None and not lo <= value <= hi:  # NaN fails this too
            raise ApiError(400, f"{field} must be between {lo} and {hi}, got {value}.", field)
    if any(s == "" for s in stops(body)):
        raise ApiError(400, "A stop string is empty; every stop string needs a character.",
                       "stop")
    try:
        check_sampling(*sampling(body))
    except UserError as e:  # the CLI's sentence, with the API's field name for the flag's
        field = next(f for f in ("temperature", "top_k", "top_p")
                     if flag(f) in str(e))
        raise ApiError(400, str(e).replace(flag(field), field), field) from None


def flag(field: str) -> str:
    """The CLI flag that sets an API field: top_k -> --top-k."""
    return "--" + field.replace("_", "-")


def sampling(body: CompletionBody) -> tuple[float, int, float]:
    """(temperature, top_k, top_p) with OpenAI's defaults for nulls and vLLM's -1 as 0."""
    temperature = 1.0 if body.temperature is None else body.temperature
    top_k = 0 if body.top_k in (None, -1) else body.top_k
    return temperature, top_k, 1.0 if body.top_p is None else body.top_p


def prompt_text(body: CompletionBody) -> str:
    return body.prompt if isinstance(body.prompt, str) else body.prompt[0]


def stops(body: CompletionBody) -> list[str]:
    return [body.stop] if isinstance(body.stop, str) else list(body.stop or [])


def validation_error(errors: list[dict]) -> ApiError:
    """FastAPI's validation errors (a body that is not JSON, a wrong type, an unknown or
    missing field) as one 400 that names the first problem."""
    e = errors[0]
    where = [str(x) for x in e.get("loc", ()) if x != "body"]
    field = where[0] if where else None  # the top-level field, which OpenAI's "param" names
    if e["type"] == "json_invalid":
        return ApiError(400, "The request body is not valid JSON.")
    if e["type"] == "extra_forbidden":
        name = ".".join(where)
        return ApiError(400, f"Unknown field {name!r}; see the OpenAI completions API for "
                             f"the fields nanospec accepts.", name)
    if e["type"] == "missing":
        return ApiError(400, f"The field {field!r} is required.", field)
    if field is None:
        return ApiError(400, "The request body must be a JSON object of completion settings.")
    # (Past the field, a location names the member of a union that failed: "prompt.str".)
    message = e["msg"][0].lower() + e["msg"][1:].rstrip(".")
    return ApiError(400, f"{field}: {message}.", field)


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion(cid: str, model: str, text: str, finish: str | None, choices: bool = True,
               **extra) -> dict:
    """A completion object, or (finish None, or no choices) one chunk of a stream of them."""
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
    return {"id": cid, "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice] if choices else [], **extra}
