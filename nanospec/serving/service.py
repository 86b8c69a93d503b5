"""What the HTTP handlers share (server.py): `Service` and `Choices`.

`Service` holds the served model's name, tokenizer and engine thread, and knows how a request
body becomes jobs and a reply; `Choices` is one request's jobs (one per choice) read as a
single stream of deltas.

Text work — tokenizing a prompt (/v1/completions, /tokenize), detokenizing ids (/detokenize) —
is bounded before it starts (a text no longer in characters than a prompt the context can
hold, `max_chars`; no more ids than it holds, `n_ctx`) and runs on one worker thread of its
own, never on the event loop: the event loop answers /health and every stream's next chunk,
and one huge request must not stall them (a 1 MB /tokenize once froze it for seconds: the
tokenizing was off the loop, but turning 700k ids into JSON was not).
"""

import asyncio
import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

from fastapi.responses import StreamingResponse

from nanospec.errors import UserError
from nanospec.serving.api import (
    ApiError,
    CompletionBody,
    check_body,
    check_prompt_chars,
    check_token_ids,
    choice,
    completion,
    max_new_tokens,
    prompts,
    sampling,
    stops,
    usage,
)
from nanospec.serving.engine import Request
from nanospec.serving.job import Delta, Job
from nanospec.serving.logprobs import echo_and_logprobs, echo_text
from nanospec.serving.metrics import ServerMetrics
from nanospec.serving.scheduler import Scheduler
from nanospec.serving.text import TextStream
from nanospec.settings import INT32_MAX


@dataclass
class Service:
    """What the handlers share: the served model's name, tokenizer and engine thread."""

    name: str
    tok: object
    n_ctx: int  # tokens a request may hold, prompt and completion (engine.max_len)
    scheduler: Scheduler
    metrics: ServerMetrics
    created: int  # when the server started (GET /v1/models)
    # the one thread every text work runs on (see the module's docstring)
    text: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="nanospec-text")
    )

    @cached_property
    def max_chars(self) -> int:
        """The most characters a prompt that fits the context can have: every token stands for
        at least one character and at most the longest token's bytes, so a longer prompt
        is more than n_ctx tokens whatever it says (e.g. 64 tokens × 13 bytes = 832)."""
        longest = max(len(b) for i, b in self.tok.vocab.items() if i != self.tok.eos_id)
        return self.n_ctx * longest

    def check_model(self, name: str | None) -> None:
        """A model named (None: left out, where that is allowed) must be the served one."""
        if name is not None and name != self.name:
            raise ApiError(
                404,
                f"The model {name!r} does not exist; this server serves {self.name!r}.",
                "model",
                "model_not_found",
            )

    def model(self) -> dict:
        """The served model, as GET /v1/models lists it (with vLLM's max_model_len)."""
        return {
            "id": self.name,
            "object": "model",
            "created": self.created,
            "owned_by": "nanospec",
            "max_model_len": self.n_ctx,
        }

    @property
    def vocab(self) -> int:
        """Token ids a client may send: those both the model and the tokenizer know."""
        return min(self.scheduler.engine.loop.cfg.vocab_size, self.tok.vocab_size)

    async def on_text_thread(self, work, *args):
        """`work(*args)`, run on the text thread (awaited here, off the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(self.text, work, *args)

    async def encode(
        self, text: str, special: bool = True, strs: bool = False
    ) -> tuple[list[int], list[str] | None]:
        """A text's ids (the start token first if `special`: as the model reads a prompt) and,
        if `strs`, each id's text; a text longer than any prompt the context can hold is
        refused before it is tokenized. Any refusal is an ApiError naming the prompt."""
        check_prompt_chars(text, self.max_chars)

        def work():
            ids = self.tok.encode_prompt(text) if special else self.tok.encode(text)
            return ids, [self.tok.token_str(t) for t in ids] if strs else None

        try:
            return await self.on_text_thread(work)
        except UserError as e:
            raise ApiError(400, str(e), "prompt") from None
        except UnicodeEncodeError:  # lone surrogates (encode_prompt says so itself)
            raise ApiError(400, "The prompt is not valid UTF-8 text.", "prompt") from None

    async def decode(self, ids: list[int]) -> str:
        """The text of token ids (<|endoftext|> as text): no more ids than a request holds."""
        if len(ids) > self.n_ctx:
            raise ApiError(
                400,
                f"tokens holds {len(ids)} ids, more than a request here holds "
                f"({self.n_ctx}); detokenize at most {self.n_ctx} at a time.",
                "tokens",
                "context_length_exceeded",
            )

        def work():
            check_token_ids(ids, self.tok.vocab_size, "tokens")
            return self.tok.decode(ids)

        return await self.on_text_thread(work)

    async def tokenize(self, prompt: str | list[int]) -> list[int]:
        """One prompt's ids: a text tokenized as the model reads it (the start token first),
        or token ids as given; any refusal is an ApiError naming the prompt."""
        if isinstance(prompt, list):
            if len(prompt) < self.n_ctx:  # (a longer one is refused below, unread)
                check_token_ids(prompt, self.vocab, "prompt")
            ids = prompt
        else:
            ids, _ = await self.encode(prompt)
        if len(ids) >= self.n_ctx:
            raise ApiError(
                400,
                f"The prompt is {len(ids)} tokens long but a request here holds "
                f"{self.n_ctx}, leaving no room to generate; shorten it.",
                "prompt",
                "context_length_exceeded",
            )
        return ids

    async def open(self, body: CompletionBody) -> "Choices":
        """Check `body`, tokenize its prompts and queue one job per choice (all or none);
        any refusal is an ApiError."""
        check_body(body, self.name)
        n = body.n or 1
        check_token_ids(body.stop_token_ids or [], self.vocab, "stop_token_ids")
        ids = [await self.tokenize(p) for p in prompts(body)]
        max_new = [max_new_tokens(body, len(p), self.n_ctx) for p in ids]
        room = self.scheduler.engine.n_slots + self.scheduler.max_queue
        if len(ids) * n > room:
            raise ApiError(
                400,
                f"This request asks for {len(ids) * n} completions but this "
                f"server holds {room} at once ({self.scheduler.engine.n_slots} "
                f"slots and a queue of {self.scheduler.max_queue}); lower n or "
                f"send fewer prompts.",
                "n" if n > 1 else "prompt",
            )
        seed = secrets.randbelow(INT32_MAX + 1) if body.seed is None else body.seed
        loop, stop_ids = asyncio.get_running_loop(), tuple(body.stop_token_ids or ())
        # max_tokens 0 (with echo): each prompt is scored, with body.logprobs alternatives.
        top = body.logprobs if body.max_tokens == 0 else None
        # Choice i of each prompt samples with seed + i (past int32, wrapped round to 0), so a
        # list of prompts is answered exactly as each prompt sent alone with the same seed.
        jobs = [
            Job(
                Request(
                    p,
                    most,
                    *sampling(body),
                    seed=(seed + i) % (INT32_MAX + 1),
                    ignore_eos=body.ignore_eos,
                    stop_ids=stop_ids,
                    min_new=body.min_tokens,
                ),
                TextStream(self.tok, stops(body), body.min_tokens),
                loop,
                top,
            )
            for p, most in zip(ids, max_new)
            for i in range(n)
        ]
        self.scheduler.submit(*jobs)  # scored prompts too: admitted, drained, counted alike
        return Choices(jobs, self.scheduler, n)

    async def scored(self, job: Job, ids: list[int], top: int):
        """The target's logprobs of `ids`: a scored prompt's own pass, or (a completion's
        logprobs, once it has ended) a pass on the scoring thread, one at a time."""
        if job.scored is not None:
            return job.scored
        scheduler = self.scheduler
        return await asyncio.get_running_loop().run_in_executor(
            scheduler.scorer, scheduler.score, ids, top
        )

    async def reply(
        self,
        choices: "Choices",
        texts: list[str],
        finish: list[str | None],
        body: CompletionBody,
        cid: str,
    ) -> dict:
        """The whole completion: every choice's text, with its prompt's first (echo) and its
        logprobs, scored on the scoring thread (logprobs.py), if the body asks for them."""
        scored = await asyncio.gather(
            *(
                echo_and_logprobs(
                    lambda ids, top, job=job: self.scored(job, ids, top),
                    self.tok,
                    job.request.prompt,
                    job.ids,
                    text,
                    bool(body.echo),
                    body.logprobs,
                )
                for job, text in zip(choices.jobs, texts)
            )
        )
        return completion(
            cid,
            self.name,
            [choice(text, f, i, lp) for i, ((text, lp), f) in enumerate(zip(scored, finish))],
            usage=choices.usage(),
        )

    def prompts_only(self, whole: dict, body: CompletionBody, cid: str) -> StreamingResponse:
        """echo with max_tokens 0, streamed: the reply `whole` (each prompt's text, nothing
        generated, finish_reason "length" as vLLM answers it) as one chunk a choice."""

        async def events():
            for one in whole["choices"]:
                yield sse(completion(cid, self.name, [one]))
            if body.stream_options and body.stream_options.include_usage:
                yield sse(completion(cid, self.name, [], usage=whole["usage"]))
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def events(
        self, choices: "Choices", first: tuple[int, Delta], body: CompletionBody, cid: str
    ):
        """The stream of server-sent events, from the first delta to `data: [DONE]`: each
        chunk carries one choice's new text, at that choice's index."""
        options = body.stream_options
        with_usage = bool(options and options.include_usage)
        every = with_usage and options.continuous_usage_stats  # vLLM's extension (guidellm)
        index, delta = first
        echoed = set() if body.echo else set(range(len(choices.jobs)))
        try:
            while True:
                if delta.text or delta.finish:
                    so_far = usage(choices.prompt_tokens(index), delta.tokens)
                    extra = {"usage": so_far if every else None}
                    text = delta.text  # with echo, a choice's first chunk starts with its prompt
                    if index not in echoed:
                        text = echo_text(self.tok, choices.jobs[index].request.prompt) + text
                        echoed.add(index)
                    yield sse(
                        completion(
                            cid,
                            self.name,
                            [choice(text, delta.finish, index)],
                            **(extra if with_usage else {}),
                        )
                    )
                if choices.done:
                    break
                index, delta = await choices.next()
            if with_usage:
                yield sse(completion(cid, self.name, [], usage=choices.usage()))
        except ApiError as e:  # the engine failed mid-stream: say so in the stream itself
            yield sse(e.body())
        finally:  # a client that disconnects lands here too (its task is cancelled)
            choices.cancel()
        yield "data: [DONE]\n\n"


class Choices:
    """One request's jobs, one per choice (index p * n + i: prompt p's i-th), read as a
    single stream of (index, delta) in the order the engine thread posts them."""

    def __init__(self, jobs: list[Job], scheduler: Scheduler, n: int):
        self.jobs, self.scheduler, self.n = jobs, scheduler, n
        self.getting: dict[int, asyncio.Future] = {}  # index -> its job's next delta
        self.tokens = [0] * len(jobs)  # each choice's tokens so far
        self.finished: set[int] = set()

    @property
    def done(self) -> bool:
        return len(self.finished) == len(self.jobs)

    def prompt_tokens(self, index: int) -> int:
        return len(self.jobs[index].request.prompt)

    def usage(self) -> dict:
        """Every prompt counted once (vLLM's way, whatever n), and every choice's tokens."""
        prompt = sum(self.prompt_tokens(i) for i in range(0, len(self.jobs), self.n))
        return usage(prompt, sum(self.tokens))

    async def next(self, gone: asyncio.Future | None = None) -> tuple[int, Delta]:
        """The next delta of any unfinished choice, or, if the client hangs up first (`gone`),
        an end to them all; a choice's error ends them all too."""
        for i, job in enumerate(self.jobs):
            if i not in self.finished and i not in self.getting:
                self.getting[i] = asyncio.ensure_future(job.next())
        try:
            await asyncio.wait(
                {*self.getting.values(), *([gone] if gone else [])},
                return_when=asyncio.FIRST_COMPLETED,
            )
            ready = [i for i, f in self.getting.items() if f.done()]
            if not ready:
                raise ApiError(499, "The client closed the request.", kind="client_closed")
            index = min(ready)
            delta = self.getting.pop(index).result()
        except BaseException:  # the client left, the engine refused one, or we were cancelled
            self.cancel()
            raise
        self.tokens[index] = delta.tokens
        if delta.finish:
            self.finished.add(index)
        return index, delta

    def cancel(self) -> None:
        """End every choice still running or waiting (nothing, once all have finished)."""
        for f in self.getting.values():
            f.cancel()
        self.getting.clear()
        for i, job in enumerate(self.jobs):
            if i not in self.finished:
                self.scheduler.cancel(job)


def sse(obj: dict) -> str:
    """One server-sent event."""
    # subtle: ASCII only (non-ASCII text as \uXXXX escapes). Raw text may hold U+2028 or U+0085,
    # which some clients' line splitters (Python's str.splitlines, as httpx's aiter_lines
    # uses) take for line ends, cutting an event's JSON in two; an escape cannot be misread.
    return f"data: {json.dumps(obj)}\n\n"
