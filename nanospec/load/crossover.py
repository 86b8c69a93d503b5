"""Where speculation stops paying: the serving engine's throughput by concurrency. A script.

    python -m nanospec.load.crossover [--json runs/crossover.json] [--slots 1,2,4,...,64]
                                         [--strategies ar,draft,adaptive,disable] [--gamma 4]
                                         [--disable-at 16] [--tokens 32] [--requests 2]
                                         [--least 16] [--temperature 0] [--workload facts]
                                         [--repeats 2] [--method draft|ngram] [--max-len N]

For each concurrency S it keeps S requests in the engine (serving/engine.py) — closed loop:
the moment one finishes, the next prompt takes its slot — until `--requests`·S have finished
(and at least `--least`, so that one slot's rate is not one or two requests' luck), and
measures output tokens per second and the time per output token (TPOT) each request saw.
The strategies run in turn, `--repeats` times at each S (the median counts), so each sees
the machine as the others do; ratios are taken within that S.

The strategies: `ar` (plain decoding), `draft` (the draft model — or, with `--method ngram`,
prompt lookup — at a fixed γ), `adaptive` (γ ∈ {0, the powers of two below γ, γ} chosen
every step by goodput, serving/adaptive.py, with the costs its engine probed) and `disable`
(vLLM's disable_by_batch_size: γ below `--disable-at` running requests, plain decoding from
there). `--max-len` sizes every slot's cache for that many tokens instead of the context.

Why it crosses over: a round costs one target pass over γ+1 tokens per slot instead of one,
plus drafting. At small S the pass is latency-bound and the extra tokens are nearly free, so
γ+1-token rounds win; as S grows the pass becomes compute-bound, a (γ+1)-token pass costs
more and more of γ+1 one-token passes, and the drafts that get rejected are work thrown away.
The engine computes every slot each step (static shapes, as JetStream does), so a step's
cost is set by S, and the concurrency here is the slot count.

What this leaves out: open-loop request rates and latency percentiles (the load test, through
the server), memory.
"""

import argparse
import json
import time

import numpy as np
from rich.console import Console

from nanospec import SHIPPED, compile_cache
from nanospec.decode import Bundle, make_loop
from nanospec.fileio import atomic_write
from nanospec.measure.tables import table
from nanospec.measure.workloads import workload_prompts
from nanospec.serving.adaptive import DisableByBatchSize, Goodput, gammas_up_to
from nanospec.serving.engine import Engine, Request

STRATEGIES = ("ar", "draft", "adaptive", "disable")


def closed_loop(engine: Engine, requests: list[Request]) -> dict:
    """Serve `requests` keeping every slot busy: {tokens, seconds, tpot (per request)}."""
    queue, started, tpot, tokens = list(requests), {}, [], 0
    t0 = time.perf_counter()
    while queue or engine.busy:
        while queue and engine.free_slots:
            started[engine.insert(queue.pop(0))] = [time.perf_counter(), 0]
        for out in engine.step():
            started[out.slot][1] += len(out.tokens)
            if out.done:
                begin, n = started.pop(out.slot)
                tpot.append((time.perf_counter() - begin) / n)
                tokens += n
    return {"tokens": tokens, "seconds": time.perf_counter() - t0, "tpot": tpot}


def engine_for(
    bundle,
    strategy: str,
    gamma: int,
    slots: int,
    disable_at: int,
    prompts: list[list[int]],
    temperature: float,
    method: str = "draft",
    max_len: int | None = None,
) -> Engine:
    """A warm engine running `strategy` with `slots` slots, drafting by `method` (draft or
    ngram) unless the strategy is ar, with caches for `max_len` tokens a request (default
    the whole context; adaptive: its costs probed)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    _, _, params = bundle.models["target"]
    loop, dparams = make_loop(bundle, "ar" if strategy == "ar" else method, gamma)
    policy = {
        "adaptive": Goodput(gammas=gammas_up_to(gamma)),
        "disable": DisableByBatchSize(gamma, disable_at),
    }.get(strategy)
    engine = Engine(loop, params, dparams, slots, policy, max_len=max_len)
    engine.warm([len(p) for p in prompts])
    if strategy == "adaptive":
        engine.probe(prompts[0], temperature=temperature)
    return engine


def measure(engines: dict, requests: list[Request], repeats: int) -> dict:
    """Every engine serves `requests` closed-loop, in turn, `repeats` times: per strategy the
    median tokens/s and TPOT, and (with a policy) the share of steps taken at each γ over all
    the repeats."""
    runs = {name: [] for name in engines}
    for engine in engines.values():
        engine.steps_at = {}  # counted over every repeat below
    for _ in range(repeats):
        for name, engine in engines.items():
            runs[name].append(closed_loop(engine, requests))
    row = {}
    for name, rs in runs.items():
        steps = engines[name].steps_at
        row[name] = {
            "tokens_per_s": float(np.median([r["tokens"] / r["seconds"] for r in rs])),
            "tpot_ms": 1e3 * float(np.median([np.median(r["tpot"]) for r in rs])),
            "requests": len(requests),
            "gamma_share": {str(g): n / sum(steps.values()) for g, n in steps.items()}
            if engines[name].policy
            else None,
            "alpha": engines[name].acceptance.alpha,
            "proposing": engines[name].acceptance.proposing,
        }
    return row


def sweep(
    bundle,
    strategies: list[str],
    slots: list[int],
    gamma: int,
    tokens: int,
    per_slot: int,
    temperature: float,
    workload: str = "facts",
    repeats: int = 2,
    disable_at: int = 16,
    console: Console | None = None,
    method: str = "draft",
    least: int = 16,
    max_len: int | None = None,
) -> list[dict]:
    """One row per concurrency S: every strategy's tokens/s and median TPOT, side by side."""
    prompts = [bundle.tok.encode_prompt(p) for p in workload_prompts(workload, 64)]
    rows = []
    for s in slots:
        requests = [
            Request(prompts[i % len(prompts)], tokens, temperature, seed=i)
            for i in range(max(per_slot * s, least))
        ]
        engines = {
            m: engine_for(bundle, m, gamma, s, disable_at, prompts, temperature, method, max_len)
            for m in strategies
        }
        rows.append({"slots": s, **measure(engines, requests, repeats)})
        if console is not None:
            console.print(
                f"S = {s}: "
                + ", ".join(f"{m} {rows[-1][m]['tokens_per_s']:.0f} tokens/s" for m in strategies)
            )
    return rows


def gamma_mix(share: dict | None) -> str:
    """{"0": 0.75, "4": 0.25} -> "0:75% 4:25%"."""
    if not share:
        return ""
    ordered = sorted(share.items(), key=lambda x: int(x[0]))
    return " ".join(f"{g}:{100 * v:.0f}%" for g, v in ordered)


def print_rows(rows: list[dict], strategies: list[str], title: str) -> None:
    """Tokens/s (each over the first strategy's), then the γ each policy chose: two tables,
    so that each fits an 80-column terminal."""
    base = strategies[0]
    ratio = lambda r, m: (
        "" if m == base else f" ({r[m]['tokens_per_s'] / r[base]['tokens_per_s']:.2f}×)"
    )
    table(
        f"{title}: output tokens/s (÷ {base})",
        ["slots"] + strategies,
        [
            [r["slots"]] + [f"{r[m]['tokens_per_s']:.0f}{ratio(r, m)}" for m in strategies]
            for r in rows
        ],
    )
    mixed = [m for m in strategies if rows[0][m]["gamma_share"] is not None]
    if mixed:
        table(
            "the steps each policy took at each γ",
            ["slots"] + mixed,
            [[r["slots"]] + [gamma_mix(r[m]["gamma_share"]) for m in mixed] for r in rows],
        )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="runs/crossover.json")
    ap.add_argument("--slots", default="1,2,4,8,16,32,64")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument(
        "--disable-at",
        type=int,
        default=16,
        help="the disable strategy decodes plainly from this many running requests",
    )
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--requests", type=int, default=2, help="requests per slot")
    ap.add_argument("--least", type=int, default=16, help="requests at any slot count")
    ap.add_argument(
        "--max-len",
        type=int,
        default=None,
        help="tokens a request may hold: each slot's cache (default the context)",
    )
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--workload", default="facts")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--method",
        default="draft",
        choices=("draft", "ngram"),
        help="the drafter of draft, adaptive and disable",
    )
    args = ap.parse_args(argv)
    compile_cache.enable()  # as the CLI does: a second run loads its programs
    console = Console()
    strategies = args.strategies.split(",")
    bundle = Bundle.load(SHIPPED, ("target", "draft"))
    rows = sweep(
        bundle,
        strategies,
        [int(s) for s in args.slots.split(",")],
        args.gamma,
        args.tokens,
        args.requests,
        args.temperature,
        args.workload,
        args.repeats,
        args.disable_at,
        console,
        args.method,
        args.least,
        args.max_len,
    )
    print_rows(
        rows,
        strategies,
        f"closed loop ({args.method} drafts, γ = {args.gamma}, "
        f"T = {args.temperature:g}, {args.workload}, {args.tokens} tokens a request)",
    )
    report = {
        "gamma": args.gamma,
        "tokens": args.tokens,
        "temperature": args.temperature,
        "requests_per_slot": args.requests,
        "workload": args.workload,
        "method": args.method,
        "least": args.least,
        "max_len": args.max_len,
        "disable_at": args.disable_at,
        "repeats": args.repeats,
        "rows": rows,
    }
    atomic_write(args.json, json.dumps(report, indent=1))
    console.print(f"written: {args.json}")
    return report


if __name__ == "__main__":
    main()
