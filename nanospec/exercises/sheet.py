"""The exercises of lessons/exercises/, and `check`, which runs one against a learner's file."""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console

from nanospec.errors import UserError
from nanospec.exercises.learner import Failure, load
from nanospec.exercises.loops import check_greedy_loop, check_lookup
from nanospec.exercises.rules import check_accept_reject, check_residual
from nanospec.exercises.sampled import check_verify_row, check_verify_siblings

FOLDER = Path(__file__).resolve().parent.parent.parent / "lessons" / "exercises"


@dataclass(frozen=True)
class Exercise:
    number: int
    stem: str  # the file name without .py, in lessons/exercises/ and its solutions/
    function: str  # what the learner implements
    params: tuple[str, ...]  # its parameters, in order
    checks: Callable[[Callable], Iterator[str]]  # yields what passed; raises Failure

    @property
    def stub(self) -> Path:
        return FOLDER / f"{self.stem}.py"


EXERCISES = {e.number: e for e in (
    Exercise(1, "01_accept_reject", "accept_reject", ("u", "p_x", "q_x"), check_accept_reject),
    Exercise(2, "02_residual", "residual", ("p", "q"), check_residual),
    Exercise(3, "03_verify_row", "verify_row", ("rng", "drafts", "q", "p"), check_verify_row),
    Exercise(4, "04_prompt_lookup", "lookup", ("context", "gamma", "max_ngram", "min_ngram"),
             check_lookup),
    Exercise(5, "05_greedy_loop", "greedy_speculative",
             ("target", "draft", "prompt", "gamma", "max_new"), check_greedy_loop),
    Exercise(6, "06_tree_siblings", "verify_siblings", ("rng", "candidates", "q", "p"),
             check_verify_siblings),
)}


def find(number: int) -> Exercise:
    if number not in EXERCISES:
        raise UserError(f"There is no exercise {number}; the exercises are "
                        f"{min(EXERCISES)} to {max(EXERCISES)} (nanospec exercise list).")
    return EXERCISES[number]


def check(number: int, file: str | None = None, console: Console | None = None) -> bool:
    """Run exercise `number`'s checks on `file` (default: its stub in lessons/exercises/),
    printing each; True if all passed. Bad input (no such exercise or file, a syntax error,
    the wrong signature) raises UserError."""
    console = console or Console(highlight=False)
    exercise = find(number)
    path = Path(file) if file else exercise.stub
    fn = load(path, exercise.function, exercise.params)
    console.print(f"exercise {number}: {exercise.function}({', '.join(exercise.params)}) "
                  f"in {path}")
    try:
        for passed in exercise.checks(fn):
            console.print(f"  [green]✓[/] {passed}")
    except Failure as failure:
        console.print(f"  [red]✗[/] {failure}")
        return False
    console.print(f"[green]All checks passed.[/] Compare with solutions/{exercise.stem}.py "
                  f"and read the library's version.")
    return True


def listing() -> list[tuple[int, str, str]]:
    """(number, function and its parameters, stub path) for every exercise."""
    return [(e.number, f"{e.function}({', '.join(e.params)})", str(e.stub.relative_to(FOLDER.parent.parent)))
            for e in EXERCISES.values()]
