"""The OpenAI completions API as nanospec speaks it: the request body, its checks, the replies.

A request body (https://platform.openai.com/docs/api-reference/completions):

    {"model": "nanospec", "prompt": "The capital of France is", "max_tokens": 16,
     "temperature": 0, "top_p": 1, "top_k": 0, "seed": 7, "stop": ["\\n"], "stream": true,
     "stream_options": {"include_usage": true}}

`prompt` takes OpenAI's four forms: a text, token ids (used as given: no start token is put
before them), or a list of up to 16 of either. `n` (1 to 16) completions of each prompt are
its choices, each its own engine job: choice i of a prompt samples with seed + i (so with
temperature 0 they are all the same), and prompt p's come at index p * n + i, as OpenAI
numbers them. A request's choices all fit in the server's slots + queue or it gets a 429 (a
400 if they could never fit); usage counts each prompt once and every choice's tokens.

vLLM's extensions: `top_k` (0 or -1: off), `ignore_eos` (go on past <|endoftext|> to
max_tokens), `stop_token_ids` (up to 64 more tokens that end a completion, as EOS does:
finish_reason "stop", the token counted in usage but not in the text) and `min_tokens` (up to
max_tokens: EOS and the stop ids are impossible before that many tokens, and stop strings count
only where they end after them, as in vLLM). `logprobs` (0 to 20: vLLM's limit, OpenAI's is 5)
and `echo` are OpenAI's (logprobs.py: the target's logprobs, whatever drafted the tokens);
`echo` with `max_tokens` 0 scores the prompt without generating (how lm-eval scores a model;
vLLM allows it, and max_tokens 0 is refused without echo); `logprobs` is refused in a stream
(it is scored once a choice ends). The other standard OpenAI fields are accepted at the values
that ask for nothing (the official client may send them: "suffix": null, "presence_penalty": 0,
...); any other value is a 400 that names the field, and so is a field OpenAI does not have. So
is anything OpenAI or vLLM refuse: a value of the wrong JSON type (no coercion: "max_tokens":
"16" or true, "stream": "yes"; a whole number is a valid float, "temperature": 1), more than 4
stop strings, stream_options without stream, and a max_tokens the context cannot hold after the
prompt (vLLM's rule; an omitted max_tokens is OpenAI's 16, or the room left if less). Every
error has OpenAI's shape:

    {"error": {"message": "temperature must be between 0 and 2, got -1.0.",
               "type": "invalid_request_error", "param": "temperature", "code": null}}

What this file deliberately leaves out: chat completions, logprobs in a stream, best_of (but
equal to n), penalties.
"""

import json
import time
import uuid

from pydantic import BaseModel, ConfigDict

from nanospec.score import MOST_TOP
from nanospec.settings import INT32_MAX, SettingError, check_settings


class ApiError(Exception):
    """A request the server refuses: HTTP status, one sentence, and OpenAI's param and code."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status,
            message,
            param,
            code,
            kind,
        )

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


class ErrorDetail(BaseModel):
    message: str  # one sentence
    type: str  # invalid_request_error, rate_limit_error, server_error, ...
    param: str | None  # the request field at fault, if one is
    code: str | None  # e.g. model_not_found, context_length_exceeded, rate_limit_exceeded


class ErrorBody(BaseModel):
    """Every error the server sends (for the OpenAPI schema: ApiError.body() builds it)."""

    error: ErrorDetail


# subtle: strict, as OpenAI's API is: "16" is not a number and "yes" is not a boolean here
# (pydantic's default would coerce both). In strict mode a float field still takes a whole
# number, so "temperature": 1 is 1.0.
STRICT = ConfigDict(extra="forbid", strict=True)


class StreamOptions(BaseModel):
    model_config = STRICT
    include_usage: bool = False  # one last chunk with the token counts
    continuous_usage_stats: bool = False  # vLLM's: the counts so far in every chunk too


class CompletionBody(BaseModel):
    """POST /v1/completions: every field OpenAI documents, plus vLLM's top_k."""

    model_config = STRICT
    model: str
    # OpenAI's four forms: a text, token ids, or a list of either (one set of choices each)
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = None  # None: OpenAI's 16, or the room the context has left
    temperature: float | None = 1.0  # 0 = greedy
    top_p: float | None = 1.0  # 1 = off
    top_k: int | None = 0  # vLLM's extension: 0 or -1 = off
    seed: int | None = None  # none: the server draws one
    stop: str | list[str] | None = None  # the text ends before the first of these
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1  # completions of each prompt, each its own engine job (seed + i)
    # vLLM's extensions:
    ignore_eos: bool = False  # go on past <|endoftext|> to max_tokens (fixed-length runs)
    stop_token_ids: list[int] | None = None  # more tokens that end a completion (not in its text)
    min_tokens: int = 0  # no EOS, stop token or stop string before this many tokens
    echo: bool | None = False  # the prompt's text (and with logprobs, its tokens) first
    logprobs: int | None = None  # None: none; k: each token's and the k likeliest (0 to 20)
    # OpenAI fields accepted only at the value that asks for nothing:
    best_of: int | None = None  # (or n: as many candidates as choices is n itself)
    suffix: str | None = None
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # an end-user id; nanospec has no use for it


class TokenizeBody(BaseModel):
    """POST /tokenize, as vLLM serves it: {"tokens", "count", "max_model_len"} back."""

    model_config = STRICT
    model: str | None = None  # if given, the served model's name
    prompt: str
    add_special_tokens: bool = True  # the start token /v1/completions puts before a text
    return_token_strs: bool | None = False  # also "token_strs": each token as text


class DetokenizeBody(BaseModel):
    """POST /detokenize, as vLLM serves it: {"prompt": the text of the tokens} back."""

    model_config = STRICT
    model: str | None = None
    tokens: list[int]


# field -> the values at which an unsupported OpenAI feature is off.
NOTHING_ASKED = {
    "suffix": (None, ""),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "logit_bias": (None, {}),
}


# field -> the closed range of its values (JAX holds the integers as int32; OpenAI's range for
# temperature). top_p's range, (0, 1], is checked with the sampling settings below.
RANGES = {
    "max_tokens": (0, INT32_MAX),
    "seed": (0, INT32_MAX),
    "top_k": (-1, INT32_MAX),
    "temperature": (0, 2),
    "n": (1, 16),
    "logprobs": (0, MOST_TOP),
    "min_tokens": (0, INT32_MAX),
}
# n's bound, 16 (OpenAI's is 128): every choice is a whole engine job, taking a slot or a
# place in the queue, and a request's choices are taken all together or not at all; past a
# small server's slots + queue a larger n could never run, and well before that one request
# would hold every slot. MAX_PROMPTS bounds a list of prompts the same way.
MAX_PROMPTS = 16
MAX_STOPS = 4  # OpenAI's limit on stop strings
MAX_STOP_IDS = 64  # stop_token_ids (vLLM has no limit; each is checked against every token)
DEFAULT_MAX_TOKENS = 16  # OpenAI's, for a request that leaves max_tokens out


def check_body(body: CompletionBody, served: str) -> None:
    """Raise ApiError (one sentence, the field named) for anything nanospec cannot serve."""
    if body.model != served:
        raise ApiError(
            404,
            f"The model {body.model!r} does not exist; this server serves {served!r}.",
            "model",
            "model_not_found",
        )
    for field, off in NOTHING_ASKED.items():
        if getattr(body, field) not in off:
            raise ApiError(
                400,
                f"{field} is not supported by nanospec; leave it out "
                f"(or at {json.dumps(off[-1])}).",
                field,
            )
    if body.best_of not in (None, body.n or 1):
        raise ApiError(
            400, "best_of is not supported by nanospec; leave it out (or equal to n).", "best_of"
        )
    if isinstance(body.prompt, list) and not body.prompt:
        raise ApiError(
            400, "prompt is an empty list; give a text, token ids, or a list of either.", "prompt"
        )
    if (
        isinstance(body.prompt, list)
        and isinstance(body.prompt[0], (str, list))
        and len(body.prompt) > MAX_PROMPTS
    ):
        raise ApiError(
            400, f"prompt takes at most {MAX_PROMPTS} prompts, got {len(body.prompt)}.", "prompt"
        )
    if len(body.stop_token_ids or ()) > MAX_STOP_IDS:
        raise ApiError(
            400,
            f"stop_token_ids takes at most {MAX_STOP_IDS} ids, got {len(body.stop_token_ids)}.",
            "stop_token_ids",
        )
    for field, (lo, hi) in RANGES.items():
        value = getattr(body, field)
        if value is not None and not lo <= value <= hi:  # NaN fails this too
            raise ApiError(400, f"{field} must be between {lo} and {hi}, got {value}.", field)
    if len(stops(body)) > MAX_STOPS:
        raise ApiError(
            400, f"stop takes at most {MAX_STOPS} strings, got {len(stops(body))}.", "stop"
        )
    if any(s == "" for s in stops(body)):
        raise ApiError(400, "A stop string is empty; every stop string needs a character.", "stop")
    if body.stream_options is not None and not body.stream:
        raise ApiError(
            400,
            "stream_options is only for a stream; set stream to true or leave stream_options out.",
            "stream_options",
        )
    if body.max_tokens == 0 and not body.echo:
        raise ApiError(
            400,
            "max_tokens must be at least 1 unless echo is true (max_tokens 0 "
            "with echo scores the prompt without generating).",
            "max_tokens",
        )
    if body.stream and body.logprobs is not None:
        raise ApiError(
            400,
            "logprobs cannot be streamed here: they are the target's, scored "
            "once a completion ends; leave stream out to get them.",
            "logprobs",
        )
    try:
        check_settings(*sampling(body))
    except SettingError as e:
        raise ApiError(400, str(e), e.field) from None


def check_prompt_chars(text: str, max_chars: int) -> None:
    """A prompt longer than `max_chars` characters cannot fit the context, whatever its tokens
    (see Service.max_chars): refuse it without tokenizing it."""
    if len(text) > max_chars:
        raise ApiError(
            400,
            f"The prompt is {len(text)} characters long, more than any prompt "
            f"a request here can hold ({max_chars} characters at most); "
            f"shorten it.",
            "prompt",
            "context_length_exceeded",
        )


def max_new_tokens(body: CompletionBody, prompt_tokens: int, n_ctx: int) -> int:
    """The tokens to generate: max_tokens, which must fit the context after the prompt (a 400
    naming both numbers, as vLLM does), or when it is left out OpenAI's 16, or the room left.

    >>> max_new_tokens(CompletionBody(model="m", prompt="p"), prompt_tokens=60, n_ctx=64)
    4
    """
    room = n_ctx - prompt_tokens  # at least 1: a prompt that fills the context is refused first
    if body.max_tokens is None:
        most = min(DEFAULT_MAX_TOKENS, room)
    elif body.max_tokens > room:
        raise ApiError(
            400,
            f"max_tokens is {body.max_tokens} but the prompt is {prompt_tokens} "
            f"tokens and a request here holds {n_ctx}, leaving room for {room}; "
            f"lower max_tokens or shorten the prompt.",
            "max_tokens",
            "context_length_exceeded",
        )
    else:
        most = body.max_tokens
    if body.min_tokens > most:
        given = "" if body.max_tokens is not None else ", left out,"
        raise ApiError(
            400,
            f"min_tokens is {body.min_tokens} but max_tokens{given} is {most}; "
            f"lower min_tokens or raise max_tokens.",
            "min_tokens",
        )
    return most


def sampling(body: CompletionBody) -> tuple[float, int, float]:
    """(temperature, top_k, top_p) with OpenAI's defaults for nulls and vLLM's -1 as 0."""
    temperature = 1.0 if body.temperature is None else body.temperature
    top_k = 0 if body.top_k in (None, -1) else body.top_k
    return temperature, top_k, 1.0 if body.top_p is None else body.top_p


def prompts(body: CompletionBody) -> list[str | list[int]]:
    """The request's prompts, each a text or token ids (choices index them in this order).

    >>> prompts(CompletionBody(model="m", prompt=[5, 6]))
    [[5, 6]]
    """
    if isinstance(body.prompt, str) or isinstance(body.prompt[0], int):
        return [body.prompt]
    return list(body.prompt)


def check_token_ids(ids: list[int], vocab: int, field: str) -> None:
    """Token ids given by the client (a prompt, stop_token_ids) must be in the vocabulary."""
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise ApiError(
            400,
            f"{field} holds the token id {bad}, outside the vocabulary (0 to {vocab - 1}).",
            field,
        )
    if field == "prompt" and not ids:
        raise ApiError(400, "A prompt of token ids is empty; give at least one id.", "prompt")


def stops(body: CompletionBody) -> list[str]:
    return [body.stop] if isinstance(body.stop, str) else list(body.stop or [])


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def choice(text: str, finish: str | None, index: int = 0, logprobs: dict | None = None) -> dict:
    """One choice of a completion (or of a chunk: finish None until its last)."""
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}


def completion(cid: str, model: str, choices: list[dict], **extra) -> dict:
    """A completion object, or one chunk of a stream of them (no choices: the usage chunk)."""
    return {
        "id": cid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **extra,
    }
