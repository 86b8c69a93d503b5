"""What the lessons share (lessons/): the shipped models, claims that fail loudly, bars.

A lesson *asserts* what it teaches: `claim(ok, sentence)` prints the sentence with a ✓, or
prints it with a ✗ and stops the lesson — so a lesson that stops being true fails in `make
test`, exactly as a learner would see it fail. On the command line it stops with exit status
1; opened as a notebook (a Jupyter kernel), it raises ClaimFailed, which stops the notebook
and leaves the kernel running.

Figures: the terminal gets rich tables and bars; run a lesson with `--figures` and
`figure(name, draw)` also writes runs/lessons/<name>.svg for a slide (matplotlib, the optional
`figures` extra: `pip install -e '.[figures]'`; $NANOSPEC_FIGURES names another folder). In a
notebook, every figure is drawn inline instead.

`python -m nanospec.teach [--figures]` (`make lessons`) runs every lesson in order, each as
its own process exactly as a learner runs it, prints how long each took, and lists every
lesson that failed.
"""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nanospec import compile_cache

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "checkpoints"
LESSONS = REPO / "lessons"
FIGURES = Path(os.environ.get("NANOSPEC_FIGURES", REPO / "runs" / "lessons"))
console = Console()
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
    if ok:
        console.print(f"[green]✓[/] {escape(sentence)}")
        return
    console.print(f"[red]✗ not true here:[/] {escape(sentence)}")
    if in_notebook():
        raise ClaimFailed(f"not true here: {sentence}")
    sys.exit(1)


def tv(a, b) -> float:
    """Total-variation distance between two laws: the most any event's probability can differ,
    ½ Σ |a − b|. tv([.5 .5], [.6 .4]) = 0.1."""
    return 0.5 * float(np.abs(np.asarray(a, float) - np.asarray(b, float)).sum())


def bar(value: float, most: float, width: int = 30) -> str:
    """A horizontal bar of `value` on a scale up to `most`, `width` characters at most."""
    full = int(round(width * max(0.0, min(value / most, 1.0)) * 8)) if most > 0 else 0
    return "█" * (full // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[full % 8]


def table(title: str, columns: list[str], rows: list[list]) -> None:
    """Print a small table: the first column and bars (an empty header) left-aligned, the
    rest right-aligned, as given (format them first)."""
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 or not c else "right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    console.print(t)


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
        console.print("--figures needs matplotlib: pip install -e '.[figures]'", markup=False)
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
    from nanospec.fileio import atomic_write
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    FIGURES.mkdir(parents=True, exist_ok=True)
    atomic_write(FIGURES / f"{name}.svg", buf.getvalue())
    console.print(f"figure written: {FIGURES / f'{name}.svg'}")


def lesson_files() -> list[Path]:
    """Every numbered lesson, in order: lessons/NN_topic.py."""
    return sorted(LESSONS.glob("[0-9][0-9]_*.py"))


def run_all(flags: list[str]) -> int:
    """Run every lesson in order as a learner would; print and save (runs/lessons/timings.json)
    how long each took. A lesson that fails does not stop the rest: every failure is listed
    at the end, and the status is then 1."""
    from nanospec.fileio import atomic_write
    seconds, failed = {}, []
    for path in lesson_files():
        console.rule(path.name)
        start = time.perf_counter()
        code = subprocess.run([sys.executable, str(path), *flags], cwd=REPO).returncode
        seconds[path.name] = round(time.perf_counter() - start, 1)
        if code != 0:
            console.print(f"[red]✗ {path.name} failed (exit status {code}); going on.[/]")
            failed.append(path.name)
    table("lessons, wall time on this machine", ["lesson", "seconds", "", "ok"],
          [[name, f"{s:.1f}", bar(s, 45, 30), "✗" if name in failed else "✓"]
           for name, s in seconds.items()])
    FIGURES.mkdir(parents=True, exist_ok=True)
    atomic_write(FIGURES / "timings.json", json.dumps(seconds, indent=1) + "\n")
    if failed:
        console.print(f"[red]{len(failed)} of {len(seconds)} lessons failed: "
                      f"{', '.join(failed)}.[/]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_all(sys.argv[1:]))
