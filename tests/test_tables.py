"""The bench and eval reports stay readable at 80 columns, and come whole in a file or with --wide.

Reports here are synthetic (the widest realistic cells: a "tree 3,2,1" label, seven-digit
parameter counts, two-digit speedups), so these tests render without running a model.
"""

import io
import re
import sys

from rich.console import Console

from nanospec.measure.tables import (
    BENCH_COLUMNS,
    WIDE_CONSOLE,
    console_for,
    print_bench,
    print_eval,
)

KINDS = [
    "capital",
    "currency",
    "language",
    "continent",
    "demonym",
    "population",
    "neighbour",
    "all",
]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def bench_row(method, gamma, **changes):
    return {
        "method": method,
        "gamma": gamma,
        "alpha": 0.871,
        "acceptance_rate": 0.612,
        "mean_acceptance_length": 4.67,
        "c": 0.123,
        "tau_per_draft_cost": 12.3,
        "verify_over_ar": 1.88,
        "expected_tokens_per_round": 5.43,
        "predicted_decode_speedup": 2.81,
        "predicted_speedup": 12.34,
        "measured_speedup": 2.04,
        "efficiency": 1.19,
        "ttft_ms": 123.4,
        "tpot_ms": 0.5,
        "tpot_speedup": 54.45,
        "extra_params": 1_512_345,
        "extra_memory_mb": 123.45,
        "flags": [],
        "decode_share": 0.6,
        **changes,
    }


def bench_report():
    rows = [
        bench_row("medusa", 4, flags=["tpot_inconsistent"]),
        bench_row("draft", 15),
        bench_row("eagle", "tree 3,2,1", c=None, tau_per_draft_cost=None),
    ]
    return {
        "workload": "repetitive",
        "temperature": 0.7,
        "prompts": 64,
        "tokens_per_prompt": 128,
        "repeats": 3,
        "rows": rows,
        "best": rows[0],
        "ar": {
            "ttft_ms": 13.5,
            "tpot_ms": 4.0,
            "tokens_per_second": 179,
            "decode_ms_per_token": 3.999,
            "tpot_over_decode_probe": 1.01,
        },
        "draft_model_decode_ms_per_token": {"draft": 0.083},
        "skipped": [
            {"method": "mtp", "gammas": [7, 15], "reason": "mtp has 4 heads, so γ can be at most 4"}
        ],
    }


def eval_results():
    return {
        name: {
            "facts": dict.fromkeys(KINDS, acc),
            "function_word_accuracy": fw,
            "other_token_accuracy": other,
        }
        for name, acc, fw, other in (
            ("target", 0.948, 0.942, 0.855),
            ("draft", 0.887, 0.939, 0.835),
        )
    }


def render(print_fn, *args, width, **kw) -> str:
    out = io.StringIO()
    print_fn(Console(width=width, file=out, force_terminal=False), *args, **kw)
    return out.getvalue()


def cells(report) -> list[str]:
    """Every number of every row as the table prints it."""
    return [
        format(r[key], spec) + unit
        for r in report["rows"]
        for key, spec, unit in BENCH_COLUMNS.values()
        if r.get(key) is not None
    ]


def assert_fits_80(text):
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_bench_at_80_columns_squeezes_nothing_and_keeps_every_number():
    report = bench_report()
    text = render(print_bench, report, width=80)
    assert_fits_80(text)
    for cell in cells(report):
        assert cell in text, cell
    assert "tree 3,2,1" in text.replace("\n", " ")  # the label may wrap, but never shrinks


def test_bench_wide_is_one_table_with_every_column_on_one_line(monkeypatch):
    report = bench_report()
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys, "stdout", Terminal())  # an 80-column terminal, and --wide
    print_bench(console_for(wide=True), report, wide=True)
    for text in (
        render(print_bench, report, width=WIDE_CONSOLE),  # a file or a pipe
        sys.stdout.getvalue(),
    ):
        header = next(line for line in text.splitlines() if "accept rate" in line)
        assert all(col in header for col in ("method", *BENCH_COLUMNS)), header
        assert text.count("accept rate") == 1  # one table, not three
    wide = render(print_bench, report, width=WIDE_CONSOLE)
    assert "…" not in wide and all(cell in wide for cell in cells(report))
    # A flagged row's TPOT is marked in the table and explained below it.
    assert "54.45×!" in wide and re.search(
        r"medusa γ = 4: 54\.45× per output token beside 2\.04×", wide
    )
    assert "skipped: mtp γ = 7, 15 (mtp has 4 heads, so γ can be at most 4)" in wide


def test_eval_at_80_columns_turns_the_table_on_its_side():
    text = render(print_eval, eval_results(), KINDS, width=80)
    assert_fits_80(text)
    for value in ("94.2%", "93.9%", "85.5%", "83.5%", "95%", "89%", "neighbour", "all facts"):
        assert value in text, value
    wide = render(print_eval, eval_results(), KINDS, width=WIDE_CONSOLE)
    header = next(line for line in wide.splitlines() if "capital" in line)
    assert all(k in header for k in ("model", *KINDS, "function words", "other tokens"))


def test_a_file_or_a_pipe_gets_a_wide_console_and_a_terminal_its_own_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # redirected: no width of its own
    assert console_for().width == WIDE_CONSOLE  # rich alone would assume 80 and squeeze
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert console_for().width == 80
    assert console_for(wide=True).width == WIDE_CONSOLE
