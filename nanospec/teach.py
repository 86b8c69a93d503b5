"""What the lessons share (lessons/): the shipped models, claims that fail loudly, bars.

A lesson *asserts* what it teaches: `claim(ok, sentence)` prints the sentence with a ✓, or
prints it with a ✗ and stops the lesson — so a lesson that stops being true fails in `make
test`, exactly as a learner would see it fail. On the command line it stops with exit status
1; opened as a notebook (a Jupyter kernel), it raises ClaimFailed, which stops the notebook
and leaves the kernel running.

Figures: the terminal gets rich tables and bars; run a lesson with `--figures` and
`figure(name, draw)` also writes runs/lessons/<name>.svg for a slide (matplotlib, the optional
`figures` extra: `pip install -c constraints.txt -e '.[figures]'`; $NANOSPEC_FIGURES names
another folder). In a notebook, every figure is drawn inline instead.

`python -m nanospec.teach [--figures]` (`make lessons`) runs every lesson in order, each as
its own process exactly as a learner runs it, prints how long each took, and lists every
lesson that failed.

`python -m nanospec.teach --spread N [--load K] [--out lessons/NUMBERS.md]` runs every lesson
N times and writes the instructor's table of what they print: each claim with its numbers as
ranges over the N runs, how often it held, and each lesson's wall time. It reads the claims
from $NANOSPEC_CLAIMS, a file to which every `claim` appends one JSON line when it is set.
`--load K` runs K busy loops (one Python process spinning each) beside the lessons the whole
time: a laptop in a workshop is rarely idle, and a timing claim must hold there too.
"""

import argparse
import io
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

import jax
import numpy as np
from rich.markup import escape

# compat: on jax 0.4 (Intel Macs) a seed draws the numbers it draws on newer JAX (compat.py).
from nanospec import SHIPPED, compat, compile_cache  # noqa: F401 (lessons import SHIPPED here)
from nanospec.fileio import atomic_write
from nanospec.machine import cores, cpu_name
from nanospec.measure.tables import CONSOLE, table  # noqa: F401 (lessons import table here)

REPO = Path(__file__).resolve().parent.parent
LESSONS = REPO / "lessons"
FIGURES = Path(os.environ.get("NANOSPEC_FIGURES", REPO / "runs" / "lessons"))
PYTHON = ".venv/bin/python" if os.name == "posix" else r".venv\Scripts\python"  # as make made it
console = CONSOLE  # the tables' console: prints and tables in one stream
compile_cache.enable()  # as the CLI does: a lesson run again loads its programs, not compiles
# Full float32 matrix products, on GPUs too (JAX's default there is TF32, ~1e-3 relative
# error): the lessons compare texts token for token, and allow them to part only at a
# near-tie within float32's rounding (measure.positions.NEAR_TIE).
jax.config.update("jax_default_matmul_precision", "highest")


def shipped(*names: str):
    """The shipped tokenizer and models (decode.Bundle): "target", "draft", or a head."""
    from nanospec.decode import Bundle

    return Bundle.load(SHIPPED, names or ("target", "draft"))


class ClaimFailed(AssertionError):
    """A lesson's claim did not hold here (raised in a notebook, where exiting would end the
    kernel)."""


def in_notebook() -> bool:
    """True when the lesson runs in a Jupyter kernel rather than as a script."""
    ipython = sys.modules.get("IPython")  # never imported here: a script has not loaded it
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def claim(ok: bool, sentence: str) -> None:
    """Print the claim with ✓ if it holds; otherwise print it with ✗ and stop the lesson:
    exit status 1 on the command line, ClaimFailed in a notebook."""
    record(ok, sentence)
    if ok:
        console.print(f"[green]✓[/] {escape(sentence)}")
        return
    console.print(f"[red]✗ not true here:[/] {escape(sentence)}")
    if in_notebook():
        raise ClaimFailed(f"not true here: {sentence}")
    sys.exit(1)


def record(ok: bool, sentence: str) -> None:
    """Append the claim to the file $NANOSPEC_CLAIMS names, if it names one, as one JSON line
    {"lesson", "sentence", "ok"}: how `--spread` learns what each run of a lesson printed."""
    path = os.environ.get("NANOSPEC_CLAIMS")
    if not path:
        return
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    line = {"lesson": Path(main or sys.argv[0]).name, "sentence": sentence, "ok": bool(ok)}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")


def tv(a, b) -> float:
    """Total-variation distance between two laws: the most any event's probability can differ,
    ½ Σ |a − b|. tv([.5 .5], [.6 .4]) = 0.1."""
    return 0.5 * float(np.abs(np.asarray(a, float) - np.asarray(b, float)).sum())


def bar(value: float, most: float, width: int = 30) -> str:
    """A horizontal bar of `value` on a scale up to `most`, `width` characters at most."""
    full = round(width * max(0.0, min(value / most, 1.0)) * 8) if most > 0 else 0
    return "█" * (full // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[full % 8]


def figure(name: str, draw) -> None:
    """Call `draw(ax)` on a fresh matplotlib axes: in a notebook, show the figure inline; with
    `--figures` on the lesson's command line, write it to runs/lessons/<name>.svg (all or
    nothing); otherwise do nothing. Without matplotlib: one sentence, and on the command line
    exit status 2."""
    inline = in_notebook()
    if not inline and "--figures" not in sys.argv[1:]:
        return
    try:
        import matplotlib

        if not inline:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print(
            "--figures needs matplotlib: pip install -c constraints.txt -e '.[figures]'",
            markup=False,
        )
        if inline:
            return
        sys.exit(2)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    draw(ax)
    if inline:
        from IPython.display import display

        display(fig)
        plt.close(fig)
        return
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    FIGURES.mkdir(parents=True, exist_ok=True)
    atomic_write(FIGURES / f"{name}.svg", buf.getvalue())
    console.print(f"figure written: {FIGURES / f'{name}.svg'}")


def lesson_files() -> list[Path]:
    """Every numbered lesson, in order: lessons/NN_topic.py."""
    return sorted(LESSONS.glob("[0-9][0-9]_*.py"))


def run_lesson(path: Path, flags: list[str], env: dict | None = None) -> tuple[float, int]:
    """Run one lesson as its own process, exactly as a learner would: (seconds, exit status)."""
    console.rule(path.name)
    start = time.perf_counter()
    code = subprocess.run(
        [sys.executable, str(path), *flags], cwd=REPO, env=env, check=False
    ).returncode
    return time.perf_counter() - start, code


def run_all(flags: list[str]) -> int:
    """Run every lesson in order as a learner would; print and save (runs/lessons/timings.json)
    how long each took. A lesson that fails does not stop the rest: every failure is listed
    at the end, and the status is then 1."""
    seconds, failed = {}, []
    for path in lesson_files():
        s, code = run_lesson(path, flags)
        seconds[path.name] = round(s, 1)
        if code != 0:
            console.print(f"[red]✗ {path.name} failed (exit status {code}); going on.[/]")
            failed.append(path.name)
    table(
        "lessons, wall time on this machine",
        ["lesson", "seconds", "", "ok"],
        [
            [name, f"{s:.1f}", bar(s, 45, 30), "✗" if name in failed else "✓"]
            for name, s in seconds.items()
        ],
    )
    FIGURES.mkdir(parents=True, exist_ok=True)
    atomic_write(FIGURES / "timings.json", json.dumps(seconds, indent=1) + "\n")
    if failed:
        console.print(
            f"[red]{len(failed)} of {len(seconds)} lessons failed: {', '.join(failed)}.[/]"
        )
        return 1
    return 0


# A number as a lesson prints it: 3, 0.93, -3, −3, .644, 1e-3, 20,000 (a × or % after it stays
# text, and 3/4 is two numbers). Not the digits of a name (float32, x2): the look-behind.
NUMBER = re.compile(
    r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)?|\.\d+)"
    r"(?:e[-+]?\d+)?"
)


def template(sentence: str) -> tuple[tuple[str, ...], list[str]]:
    """The text around the sentence's numbers, and the numbers as printed: two runs of a claim
    share a template when only their numbers differ.
    template("α̂ = 0.93, 3/4 held") = (("α̂ = ", ", ", "/", " held"), ["0.93", "3", "4"])."""
    return tuple(NUMBER.split(sentence)), NUMBER.findall(sentence)


def group_claims(runs: list[list[dict]]) -> dict[str, dict]:
    """Each lesson's claims over the runs, keyed by (template, occurrence): a sentence a lesson
    prints twice with other numbers is two rows, matched run to run by its order.
    {lesson: {(template, k): {"numbers": [one list per run], "held": runs, "failed": runs}}}"""
    grouped = defaultdict(dict)
    for claims in runs:
        seen = defaultdict(int)  # (lesson, template): how many this run has printed so far
        for c in claims:
            parts, numbers = template(c["sentence"])
            k = seen[c["lesson"], parts]
            seen[c["lesson"], parts] += 1
            row = grouped[c["lesson"]].setdefault(
                (parts, k), {"numbers": [], "held": 0, "failed": 0}
            )
            row["numbers"].append(numbers)
            row["held" if c["ok"] else "failed"] += 1
    return grouped


def span(printed: list[str]) -> str:
    """One number over the runs: the least and the most as printed, "0.61–0.66", or the one
    value every run printed. span(["0.66", "0.61", "0.64"]) = "0.61–0.66"."""
    value = lambda x: float(x.replace("−", "-").replace(",", ""))
    lo, hi = min(printed, key=value), max(printed, key=value)
    return lo if lo == hi else f"{lo}–{hi}"


def markdown_escape(text: str) -> str:
    """Text that a markdown table cell shows as written: α* starts no italics, and a < starts
    no HTML tag (one before a space, as in k < γ, never does, so it is left as it is)."""
    return re.sub(r"([\\`*_|\[\]]|<(?=[\w/!?]))", r"\\\1", text)


def spread_rows(
    runs: list[list[dict]], seconds: dict[str, list[float]], stopped: dict[str, int]
) -> list[str]:
    """The markdown table: per lesson its wall time (least–most seconds), then each claim with
    its numbers as ranges over the runs (bold where the runs differed) and how often it held."""
    n, grouped = len(runs), group_claims(runs)
    rows = [
        "| lesson | seconds | claim (**bold**: differed between runs) | held |",
        "|---|---:|---|---:|",
    ]
    for lesson, times in seconds.items():
        cells = []  # (claim, held)
        for (parts, _), row in grouped.get(lesson, {}).items():
            text = markdown_escape(parts[0])
            for slot, after in zip(zip(*row["numbers"]), parts[1:]):  # a number over the runs
                text += f"**{span(slot)}**" if len(set(slot)) > 1 else slot[0]
                text += markdown_escape(after)
            failed = f", ✗ {row['failed']}" if row["failed"] else ""
            cells.append((text, f"{row['held']}/{n}{failed}"))
        if stopped.get(lesson):
            cells.append((f"*exited with a non-zero status in {stopped[lesson]} of {n} runs*", ""))
        lead = [lesson, span([f"{t:.0f}" for t in times])]
        for text, held in cells or [("*no claims*", "")]:
            rows.append("|" + "|".join(f" {x} " if x else " " for x in [*lead, text, held]) + "|")
            lead = ["", ""]  # the lesson and its seconds, on its first row only
    return rows


def machine() -> str:
    """This machine in a few words: cores, the CPU's model, and the software that matters."""
    return (
        f"{cores()} cores ({cpu_name()}), {platform.system()}, Python "
        f"{platform.python_version()}, jax {jax.__version__}"
    )


def load_average() -> float | None:
    """The one-minute load average, or None where the system keeps none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_loops(k: int) -> list[subprocess.Popen]:
    """`k` processes that each spin one core until killed: the load of `--load K`."""
    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin, stdout=subprocess.DEVNULL) for _ in range(k)]


def run_spread(n: int, out: Path, flags: list[str], load_k: int = 0) -> int:
    """Run every lesson `n` times, all of them and then all again (a busy spell on a shared
    machine then touches every lesson a little rather than one a lot), with `load_k` busy
    loops beside them, and write what their claims printed to `out` as a markdown table. The
    status is 1 if any run of any lesson failed; the table is written either way, with the
    failures in it."""
    runs, seconds, stopped, load = [], defaultdict(list), defaultdict(int), [load_average()]
    spinning = busy_loops(load_k)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(n):
                claims = Path(tmp) / f"run{i}.jsonl"
                claims.touch()
                for path in lesson_files():
                    env = {**os.environ, "NANOSPEC_CLAIMS": str(claims)}
                    s, code = run_lesson(path, flags, env)
                    seconds[path.name].append(s)
                    stopped[path.name] += code != 0
                    load.append(load_average())
                runs.append([json.loads(line) for line in claims.read_text("utf-8").splitlines()])
    finally:
        for p in spinning:
            p.kill()
            p.wait()
    shown = out.resolve().relative_to(REPO) if out.resolve().is_relative_to(REPO) else out
    loaded = f" --load {load_k}" if load_k else ""
    header = [
        "# What each lesson prints, and how much it varies",
        "",
        f"Every lesson run {n} times on {date.today():%Y-%m-%d}: {machine()}"
        + (f", with {load_k} busy loops beside them (`--load {load_k}`)" if load_k else "")
        + f". Written by `{PYTHON} -m nanospec.teach --spread {n}{loaded} --out {shown}`: run it "
        "again to refresh it.",
        "",
        (
            "Each row is a sentence a lesson checks with `claim`, its numbers shown as their range "
            "over the runs: **bold** where the runs differed, plain where every run printed the "
            "same (the lessons fix their seeds, so what they compute is the same each run; what "
            "they time is not). *held*: the runs in which the claim held (✗: the runs in which it "
            "failed). *seconds*: the lesson's wall time, least–most. Times, and every number "
            "computed from a clock, depend on the machine and on what else it was doing: "
            + load_sentence([x for x in load if x is not None])
        ),
        "",
    ]
    atomic_write(out, "\n".join(header + spread_rows(runs, seconds, stopped)) + "\n")
    console.print(f"written: {shown}")
    return 1 if any(stopped.values()) else 0


def load_sentence(load: list[float]) -> str:
    """How busy the machine was while the lessons ran, in words (the table's header)."""
    if not load:  # Windows keeps no load average (os.getloadavg is missing there)
        return "the one-minute load average was n/a: this system keeps none."
    return (
        f"the one-minute load average was {min(load):.1f}–{max(load):.1f} while these ran, on "
        f"{cores()} cores (a load near or above the core count means the lessons shared the "
        "machine)."
    )


def main(argv: list[str]) -> int:
    """`python -m nanospec.teach [--figures]` runs every lesson once; with `--spread N`, N
    times, for the table of what they print. Other options go to every lesson."""
    from nanospec.errors import UserError
    from nanospec.fileio import check_output

    parser = argparse.ArgumentParser(prog="python -m nanospec.teach", description=main.__doc__)
    parser.add_argument(
        "--spread",
        type=int,
        metavar="N",
        help="run every lesson N times and write the table of their numbers",
    )
    parser.add_argument(
        "--out", help="where --spread writes its table (default: lessons/NUMBERS.md)"
    )
    parser.add_argument(
        "--load", type=int, default=0, metavar="K", help="with --spread: K busy loops beside"
    )
    args, flags = parser.parse_known_args(argv)
    if args.spread is None:
        if args.out:
            parser.error("--out names the file --spread writes; give --spread N too.")
        if args.load:
            parser.error("--load sets the load of a --spread run; give --spread N too.")
        return run_all(flags)
    if args.spread < 1:
        parser.error(f"--spread needs at least 1 run, not {args.spread}.")
    if args.load < 0:
        parser.error(f"--load takes a number of busy loops, 0 or more, not {args.load}.")
    try:
        out = check_output(args.out or LESSONS / "NUMBERS.md", ".md", "--out")
    except UserError as e:
        parser.error(str(e))
    return run_spread(args.spread, out, flags, args.load)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
