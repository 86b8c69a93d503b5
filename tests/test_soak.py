"""A soak test of `nanospec serve` (loopback only, bounded): 300 requests at concurrency 64,
streamed and not, with 30% of the streams abandoned by their client part-way, against an adaptive
speculative engine (16 slots, a queue of 64) on the tiny models.

Nothing is lost: every request the clients sent is accounted for by the server exactly once
— finished (stop or length) or aborted — and every one a client read to its end has its
finish reason and all its tokens. The server ends idle, every slot free, and holding exactly
the device memory it held before the soak (jax.live_arrays: the same arrays, the same bytes;
the engine's state is donated step to step, so a leak would show as extra arrays).
"""

import asyncio
import json
import random

import httpx
import jax
import pytest

from nanospec.decode import Bundle
from nanospec.serving.launch import build_engine, warm_up
from nanospec.serving.server import build_app
from tests.test_server import Live, eventually, serve_in_thread, tiny

REQUESTS, CONCURRENCY, SLOTS = 300, 64, 16
PROMPTS = ["The capital of France is", "def add(a, b):", "the the the the", "Paris"]


def device_bytes() -> tuple[int, int]:
    arrays = jax.live_arrays()
    return len(arrays), sum(a.nbytes for a in arrays)


async def one(client: httpx.AsyncClient, i: int, rng: random.Random) -> str:
    """Send request i; returns "done" (read to its finish reason) or "left" (abandoned)."""
    body = {
        "model": "nanospec",
        "prompt": PROMPTS[i % len(PROMPTS)],
        "seed": i,
        "max_tokens": rng.randint(1, 24),
        "temperature": rng.choice([0.0, 1.0]),
        "stream": rng.random() < 0.6,
    }
    # subtle: only streams are abandoned, after a chunk or more: a chunk proves the server has
    # the request, where a request abandoned before its answer may never have left the client.
    leave_after = rng.randint(1, 3) if body["stream"] and rng.random() < 0.3 else None
    if not body["stream"]:
        answer = (await client.post("/v1/completions", json=body)).json()
        assert answer["choices"][0]["finish_reason"] in ("stop", "length"), answer
        return "done"
    async with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        chunks = 0
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return "done"
            chunks += 1
            if leave_after is not None and chunks >= leave_after:
                return "left"  # closing the stream mid-way
            json.loads(line[6:])
    raise AssertionError(f"request {i}: the stream ended without [DONE]")


async def soak(url: str) -> dict[str, int]:
    rng, gate = random.Random(0), asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY + 8)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def bounded(i):
            async with gate:
                return await one(client, i, rng)

        outcomes = await asyncio.gather(*(bounded(i) for i in range(REQUESTS)))
    return {k: outcomes.count(k) for k in ("done", "left")}


@pytest.mark.slow
def test_a_soak_at_concurrency_64_with_cancellations_loses_nothing(tiny_tokenizer):
    bundle = Bundle(
        tiny_tokenizer,
        {"target": tiny(tiny_tokenizer, 0, "target"), "draft": tiny(tiny_tokenizer, 1, "draft")},
    )
    engine = build_engine(bundle, "draft", gamma=3, slots=SLOTS, adaptive=True)
    warm_up(engine)
    app = build_app(engine, tiny_tokenizer, "nanospec", max_queue=CONCURRENCY)
    server, thread, port = serve_in_thread(app)
    live = Live(app, engine, tiny_tokenizer, port)
    try:
        asyncio.run(soak(live.url))  # a first pass: whatever is allocated once, is
        eventually(lambda: not engine.busy, "the engine went idle")
        before, counted = device_bytes(), live.metrics()
        outcomes = asyncio.run(soak(live.url))
        eventually(lambda: live.metrics()["vllm:num_requests_running"] == 0, "all ended")
        after = live.metrics()
        finished = {
            r: after[f"vllm:request_success_total{{{r}}}"]
            - counted.get(f"vllm:request_success_total{{{r}}}", 0)
            for r in ("stop", "length", "abort")
        }
        assert sum(finished.values()) == REQUESTS  # each request ended exactly once
        assert finished["stop"] + finished["length"] >= outcomes["done"]
        assert outcomes["left"] > 20 and finished["abort"] > 0
        assert after["vllm:num_requests_waiting"] == 0 and engine.free_slots == SLOTS
        assert device_bytes() == before
    finally:
        server.should_exit = True
        thread.join(timeout=60)
