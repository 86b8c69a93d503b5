"""A soak of a running `nanospec serve`: minutes of mixed traffic, then what was lost.

    python -m nanospec.load.soak --url http://127.0.0.1:8000 --seconds 300 \\
        --concurrency 32 --json soak.json

C clients send requests back to back for the given time, each one drawn at random:

    stream      streamed to its end: it must end with [DONE] and a finish_reason
    whole       not streamed: it must come back with its choice and usage
    leave       streamed, and the client hangs up after a few chunks (a cancelled request)
    bad         a body the server must refuse: it must be a 4xx in OpenAI's error shape
    score       a prompt scored, not generated (echo, max_tokens 0, logprobs: lm-eval's way):
                it must come back with a logprob for every prompt token
    huge        ~1 MB to /tokenize or /detokenize, more than any prompt: it must be a 400

A request is *lost* when it should have completed and did not (an error, a stream without
[DONE], a reply without its text); an *error* is any 5xx or a refusal that was not a 4xx. The
server's resident memory (process_resident_memory_bytes from its /metrics) is read before and
after, so a leak shows as growth; the printed table and the JSON report both hold the counts.

What this file deliberately leaves out: timing (load/loadgen.py and `nanospec loadtest`
measure latency and throughput), and starting the server (start it yourself, with any flags).
"""

import argparse
import asyncio
import json
import random
import sys
import time

import httpx

from nanospec.fileio import atomic_write
from nanospec.load.loadgen import scrape

PROMPTS = [
    "The capital of France is",
    "def capital_of(country):",
    "Q: What is the capital of Peru?",
    "The euro is the currency used in",
    "Once upon a time",
]
BAD = [
    {"model": "nanospec", "prompt": "x", "temperature": 9},
    {"model": "nanospec"},
    {"model": "nanospec", "prompt": "x", "max_tokens": "16"},
    {"prompt": 7},
    {"model": "nanospec", "prompt": "x", "top_k": 2**31},
    {"model": "other", "prompt": "x"},
]
KINDS = ("stream", "whole", "leave", "bad", "score", "huge")
WEIGHTS = (4, 4, 1, 1, 1, 1)
HUGE = {  # about 1 MB each, under the body limit: refused unread (serving/service.py)
    "/tokenize": {"prompt": ("The capital of France is Paris. " * 33_000)[: 2**20 - 200]},
    "/detokenize": {"tokens": [65] * 250_000},
}


async def one(client: httpx.AsyncClient, kind: str, rng: random.Random, most: int) -> str:
    """Send one request of `kind` (at most `most` new tokens); its outcome: "ok", "left",
    "refused", "lost" or "error"."""
    body = {
        "model": "nanospec",
        "prompt": rng.choice(PROMPTS),
        "max_tokens": rng.randint(4, most),
        "temperature": rng.choice([0, 0.7, 1.0]),
        "seed": rng.randrange(2**31),
    }
    try:
        if kind in ("bad", "huge"):
            path = rng.choice(list(HUGE)) if kind == "huge" else "/v1/completions"
            r = await client.post(path, json=HUGE[path] if kind == "huge" else rng.choice(BAD))
            ok = 400 <= r.status_code < 500 and "message" in r.json().get("error", {})
            return "refused" if ok else "error"
        if kind == "score":
            scored = {**body, "max_tokens": 0, "echo": True, "logprobs": rng.randint(0, 5)}
            r = await client.post("/v1/completions", json=scored)
            if r.status_code >= 500:
                return "error"
            reply = r.json() if r.status_code == 200 else {}
            lp = (reply.get("choices") or [{}])[0].get("logprobs") or {}
            counted = reply.get("usage", {}).get("prompt_tokens")
            return "ok" if counted and len(lp.get("tokens", ())) == counted else "lost"
        if kind == "whole":
            r = await client.post("/v1/completions", json=body)
            if r.status_code >= 500:
                return "error"
            choice = r.json()["choices"][0] if r.status_code == 200 else {}
            return "ok" if choice.get("finish_reason") and "usage" in r.json() else "lost"
        async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            if r.status_code != 200:
                return "error" if r.status_code >= 500 else "lost"
            chunks, leave_after = 0, rng.randint(1, 3) if kind == "leave" else None
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    return "ok"
                chunks += line.startswith("data: ")
                if leave_after is not None and chunks >= leave_after:
                    return "left"
            return "lost"  # the stream ended without [DONE]
    except (httpx.HTTPError, ValueError, KeyError):
        return "lost"


async def soak(url: str, seconds: float, concurrency: int, seed: int = 0) -> dict[str, dict]:
    """{kind: {outcome: count}} of every request sent in `seconds` by `concurrency` clients."""
    counts = {k: {} for k in KINDS}
    end = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        # Every valid request must fit: a quarter of the context leaves room for any prompt here.
        room = (await client.get("/v1/models")).json()["data"][0]["max_model_len"]
        most = max(4, min(48, room // 4))

        async def client_loop(c: int):
            rng = random.Random(seed * 1000 + c)
            while time.monotonic() < end:
                kind = rng.choices(KINDS, weights=WEIGHTS)[0]
                outcome = await one(client, kind, rng, most)
                counts[kind][outcome] = counts[kind].get(outcome, 0) + 1

        await asyncio.gather(*(client_loop(c) for c in range(concurrency)))
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m nanospec.load.soak", description=__doc__.split("\n")[0]
    )
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the report here")
    args = p.parse_args(argv)
    try:
        before = scrape(args.url)
    except httpx.HTTPError:
        print(
            f"No nanospec server answers at {args.url}; start one with `nanospec serve`.",
            file=sys.stderr,
        )
        return 2
    counts = asyncio.run(soak(args.url, args.seconds, args.concurrency))
    time.sleep(2)  # the last cancellations reach the engine thread
    after = scrape(args.url)
    total = lambda outcome: sum(c.get(outcome, 0) for c in counts.values())
    report = {
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "by_kind": counts,
        "requests": sum(sum(c.values()) for c in counts.values()),
        "completed": total("ok"),
        "left": total("left"),
        "refused": total("refused"),
        "lost": total("lost"),
        "errors": total("error"),
        "rss_mb_before": round(before["process_resident_memory_bytes"] / 2**20, 1),
        "rss_mb_after": round(after["process_resident_memory_bytes"] / 2**20, 1),
        "running_after": after["vllm:num_requests_running"],
        "waiting_after": after["vllm:num_requests_waiting"],
    }
    for key in (
        "requests",
        "completed",
        "left",
        "refused",
        "lost",
        "errors",
        "rss_mb_before",
        "rss_mb_after",
        "running_after",
        "waiting_after",
    ):
        print(f"{key:>15}  {report[key]}")
    if args.json:
        atomic_write(args.json, json.dumps(report, indent=1) + "\n")
    return 1 if report["lost"] or report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
