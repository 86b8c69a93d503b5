"""How `nanospec bench` and `nanospec eval` print: one wide table, or several for 80 columns.

The benchmark reports 17 numbers per row. In one table they need about 150 columns; squeezed
into a terminal of 80, rich shortens every cell to "…" and the table says nothing. So each
report has two layouts, with every number in both:

    wide     the single table (one row per run): for files, pipes, wide terminals and --wide
    narrow   bench: three tables sharing the (method, γ) key — acceptance, drafting cost,
             speedup; eval: the table turned on its side (one row per fact kind, one column
             per model)

`console_for` decides the width: a terminal is as wide as it says, but a file or a pipe has no
width, and rich would assume 80 — so redirected output gets WIDE_CONSOLE columns and the wide
table. `print_*` picks the wide layout whenever it fits the console (or is asked for).

What this file deliberately leaves out: computing anything — it only lays out finished reports.
"""

import json
import sys

from rich import box
from rich.console import Console
from rich.table import Table

CONSOLE = Console()  # where `table` prints unless told (the lessons print there too)
WIDE_CONSOLE = 250  # columns for a file, a pipe or --wide: more than the widest table needs
# The same decode step is timed twice, by bench's decode probe and as the autoregressive runs'
# TPOT; apart by more than this, the machine's speed changed during the run.
NOISY = 0.10

# Every number of a bench row: header -> (key in the row, format spec, unit).
BENCH_COLUMNS = {
    "accept rate": ("acceptance_rate", ".2f", ""),
    "α": ("alpha", ".2f", ""),
    "tok/round": ("mean_acceptance_length", ".2f", ""),
    "c": ("c", ".3f", ""),
    "τ/cost": ("tau_per_draft_cost", ".1f", ""),
    "r": ("verify_over_ar", ".2f", ""),
    "E": ("expected_tokens_per_round", ".2f", ""),
    "pred decode": ("predicted_decode_speedup", ".2f", "×"),
    "predicted": ("predicted_speedup", ".2f", "×"),
    "measured": ("measured_speedup", ".2f", "×"),
    "meas/pred": ("efficiency", ".2f", ""),
    "TTFT ms": ("ttft_ms", ".1f", ""),
    "TPOT ×": ("tpot_speedup", ".2f", "×"),
    "extra params": ("extra_params", ",", ""),
    "extra MB": ("extra_memory_mb", ".2f", ""),
}
# The narrow layout: the same columns in three groups, each under the (method, γ) key; each
# fits 80 columns with room to spare (about 70 with a "tree 3,2,1" label).
BENCH_GROUPS = {
    "acceptance": ("accept rate", "α", "tok/round", "E", "τ/cost"),
    "cost": ("c", "r", "TTFT ms", "extra params", "extra MB"),
    "speedup": ("pred decode", "predicted", "measured", "meas/pred", "TPOT ×"),
}


def console_for(wide: bool = False) -> Console:
    """The console a command prints its report to (see the module docstring)."""
    if wide or not sys.stdout.isatty():
        return Console(width=WIDE_CONSOLE)
    return Console()  # a terminal: its own width (rich reads $COLUMNS too)


def fits(console: Console, table: Table) -> bool:
    """Whether the table fits the console at its natural width, with no cell squeezed."""
    # measured against an unlimited width: rich clamps a measurement to the width it is given
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    return natural <= console.width


def _cell(row: dict, header: str) -> str:
    key, spec, unit = BENCH_COLUMNS[header]
    value = row.get(key)
    if value is None:
        return "–"  # not measured for this row (a tree has no cost model; prompt lookup no c)
    mark = "!" if header == "TPOT ×" and row.get("flags") else ""  # explained below the table
    return format(value, spec) + unit + mark


def _table(title: str, headers, rows: list[dict], compact: bool) -> Table:
    # compact: light rules and no outer edge, and a cell too narrow folds onto a second line
    # rather than shrink to "…" (a safety net: the groups are sized not to need it)
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        show_edge=not compact,
        pad_edge=not compact,
    )
    for col in ("method", "γ", *headers):
        table.add_column(
            col,
            justify="left" if col == "method" else "right",
            overflow="fold" if compact else "ellipsis",
        )
    for r in rows:
        table.add_row(r["method"], str(r["gamma"]), *(_cell(r, h) for h in headers))
    return table


def bench_tables(report: dict) -> tuple[Table, list[Table]]:
    """(the wide table, the narrow tables) of one bench report."""
    ar = report["ar"]
    ones = (
        "mean_acceptance_length",
        "verify_over_ar",
        "expected_tokens_per_round",
        "predicted_decode_speedup",
        "predicted_speedup",
        "measured_speedup",
        "tpot_speedup",
    )
    ar_row = {
        "method": "ar",
        "gamma": "–",
        "ttft_ms": ar["ttft_ms"],
        "extra_params": 0,
        "extra_memory_mb": 0.0,
        **dict.fromkeys(ones, 1.0),
    }  # the baseline: 1 by definition
    rows = [ar_row, *report["rows"]]
    wide = _table(bench_title(report), BENCH_COLUMNS, rows, compact=False)
    narrow = [_table(name, headers, rows, compact=True) for name, headers in BENCH_GROUPS.items()]
    return wide, narrow


def bench_title(report: dict) -> str:
    return (
        f"{report['workload']} workload, T = {report['temperature']}, {report['prompts']} "
        f"prompts × {report['tokens_per_prompt']} tokens, median of {report['repeats']}"
    )


def print_bench(console: Console, report: dict, wide: bool | None = None) -> None:
    """The report's table(s), then one line per thing a reader must know about the numbers,
    the roofline's tables and the paragraph that explains the best speedup."""
    table, narrow = bench_tables(report)
    if fits(console, table) if wide is None else wide:
        console.print(table)
    else:  # the title once, then three tables that share its rows
        console.print(bench_title(report), style="bold")
        for i, t in enumerate(narrow):
            console.print(*([""] if i else []), t)  # a blank line between tables
    ar = report["ar"]
    console.print(
        f"autoregressive: {ar['tokens_per_second']:.0f} tokens/s end to end; decode step "
        f"{ar['decode_ms_per_token']:.3f} ms ({1e3 / ar['decode_ms_per_token']:.0f} tokens/s); "
        f"TTFT {ar['ttft_ms']:.1f} ms, TPOT {ar['tpot_ms']:.3f} ms"
    )
    for line in report_notes(report):
        console.print(line)
    if report["best"]:
        b = report["best"]
        predicted = f", {b['predicted_speedup']:.2f}× predicted" if "predicted_speedup" in b else ""
        tpot = (
            ""
            if b.get("tpot_speedup") is None
            else f"; {b['tpot_speedup']:.2f}× per output token (TPOT)"
        )
        console.print(
            f"best: {b['method']} with γ = {b['gamma']}: {b['measured_speedup']:.2f}× "
            f"measured{predicted}{tpot}"
        )
    if report.get("roofline"):  # what this machine allows, then why the speedup is what it is
        print_roofline(console, report["roofline"])
    if report.get("explanation"):
        console.print("\n" + report["explanation"])


def report_notes(report: dict) -> list[str]:
    """The lines under the bench table: what was skipped, noise, and rows whose TPOT to doubt."""
    ar = report["ar"]
    lines = [
        f"skipped: {s['method']} {_what(s)} ({s['reason']})" for s in report.get("skipped", [])
    ]
    agree = ar["tpot_over_decode_probe"]
    if abs(agree - 1) > NOISY:
        lines.append(
            f"noisy run: the decode probe ({ar['decode_ms_per_token']:.3f} ms) and the "
            f"autoregressive runs' TPOT ({ar['tpot_ms']:.3f} ms) time the same step but "
            f"differ by {abs(agree - 1):.0%}, so c, r and the predictions are unreliable; "
            "the measured speedups are still side by side"
        )
    for name, ms in report["draft_model_decode_ms_per_token"].items():
        lines.append(
            f"{name} model alone: decode step {ms:.3f} ms ({1e3 / ms:.0f} tokens/s), "
            f"c = {ms / ar['decode_ms_per_token']:.3f} of the target's"
        )
    for r in report["rows"]:
        if r.get("flags"):
            lines.append(
                f"TPOT ×! of {r['method']} γ = {r['gamma']}: {flag_reasons(r)}; TPOT there "
                "is a small difference of two larger times, so trust the end-to-end speedup"
            )
    return lines


def _what(skipped: dict) -> str:
    """'γ = 6, 8' or 'tree 2,1': what a skipped entry left out."""
    if "gammas" in skipped:
        return "γ = " + ", ".join(map(str, skipped["gammas"]))
    return "tree " + skipped["tree"]


def flag_reasons(row: dict) -> str:
    """Why a row's TPOT speedup is doubtful, in words (the flags come from bench.latency_flags)."""
    why = {
        "tpot_unmeasured": "after the first token no time was left to measure",
        "tpot_inconsistent": f"{row.get('tpot_speedup') or 0:.2f}× per output token beside "
        f"{row['measured_speedup']:.2f}× end to end",
        "ttft_dominates": f"the first token took {1 - row.get('decode_share', 0):.0%} of the run",
    }
    return ", and ".join(why[f] for f in row["flags"])


def eval_tables(results: dict, kinds: list[str]) -> tuple[Table, Table]:
    """(the wide table: a row per model, the narrow one: a row per measurement) of `eval`."""
    title = "Facts versus grammar: greedy, shipped checkpoints"
    cells = {
        name: [f"{r['facts'][k]:.0%}" for k in kinds]
        + [f"{r['function_word_accuracy']:.1%}", f"{r['other_token_accuracy']:.1%}"]
        for name, r in results.items()
    }
    labels = [*kinds, "function words", "other tokens"]
    wide = Table(title=title)
    narrow = Table(title=title, box=box.SIMPLE_HEAD)
    for col in ("model", *labels):
        wide.add_column(col, justify="left" if col == "model" else "right")
    for name, row in cells.items():
        wide.add_row(name, *row)
    for col in ("accuracy", *cells):
        narrow.add_column(col, justify="left" if col == "accuracy" else "right")
    for i, label in enumerate(labels):
        narrow.add_row(
            "all facts" if label == "all" else label, *(row[i] for row in cells.values())
        )
    return wide, narrow


def print_eval(console: Console, results: dict, kinds: list[str], wide: bool | None = None) -> None:
    table, narrow = eval_tables(results, kinds)
    console.print(table if (fits(console, table) if wide is None else wide) else narrow)
    console.print(
        'facts: greedy answer to a probe such as "The population of Japan is about"; '
        "function words / other tokens: teacher-forced top-1 on the validation split."
    )


def table(title: str, columns: list[str], rows: list[list], console: Console | None = None) -> None:
    """Print a small table: the first column and bars (an empty header) left-aligned, the
    rest right-aligned, as given (format them first). The lessons' and the scripts' tables."""
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 or not c else "right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    (console or CONSOLE).print(t)


def print_roofline(console: Console, roof: dict) -> None:
    """The roofline (measure/roofline.py): this machine's limits, then where the passes stand.
    Both tables fit 80 columns, light rules and no outer edge, as bench's narrow ones."""
    gflops = roof["matmul_gflops"]
    rows = list(next(iter(gflops.values())))
    vector = f" ({roof['vector']})" if roof.get("vector") else ""
    console.print(f"\nmatmul GFLOP/s here{vector}: x @ W, W shaped as the target's", style="bold")
    headers = ["W", *(f"{n} row{'s' * (n != '1')}" for n in rows)]
    cells = [[name, *(f"{by[n]:.1f}" for n in rows)] for name, by in gflops.items()]
    console.print(plain_table(headers, cells))
    bw = roof["bandwidth_gbs"]
    console.print(
        f"memory: copy {bw['copy']:.1f} GB/s (read + written) and read {bw['read']:.1f} GB/s "
        f"of {roof['bandwidth_mb']:g} MiB; read {bw['read pass']:.1f} GB/s of "
        f"{roof['pass_mb']:.1f} MB, one decode step's bytes, re-read as the loop re-reads them"
    )
    passes = roof["passes"]
    console.print(
        f"\nwhere the target's passes stand, in ms (each reads {passes[0]['mb']:.1f} MB): "
        "bound = max(bytes / bandwidth, FLOPs / matmul rate)",
        style="bold",
    )
    headers = ["pass", "MFLOP", "bound", "bound by", "measured", "of bound", "r", "r at bound"]
    cells = [
        [
            p["pass"]
            if p["pass"] == "decode step"
            else f"{p['tokens']} token{'s' * (p['tokens'] > 1)}",
            f"{p['mflop']:.1f}",
            f"{p['bound_ms']:.3f}",
            p["bound_by"],
            f"{p['measured_ms']:.3f}",
            f"{p['of_bound']:.2f}",
            f"{p['r']:.2f}" if "r" in p else "–",
            f"{p['r_at_bound']:.2f}" if "r_at_bound" in p else "–",
        ]
        for p in passes
    ]
    console.print(plain_table(headers, cells))
    alone = [p for p in passes if "matmuls_ms" in p and p["tokens"] > 1]
    if alone:
        console.print(
            "the matmuls alone, over weights streamed as a pass streams them: "
            + "; ".join(
                f"{p['tokens']} tokens {p['matmuls_ms']:.3f} ms "
                f"({p['matmuls_ms'] / p['measured_ms']:.0%} of the pass), "
                f"r {p['r_matmuls']:.2f}"
                for p in alone
            )
            + f"; 1 token {passes[1]['matmuls_ms']:.3f} ms. That r is the pass's own if "
            "nothing but its matmuls cost anything."
        )


def sign_off(console: Console, report: dict, path: str | None) -> None:
    """How a measuring script ends: the machine it ran on (where the report has `described()`'s
    record), then, if a path was given, the whole report written there as JSON, or nothing."""
    from nanospec.fileio import atomic_write

    m = report.get("machine", {})
    if "cpu" in m:
        console.print(f"{m['cpu']}, {m['cores']} cores, jax {m['jax']}, jaxlib {m['jaxlib']}")
    if path:
        atomic_write(path, json.dumps(report, indent=2))
        console.print(f"written: {path}")


def plain_table(headers: list[str], cells: list[list[str]]) -> Table:
    """A compact table: the first column left-aligned, the rest right-aligned."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 else "right", overflow="fold")
    for row in cells:
        t.add_row(*row)
    return t
