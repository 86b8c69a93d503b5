"""A load generator for an OpenAI-compatible server: streamed completions, timed per chunk.

    ask = Ask(model="nanospec", max_tokens=32, temperature=0.0)
    results, seconds = asyncio.run(closed_loop("http://127.0.0.1:8000", prompts, ask, 8, 64))
    print(summarize(results, seconds)["tpot_ms"])       # {'p50': ..., 'p90': ..., 'p99': ...}

Two ways to load a server (vLLM's benchmark_serving has both):

- closed loop: C clients, each sending its next request the moment its last one ends, so C
  requests are in flight (all but the last few): the server's throughput at concurrency C;
- open loop: requests arrive as a Poisson process, λ a second, whatever the server is doing,
  so a server slower than λ builds a queue: the latency a user sees at a given demand.

What is timed, per request, on the client's clock, from the moment it is sent:

    TTFT    the first chunk that carries text
    ITL     the gaps between successive chunks that carry text
    e2e     the last chunk that carries text (vLLM's benchmark calls it "latency")
    TPOT    (e2e − TTFT) / (tokens − 1): time per output token after the first (none for a
            request of one token)
    tokens  completion_tokens of the final usage chunk (stream_options.include_usage), or, from
            a server that sends none, the chunks counted

subtle: a chunk is one engine step, and a speculative round can carry several tokens in one
chunk, so ITL is per *chunk*, not per token — a speculative server's ITL is the time between
rounds. TPOT is per token. Both as vLLM's benchmark defines them. A worked example: chunks at
0.5, 0.7 and 1.1 s carrying 1, 3 and 2 tokens give TTFT 0.5, ITL [0.2, 0.4], e2e 1.1 and
TPOT (1.1 − 0.5) / (6 − 1) = 0.12 s.

Also here: the server's /metrics read as numbers, and what changed over a run (acceptance).

What this file deliberately leaves out: chat completions, and a tokenizer (prompts are text;
the server counts tokens).
"""

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = httpx.Timeout(900.0, connect=30.0)  # a safety limit: a request at C=64 can wait long
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Ask:
    """What every request of a run asks for (each adds its own prompt and seed)."""

    model: str  # the served model's name (GET /v1/models)
    max_tokens: int = 32  # tokens to generate (fewer if the model ends the text)
    temperature: float = 0.0  # 0: greedy
    ignore_eos: bool = False  # vLLM's: every request runs to max_tokens (fixed-length runs)
    api_key: str | None = field(default=None, repr=False)  # sent as Authorization: Bearer

    @property
    def headers(self) -> dict[str, str]:
        """Every request's headers: the API key, if the server needs one."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def body(self, prompt: str, seed: int) -> dict:
        """One request's body.

        >>> Ask("m", 4, ignore_eos=True).body("Hi", 7)["ignore_eos"]
        True
        """
        return {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": seed,
            "stream": True,
            "stream_options": {"include_usage": True},
            **({"ignore_eos": True} if self.ignore_eos else {}),
        }


@dataclass
class Result:
    """One request as the client saw it: chunk times in seconds after it was sent."""

    ok: bool
    chunks: list[float] = field(default_factory=list)  # when each chunk with text came
    tokens: int = 0  # output tokens
    error: str = ""

    @property
    def ttft(self) -> float | None:  # None: the stream carried no text (the model ended at once)
        return self.chunks[0] if self.chunks else None

    @property
    def e2e(self) -> float | None:
        return self.chunks[-1] if self.chunks else None

    @property
    def itl(self) -> list[float]:
        return [b - a for a, b in zip(self.chunks, self.chunks[1:])]

    @property
    def tpot(self) -> float | None:
        return (
            (self.e2e - self.ttft) / (self.tokens - 1) if self.chunks and self.tokens > 1 else None
        )


async def complete(client: httpx.AsyncClient, url: str, body: dict) -> Result:
    """Send one streamed completion and time its chunks; a refusal or a broken connection is
    a failed Result (with the server's sentence), not an exception."""
    start, chunks, tokens = time.perf_counter(), [], None
    try:
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                return Result(False, error=f"HTTP {r.status_code}: {error_message(text)}")
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    break
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[len("data: ") :])
                if "error" in event:  # the server failed mid-stream and said so
                    return Result(False, chunks, error=event["error"].get("message", ""))
                if event.get("choices") and event["choices"][0].get("text"):
                    chunks.append(time.perf_counter() - start)
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
            else:  # the stream ended without [DONE]: cut off
                return Result(False, chunks, error="the stream ended before data: [DONE]")
    except httpx.HTTPError as e:
        return Result(False, chunks, error=f"{type(e).__name__}: {e}")
    return Result(True, chunks, len(chunks) if tokens is None else tokens)


def error_message(text: str) -> str:
    """OpenAI's {"error": {"message": ...}} body as its sentence (else the text, cut short)."""
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text[:200]


async def closed_loop(
    url: str, prompts: list[str], ask: Ask, concurrency: int, n: int, on_done=None
) -> tuple[list[Result], float]:
    """`concurrency` clients send `n` requests in all, each its next as soon as its last ended
    (request i takes prompts[i mod len], seed i): (results, seconds from first send to last)."""
    results, indices = [], iter(range(n))  # one iterator: each index is taken by one client
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits, headers=ask.headers) as client:

        async def one_client():
            for i in indices:
                results.append(await complete(client, url, ask.body(prompts[i % len(prompts)], i)))
                if on_done is not None:
                    on_done(results[-1])

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        return results, time.perf_counter() - start


def arrivals(rate: float, n: int, seed: int = 0) -> np.ndarray:
    """When each of `n` requests is sent, in seconds from the first: a Poisson process at `rate`
    a second (exponential gaps of mean 1/rate), the first at 0."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    return np.concatenate([[0.0], np.cumsum(gaps[1:])])


async def open_loop(
    url: str, prompts: list[str], ask: Ask, rate: float, n: int, seed: int = 0, on_done=None
) -> tuple[list[Result], float]:
    """`n` requests sent at Poisson arrival times, `rate` a second, however many are already
    in flight: (results, seconds from the first send to the last answer)."""
    results = []
    async with httpx.AsyncClient(
        timeout=TIMEOUT, limits=httpx.Limits(max_connections=None), headers=ask.headers
    ) as client:

        async def one(i):
            results.append(await complete(client, url, ask.body(prompts[i % len(prompts)], i)))
            if on_done is not None:
                on_done(results[-1])

        start, tasks = time.perf_counter(), []
        for i, at in enumerate(arrivals(rate, n, seed)):
            await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        return results, time.perf_counter() - start


def percentiles(values, scale: float = 1e3) -> dict:
    """p50, p90, p99 and the mean of `values` (seconds), in milliseconds; None when empty.

    >>> percentiles([0.1, 0.2, 0.3, 0.4])
    {'p50': 250.0, 'p90': 370.0, 'p99': 397.0, 'mean': 250.0}
    """
    values = np.asarray([v for v in values if v is not None], float)
    if values.size == 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    out = {f"p{q}": round(float(np.percentile(values, q)) * scale, 6) for q in PERCENTILES}
    return out | {"mean": round(float(values.mean()) * scale, 6)}


def summarize(results: list[Result], seconds: float) -> dict:
    """A run's figures: requests completed and failed, output tokens/s and requests/s over
    `seconds`, and the percentiles (ms) of TTFT, ITL (every gap of every request), TPOT and e2e."""
    ok = [r for r in results if r.ok]
    tokens = sum(r.tokens for r in ok)
    chunks = sum(len(r.chunks) for r in ok)
    return {
        "requests": len(results),
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:3],
        "seconds": seconds,
        "output_tokens": tokens,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "requests_per_s": len(ok) / seconds if seconds > 0 else 0.0,
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "ttft_ms": percentiles(r.ttft for r in ok),
        "itl_ms": percentiles(gap for r in ok for gap in r.itl),
        "tpot_ms": percentiles(r.tpot for r in ok),
        "e2e_ms": percentiles(r.e2e for r in ok),
    }


def scrape(url: str) -> dict[str, float]:
    """The server's /metrics as {sample name: value}, each name summed over its labels
    (request_success_total over every finished_reason); histograms' _sum and _count kept."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in family.samples:
            if not s.name.endswith("_bucket"):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def server_figures(before: dict, after: dict) -> dict:
    """What the server counted over a run (the change in its counters) and its memory after it:
    acceptance rate = accepted / draft tokens, mean acceptance length = 1 + accepted / drafts
    (tokens per round: the accepted drafts and the one token the target adds). The rate is
    vLLM's; it counts drafts discarded after a rejection too, so it understates α at large γ
    (docs/design.md §6), and /metrics has no rejection count to do better."""
    delta = lambda name: after.get(name, 0.0) - before.get(name, 0.0)
    drafts, drafted = (
        delta("vllm:spec_decode_num_drafts_total"),
        delta("vllm:spec_decode_num_draft_tokens_total"),
    )
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    gauge = lambda name: int(after[name]) if name in after else None
    return {
        "generation_tokens": int(delta("vllm:generation_tokens_total")),
        "drafts": int(drafts),
        "draft_tokens": int(drafted),
        "accepted_tokens": int(accepted),
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "rss_bytes": gauge("process_resident_memory_bytes"),
        "kv_cache_bytes": gauge("nanospec:kv_cache_bytes"),
        "draft_state_bytes": gauge("nanospec:draft_state_bytes"),
    }
