"""What a load test found, told three ways: rich tables, two verdicts, and SVG plots.

The rows are the sweep's (load/loadtest.py): one per concurrency level C, holding every
strategy's summary (load/loadgen.py) side by side,

    {"concurrency": 4, "slots": 4, "ar": {"tokens_per_s": 310.0, "tpot_ms": {...}, ...},
                                   "draft": {"tokens_per_s": 540.0, ...}, ...}

and the two verdicts are read off them:

- the crossover: the first C at which fixed-γ speculation's output tokens/s falls below
  autoregressive decoding's (docs/design.md §6: as C grows the verify pass turns compute-bound and
  rejected drafts are work thrown away) — or none in the levels measured;
- adaptive's promise: at every C, within 5% of the better of AR and fixed γ.

What this file deliberately leaves out: statistics across runs (one run is one measurement).
"""

import io
from pathlib import Path

from nanospec.errors import UserError
from nanospec.fileio import atomic_write
from nanospec.measure.tables import table

TOLERANCE = 0.05  # adaptive should be within this fraction of the better fixed strategy
LATENCY = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL (a chunk)", "e2e": "end to end"}


def crossover(rows: list[dict], spec: str = "draft", base: str = "ar") -> int | None:
    """The first concurrency at which `spec` gives fewer output tokens/s than `base`; None if
    it never does in `rows` (or either was not run).

    >>> crossover([{"concurrency": 1, "ar": {"tokens_per_s": 100}, "draft": {"tokens_per_s": 180}},
    ...            {"concurrency": 8, "ar": {"tokens_per_s": 400}, "draft": {"tokens_per_s": 390}}])
    8
    """
    for row in rows:
        if spec in row and base in row and row[spec]["tokens_per_s"] < row[base]["tokens_per_s"]:
            return row["concurrency"]
    return None


def adaptive_within(rows: list[dict], tolerance: float = TOLERANCE) -> list[dict]:
    """At each level: the better of AR and fixed γ, adaptive's tokens/s as a share of it, and
    whether that share is at least 1 − `tolerance`. Empty without adaptive and one other.

    >>> adaptive_within([{"concurrency": 2, "ar": {"tokens_per_s": 100},
    ...                   "draft": {"tokens_per_s": 200}, "adaptive": {"tokens_per_s": 192}}])
    [{'concurrency': 2, 'best': 'draft', 'share': 0.96, 'ok': True}]
    """
    out = []
    for row in rows:
        others = [s for s in ("ar", "draft") if s in row]
        if "adaptive" not in row or not others:
            continue
        best = max(others, key=lambda s: row[s]["tokens_per_s"])
        share = row["adaptive"]["tokens_per_s"] / row[best]["tokens_per_s"]
        out.append(
            {
                "concurrency": row["concurrency"],
                "best": best,
                "share": round(share, 4),
                "ok": share >= 1 - tolerance,
            }
        )
    return out


def verdicts(rows: list[dict], strategies: list[str]) -> dict:
    """Both verdicts of one workload's rows, as the JSON keeps them."""
    return {
        "crossover": {s: crossover(rows, s) for s in strategies if s != "ar"}
        if "ar" in strategies
        else {},
        "adaptive_within_5pct": adaptive_within(rows),
    }


def ms(p: dict, *qs: str) -> str:
    """The quantiles asked, one decimal below 100 ms: {'p50': 12.34, 'p90': 150.2} -> "12.3/150"."""
    return "/".join(
        "–" if p[q] is None else f"{p[q]:.1f}" if p[q] < 100 else f"{p[q]:.0f}" for q in qs
    )


def print_levels(title: str, rows: list[dict], strategies: list[str]) -> None:
    """Tokens/s (with each one's ratio to AR) and TPOT p50 against concurrency, every
    strategy side by side; then every percentile and server figure of every (level, strategy)."""
    base = "ar" if "ar" in strategies else None
    ratio = lambda r, s: (
        f" ({r[s]['tokens_per_s'] / r[base]['tokens_per_s']:.2f}×)" if base and s != base else ""
    )
    table(
        f"{title}: output tokens/s (÷ ar)",
        ["C"] + strategies,
        [
            [r["concurrency"]] + [f"{r[s]['tokens_per_s']:.0f}{ratio(r, s)}" for s in strategies]
            for r in rows
        ],
    )
    table(
        f"{title}: TPOT p50 (ms)",
        ["C"] + strategies,
        [[r["concurrency"]] + [ms(r[s]["tpot_ms"], "p50") for s in strategies] for r in rows],
    )
    print_details(title, rows, strategies, "C", "concurrency")


def print_details(title: str, rows: list[dict], strategies: list[str], name: str, key: str) -> None:
    """Two tables with a line per (level, strategy): the latency percentiles, then the
    throughput in requests, the server's acceptance figures and memory."""
    mb = lambda b: "–" if b is None else f"{b / 2**20:.0f}"
    q3 = ("p50", "p90", "p99")
    pairs = [(r, s) for r in rows for s in strategies]
    # Two columns of percentiles a table, so that each fits an 80-column terminal uncut.
    for pair in (("ttft", "tpot"), ("itl", "e2e")):
        table(
            f"{title}: latency (ms, p50/p90/p99)",
            [name, "strategy", "done"] + [LATENCY[m] for m in pair],
            [
                [r[key], s, f"{r[s]['completed']}/{r[s]['requests']}"]
                + [ms(r[s][f"{m}_ms"], *q3) for m in pair]
                for r, s in pairs
            ],
        )
    srv = lambda r, s, k, f: "–" if r[s]["server"][k] is None else f.format(r[s]["server"][k])
    table(
        f"{title}: the server's figures",
        [name, "strategy", "req/s", "tokens a chunk", "accept rate", "accept length"],
        [
            [
                r[key],
                s,
                f"{r[s]['requests_per_s']:.2f}",
                "–" if r[s]["tokens_per_chunk"] is None else f"{r[s]['tokens_per_chunk']:.2f}",
                srv(r, s, "acceptance_rate", "{:.2f}"),
                srv(r, s, "mean_acceptance_length", "{:.2f}"),
            ]
            for r, s in pairs
        ],
    )
    table(
        f"{title}: memory",
        [name, "strategy", "RSS MiB", "KV cache MiB", "draft state MiB"],
        [
            [r[key], s]
            + [mb(r[s]["server"][k]) for k in ("rss_bytes", "kv_cache_bytes", "draft_state_bytes")]
            for r, s in pairs
        ],
    )


def print_rates(title: str, rows: list[dict], strategies: list[str]) -> None:
    """Open loop: at each arrival rate, every strategy's tokens/s and TTFT p50 and TPOT p50."""
    for what, cell in (
        ("output tokens/s", lambda x: f"{x['tokens_per_s']:.0f}"),
        ("TTFT p50 (ms)", lambda x: ms(x["ttft_ms"], "p50")),
        ("TPOT p50 (ms)", lambda x: ms(x["tpot_ms"], "p50")),
    ):
        table(
            f"{title}: open loop (Poisson arrivals), {what}",
            ["req/s"] + strategies,
            [[r["rate"]] + [cell(r[s]) for s in strategies] for r in rows],
        )
    print_details(f"{title}, open loop", rows, strategies, "req/s", "rate")


def verdict_lines(found: dict, top: int) -> list[str]:
    """The verdicts as sentences."""
    lines = [
        f"crossover ({s} below ar): " + (f"at C = {c}" if c else f"none up to C = {top}")
        for s, c in found["crossover"].items()
    ]
    within = found["adaptive_within_5pct"]
    if within:
        missed = [w for w in within if not w["ok"]]
        lines.append(
            "adaptive within 5% of the better of ar and draft at every level: "
            + (
                "yes"
                if not missed
                else "no — "
                + ", ".join(
                    f"C = {w['concurrency']}: {100 * w['share']:.0f}% of {w['best']}"
                    for w in missed
                )
            )
        )
    return lines


def require_matplotlib():
    """matplotlib.pyplot on the Agg backend, or one sentence (a UserError) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(
            "--plots needs matplotlib: pip install -c constraints.txt -e '.[figures]'."
        ) from None
    return plt


def plot(
    folder: Path, workload: str, rows: list[dict], strategies: list[str], found: dict
) -> list[Path]:
    """Two SVGs: output tokens/s and TPOT p50 against concurrency, a line per strategy, the
    fixed-γ crossover marked with a dashed line."""
    plt = require_matplotlib()
    xs = [r["concurrency"] for r in rows]
    cross = found["crossover"].get("draft")
    written = []
    for name, ylabel, value in (
        ("throughput", "output tokens/s", lambda x: x["tokens_per_s"]),
        ("tpot", "TPOT p50 (ms)", lambda x: x["tpot_ms"]["p50"]),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
        for s in strategies:
            ax.plot(xs, [value(r[s]) for r in rows], marker="o", label=s)
        if cross is not None:
            ax.axvline(cross, color="grey", linestyle="--", label=f"crossover C = {cross}")
        elif "draft" in strategies and "ar" in strategies:
            ax.plot([], [], " ", label=f"no crossover up to C = {xs[-1]}")
        ax.set_xscale("log", base=2)
        if name == "tpot":  # from a few ms at C = 1 to hundreds at C = 64
            ax.set_yscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set(
            xlabel="concurrency (clients, closed loop)",
            ylabel=ylabel,
            title=f"{ylabel}, {workload}",
        )
        ax.legend(fontsize="small")
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        path = folder / f"{name}-{workload}.svg"
        atomic_write(path, buf.getvalue())
        written.append(path)
    return written
