"""`nanospec loadtest`, the command: check the flags, then run the sweep and report it.

Its flags are read into a `load.loadtest.Plan`, every mistake one sentence before anything
starts; then the sweep, the tables, the JSON (and plots).

What this file deliberately leaves out: the load test itself (load/loadtest.py).
"""

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from nanospec.cli.args import check_sampling, int_list
from nanospec.errors import UserError
from nanospec.fileio import atomic_write, check_output
from nanospec.load import report
from nanospec.load.launched import healthy, served_model
from nanospec.load.loadtest import METHODS, STRATEGIES, Plan, print_report, sweep
from nanospec.measure.workloads import WORKLOADS
from nanospec.methods import METHODS as REGISTRY


def plan_from(args) -> Plan:
    """The flags as a Plan, every mistake one sentence (a UserError) before anything starts."""
    if args.url and args.strategies:
        raise UserError(
            "--url loads a server that is already running; --strategies launches "
            "servers: give one or the other."
        )
    for flag, value in (("--method", args.method), ("--max-model-len", args.max_model_len)):
        if args.url and value:
            raise UserError(
                f"{flag} sets up the servers the load test launches; --url loads "
                f"one that is running: give one or the other."
            )
    if args.label and not args.url:
        raise UserError(
            "--label names the run of a --url server; launched servers are "
            "labelled by their strategy."
        )
    if args.api_key and not args.url:
        raise UserError(
            "--api-key is the key of a --url server; the servers the load test launches have none."
        )
    # The flag, else the environment's (as `nanospec serve` reads it), for a --url server.
    api_key = (args.api_key or os.environ.get("NANOSPEC_API_KEY")) if args.url else None
    strategies = (args.strategies or ",".join(STRATEGIES)).split(",")
    if args.url:
        if not args.url.startswith(("http://", "https://")):
            raise UserError(
                f"--url takes the server's address, like http://127.0.0.1:8000, got {args.url!r}."
            )
        url = args.url.rstrip("/").removesuffix("/v1")
        if not healthy(url):
            raise UserError(
                f"No server answers at {url}/health; start one with `nanospec "
                f"serve`, or drop --url to let the load test launch its own."
            )
        strategies = [args.label or served_model(url, api_key)]
    elif not strategies or not set(strategies) <= set(STRATEGIES):
        raise UserError(
            f"--strategies takes a comma-separated list of {', '.join(STRATEGIES)}, "
            f"got {args.strategies!r}."
        )
    method = args.method or "draft"
    if method not in METHODS:
        raise UserError(f"--method takes one of {', '.join(METHODS)}, got {method!r}.")
    if not REGISTRY[method].adaptive and {"adaptive", "vllm-disable"} & set(strategies):
        switchable = " or ".join(m for m in METHODS if REGISTRY[m].adaptive)
        raise UserError(
            f"adaptive and vllm-disable switch a chain drafter on and off (--method "
            f"{switchable}); with --method {method} choose --strategies ar,draft."
        )
    workloads = args.workloads.split(",")
    known = (*WORKLOADS, "mixed")
    if not set(workloads) <= set(known):
        raise UserError(
            f"--workloads takes a comma-separated list of {', '.join(known)}, "
            f"got {args.workloads!r}."
        )
    concurrency = int_list(args.concurrency, "--concurrency", 1, 256)
    if args.requests_per_level < max(concurrency):
        raise UserError(
            f"--requests-per-level must be at least the largest --concurrency "
            f"({max(concurrency)}), so that every client sends one; got "
            f"{args.requests_per_level}."
        )
    check_sampling(args.temperature, 0, 1.0)
    return Plan(
        tuple(strategies),
        tuple(workloads),
        tuple(concurrency),
        args.requests_per_level,
        tuple(rates_from(args.rates)),
        args.max_tokens,
        args.temperature,
        args.gamma,
        args.disable_at,
        args.slots,
        url if args.url else None,
        args.checkpoints,
        method,
        args.max_model_len,
        args.ignore_eos,
        api_key,
    )


def rates_from(text: str | None) -> list[float]:
    """--rates 0.5,2 -> [0.5, 2.0]: requests a second, each above 0."""
    try:
        rates = [float(x) for x in text.split(",")] if text else []
    except ValueError:
        rates = [-1.0]
    if not all(0 < r < 1e6 for r in rates):
        raise UserError(f"--rates takes comma-separated requests per second above 0, got {text!r}.")
    return rates


def cmd_loadtest(args) -> int:
    """`nanospec loadtest`: check the flags, sweep, print the tables, write JSON (and plots)."""
    plan = plan_from(args)
    out = check_output(args.json, ".json", "--json") if args.json else Path("runs/loadtest.json")
    if args.plots:
        report.require_matplotlib()
        if not Path(args.plots).parent.is_dir():
            raise UserError(
                f"Cannot write plots to {args.plots}: its folder "
                f"{Path(args.plots).parent} does not exist."
            )
    console = Console()
    started = time.time()
    results = sweep(plan, console)
    print_report(plan, results)
    atomic_write(
        out,
        json.dumps(
            {
                "plan": {k: v for k, v in asdict(plan).items() if k != "api_key"},
                "cpus": os.cpu_count(),
                "seconds": round(time.time() - started, 1),
                "workloads": results,
            },
            indent=1,
        ),
    )
    console.print(f"written: {out}")
    for w, found in results.items() if args.plots else ():
        for path in report.plot(Path(args.plots), w, found["levels"], list(plan.strategies), found):
            console.print(f"written: {path}")
    return 0
