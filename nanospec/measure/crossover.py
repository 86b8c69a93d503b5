"""Where speculation stops paying: throughput of the serving engine against concurrency. A script.

    python -m nanospec.measure.crossover [--json runs/crossover.json] [--slots 1,2,4,8,16,32]
                                         [--methods ar,draft] [--gamma 4] [--tokens 32]
                                         [--requests 2] [--temperature 0]

For each concurrency S it keeps S requests in the engine (serving/engine.py) — closed loop:
the moment one finishes, the next facts prompt takes its slot — until `--requests`·S have
finished, and measures output tokens per second and the time per output token (TPOT) each
request saw. The methods run alternately at each S, so each sees the machine as the others do;
the ratio SD / AR is taken within that S.

Why it crosses over: a round costs one target pass over γ+1 tokens per slot instead of one,
plus drafting. At S = 1 the pass is latency-bound and the extra tokens are nearly free, so
γ+1-token rounds win; as S grows the pass becomes compute-bound, a (γ+1)-token pass costs
about γ+1 one-token passes, and the drafts that get rejected are work thrown away.

What this leaves out: request rates (open loop), latency percentiles, other workloads, the
server (`nanospec serve`, to come) and adaptive γ — issue 20's load test builds on this.

Not yet a measurement of the crossover: the engine's step maps a batch-1 round over the slots
(`jax.vmap`), and that does not batch well. Its `run_if`s become selects over whole caches,
and its cache writes become scatters: an AR step over 8 slots costs 6.7× one slot's (24.6 vs
3.7 ms; 13.2 ms without the run_ifs), so AR throughput stays flat as S grows, which is the
engine's cost, not the model's. The fix is a step over the loop's own batch with a key per
row, next in issue 20.
"""

import argparse
import json
import time

import numpy as np
from rich.console import Console

from nanospec.decode import Bundle, make_loop
from nanospec.fileio import atomic_write
from nanospec.measure.workloads import workload_prompts
from nanospec.serving.engine import Engine, Request
from nanospec.teach import SHIPPED, table


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


def sweep(bundle, methods: list[str], slots: list[int], gamma: int, tokens: int,
          per_slot: int, temperature: float, console: Console | None = None) -> list[dict]:
    """One row per concurrency S: every method's tokens/s and median TPOT, side by side."""
    cfg, _, params = bundle.models["target"]
    prompts = [bundle.tok.encode_prompt(p) for p in workload_prompts("facts", 64)]
    rows = []
    for s in slots:
        requests = [Request(prompts[i % len(prompts)], tokens, temperature, seed=i)
                    for i in range(per_slot * s)]
        engines = {}
        for m in methods:
            loop, dparams = make_loop(bundle, m, gamma)
            engines[m] = Engine(loop, params, dparams, s)
            closed_loop(engines[m], requests[:s])  # compile the prefill and the step
        row = {"slots": s}
        for m in methods:
            r = closed_loop(engines[m], requests)
            row[m] = {"tokens_per_s": r["tokens"] / r["seconds"],
                      "tpot_ms": 1e3 * float(np.median(r["tpot"])), "requests": len(requests)}
        rows.append(row)
        if console is not None:
            console.print(f"S = {s}: " + ", ".join(
                f"{m} {row[m]['tokens_per_s']:.0f} tokens/s" for m in methods))
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="runs/crossover.json")
    ap.add_argument("--slots", default="1,2,4,8,16,32")
    ap.add_argument("--methods", default="ar,draft")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--requests", type=int, default=2, help="requests per slot")
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args(argv)
    console = Console()
    methods = args.methods.split(",")
    bundle = Bundle.load(SHIPPED, ("target", "draft"))
    rows = sweep(bundle, methods, [int(s) for s in args.slots.split(",")], args.gamma,
                 args.tokens, args.requests, args.temperature, console)
    base = methods[0]
    table(f"output tokens/s and median TPOT against concurrency (γ = {args.gamma}, "
          f"T = {args.temperature:g}, facts, {args.tokens} tokens a request)",
          ["slots"] + [f"{m} tokens/s" for m in methods] + [f"{m} TPOT ms" for m in methods]
          + [f"{m} / {base}" for m in methods[1:]],
          [[r["slots"]] + [f"{r[m]['tokens_per_s']:.0f}" for m in methods]
           + [f"{r[m]['tpot_ms']:.2f}" for m in methods]
           + [f"{r[m]['tokens_per_s'] / r[base]['tokens_per_s']:.2f}×" for m in methods[1:]]
           for r in rows])
    report = {"gamma": args.gamma, "tokens": args.tokens, "temperature": args.temperature,
              "requests_per_slot": args.requests, "workload": "facts", "rows": rows}
    atomic_write(args.json, json.dumps(report, indent=1))
    console.print(f"written: {args.json}")
    return report


if __name__ == "__main__":
    main()
