"""`nanospec loadtest`: load `nanospec serve` over HTTP, strategy by strategy, level by level.

    nanospec loadtest [--strategies ar,draft,adaptive,vllm-disable] [--workloads facts,mixed]
                      [--concurrency 1,2,4,8,16,32,64] [--requests-per-level 128]
                      [--max-tokens 32] [--ignore-eos] [--temperature 0] [--rates 2,8]
                      [--json FILE] [--plots DIR] [--url URL [--label NAME] [--api-key KEY]]

The through-the-server version of load/crossover.py: the same question — where does
speculation stop paying as concurrency grows? — asked the way a user meets it, with HTTP,
streaming, the scheduler's queue and the client's clock in every number. Each strategy is a
`nanospec serve` command line:

    ar             --method ar
    draft          --method draft --gamma 4                     (fixed γ)
    adaptive       --method draft --gamma 4 --adaptive          (γ ∈ {0,1,2,4} by goodput)
    vllm-disable   --speculative-config '{"method": "draft_model", "num_speculative_tokens": 4,
                                          "disable_by_batch_size": 16}'

with the draft model as the drafter; `--method ngram` (prompt lookup) or `--method eagle`
(fixed γ only) puts another in its place, under the same strategy names.

Slots = the level's concurrency, one server per (level, strategy). Why not one server with 64
slots for every level: this engine computes every slot every step (static shapes), so a
64-slot server answering one client pays for 64 rows each step and would measure the 64-row
step at every level. vLLM's step costs what its running requests cost; a server with exactly
C slots is the fair stand-in. (--slots N instead keeps one N-slot server per strategy, as a
deployment with a fixed max_num_seqs would.) Starting a server takes seconds once its programs
are in the compilation cache (compile_cache.py); the first run at a new slot count compiles.

Side by side: at each level the strategies run one after another, then the next level, so
the strategies compared at one C ran minutes apart at most, not a whole sweep apart.

Each level: the /metrics counters before and after (acceptance, tokens the server counted,
memory), and closed-loop clients (loadgen.py); open-loop rates (--rates) come after, at the
largest slot count. What this file deliberately leaves out: reading the flags
(cli/loadtest.py), the statistics (loadgen.py), the tables and plots (load/report.py), the
child process (launched.py).
"""

import asyncio
import json
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from nanospec.load import report
from nanospec.load.launched import Servers, served_model, wait_idle
from nanospec.load.loadgen import Ask, closed_loop, open_loop, scrape, server_figures, summarize
from nanospec.measure.workloads import WORKLOADS, workload_prompts
from nanospec.methods import METHODS as REGISTRY

STRATEGIES = ("ar", "draft", "adaptive", "vllm-disable")
# The methods a load test drafts by, each with its name in vLLM's --speculative-config.
METHODS = {m: REGISTRY[m].vllm for m in ("draft", "ngram", "eagle")}
PROMPTS = 64  # distinct prompts per workload; request i takes prompt i mod 64


@dataclass(frozen=True)
class Plan:
    """Everything a sweep does, read from the flags and checked before anything starts."""

    strategies: tuple[str, ...]  # launched servers, or the one --url server's label
    workloads: tuple[str, ...]
    concurrency: tuple[int, ...]  # closed-loop levels (clients)
    requests: int  # requests per level
    rates: tuple[float, ...]  # open-loop levels (requests a second)
    max_tokens: int
    temperature: float
    gamma: int = 4  # drafts per round: draft, adaptive's largest, vllm-disable's
    disable_at: int = 16  # vllm-disable: plain decoding from this many running requests
    slots: int | None = None  # None: as many slots as the level's clients
    url: str | None = None  # load this running server instead of launching any
    checkpoints: str = ""
    method: str = "draft"  # the speculative strategies' drafter
    max_len: int | None = None  # serve --max-model-len (None: the model's context)
    ignore_eos: bool = False  # every request asks for max_tokens exactly (vLLM's ignore_eos)
    api_key: str | None = field(default=None, repr=False)  # the --url server's (never written)

    def serve_flags(self, strategy: str) -> list[str]:
        """The `nanospec serve` flags of `strategy`'s servers in this sweep."""
        cap = ["--max-model-len", str(self.max_len)] if self.max_len else []
        return serve_flags(strategy, self.gamma, self.disable_at, self.method) + cap


def serve_flags(strategy: str, gamma: int, disable_at: int, method: str = "draft") -> list[str]:
    """The `nanospec serve` flags that run `strategy`, drafting by `method`."""
    config = {
        "method": METHODS[method],
        "num_speculative_tokens": gamma,
        "disable_by_batch_size": disable_at,
    }
    return {
        "ar": ["--method", "ar"],
        "draft": ["--method", method, "--gamma", str(gamma)],
        "adaptive": ["--method", method, "--gamma", str(gamma), "--adaptive"],
        "vllm-disable": ["--speculative-config", json.dumps(config)],
    }[strategy]


def prompts_for(workload: str, n: int = PROMPTS) -> list[str]:
    """The workload's prompts; "mixed" takes facts, repetitive and code in turn."""
    if workload != "mixed":
        return workload_prompts(workload, n)
    kinds = [workload_prompts(w, n) for w in WORKLOADS]
    return [kinds[i % len(kinds)][i // len(kinds)] for i in range(n)]


def run_level(
    url: str, prompts: list[str], plan: Plan, level: dict, progress: Progress, label: str
) -> dict:
    """One strategy at one level — {"concurrency": C} or {"rate": λ} — with a live progress
    line (requests done, running tokens/s): its summary, and the server's figures."""
    ask = Ask(
        served_model(url, plan.api_key),
        plan.max_tokens,
        plan.temperature,
        plan.ignore_eos,
        plan.api_key,
    )
    what = f"C = {level['concurrency']}" if "concurrency" in level else f"{level['rate']} req/s"
    task = progress.add_task(f"{label} {what}", total=plan.requests, rate="")
    start, tokens = time.perf_counter(), [0]

    def done(result):
        tokens[0] += result.tokens
        rate = tokens[0] / max(time.perf_counter() - start, 1e-9)
        progress.update(task, advance=1, rate=f"{rate:.0f} tok/s")

    before = scrape(url)
    if "concurrency" in level:
        run = closed_loop(url, prompts, ask, level["concurrency"], plan.requests, done)
    else:
        run = open_loop(url, prompts, ask, level["rate"], plan.requests, 0, done)
    results, seconds = asyncio.run(run)
    wait_idle(url)
    progress.remove_task(task)
    summary = summarize(results, seconds) | {"server": server_figures(before, scrape(url))}
    progress.console.print(
        f"{label:>12} {what}: {summary['tokens_per_s']:.0f} tok/s, "
        f"TPOT p50 {report.ms(summary['tpot_ms'], 'p50')} ms, "
        f"{summary['completed']}/{summary['requests']} done"
    )
    return summary


def sweep_workload(plan: Plan, servers: Servers, workload: str, progress: Progress) -> dict:
    """Every level of one workload: at each, every strategy in turn (side by side in time)."""
    prompts, overall = prompts_for(workload), progress.tasks[0].id
    levels = [{"concurrency": c, "slots": plan.slots or c} for c in plan.concurrency] + [
        {"rate": r, "slots": plan.slots or max(plan.concurrency)} for r in plan.rates
    ]
    rows = []
    for level in levels:
        row = dict(level)
        for s in plan.strategies:
            url = servers.url(s, level["slots"])
            row[s] = run_level(url, prompts, plan, level, progress, f"{workload} {s}")
            progress.advance(overall)
        rows.append(row)
    closed = [r for r in rows if "concurrency" in r]
    return {
        "levels": closed,
        "rates": [r for r in rows if "rate" in r],
        **report.verdicts(closed, list(plan.strategies)),
    }


def sweep(plan: Plan, console: Console) -> dict:
    """The whole load test: every workload's rows and verdicts (servers stopped at the end)."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
    )
    out = {}
    with Progress(*columns, console=console, transient=True) as progress:
        n = len(plan.workloads) * len(plan.strategies) * (len(plan.concurrency) + len(plan.rates))
        progress.add_task("levels", total=n, rate="")
        servers = Servers(plan, progress)
        try:
            for w in plan.workloads:
                out[w] = sweep_workload(plan, servers, w, progress)
        finally:
            servers.close()
    return out


def print_report(plan: Plan, results: dict) -> None:
    for w, found in results.items():
        title = (
            f"{w}, {plan.method} drafts, γ = {plan.gamma}, T = {plan.temperature:g}, "
            f"{plan.max_tokens} tokens a request, {plan.requests} requests a level"
        )
        report.print_levels(title, found["levels"], list(plan.strategies))
        if found["rates"]:
            report.print_rates(title, found["rates"], list(plan.strategies))
        for line in report.verdict_lines(found, max(plan.concurrency)):
            Console().print(line)
