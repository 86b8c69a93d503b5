"""The exercises of lessons/exercises/ and `check`, which runs one against a learner's file."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from nanospec.errors import UserError
from nanospec.exercises.batched import check_accepted_counts
from nanospec.exercises.gamma import check_best_gamma
from nanospec.exercises.greedy import check_greedy_loop
from nanospec.exercises.learner import Failure, load
from nanospec.exercises.lookup import check_lookup
from nanospec.exercises.rollback import check_verify_and_rollback
from nanospec.exercises.rules import check_one_token
from nanospec.exercises.sampled import check_verify_row, check_verify_siblings

REPO = Path(__file__).resolve().parent.parent.parent
FOLDER = REPO / "lessons" / "exercises"


@dataclass(frozen=True)
class Exercise:
    number: int
    stem: str  # the file name without .py, in lessons/exercises/ and its solutions/ and broken/
    # What the learner implements, one (name, its parameters in order) per function.
    functions: tuple[tuple[str, tuple[str, ...]], ...]
    # Takes those functions in that order; yields what passed; raises Failure.
    checks: Callable[..., Iterator[str]]

    @property
    def stub(self) -> Path:
        return FOLDER / f"{self.stem}.py"

    @property
    def read_after(self) -> str:
        """The stub's "Read after:" text (the library's version, then lessons), one line."""
        lines = self.stub.read_text(encoding="utf-8").splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("Read after:"))
        end = next(
            (i for i in range(start + 1, len(lines)) if not lines[i].strip() or '"""' in lines[i]),
            len(lines),
        )
        text = " ".join(line.strip() for line in lines[start:end])
        return text.removeprefix("Read after:").strip().rstrip(".")

    @property
    def solution(self) -> Path:
        return FOLDER / "solutions" / f"{self.stem}.py"

    @property
    def signature(self) -> str:
        return ", ".join(f"{name}({', '.join(params)})" for name, params in self.functions)


def _exercise(number, stem, checks, *functions) -> Exercise:
    """An Exercise from ("name", "its parameters separated by spaces") pairs."""
    return Exercise(number, stem, tuple((f, tuple(p.split())) for f, p in functions), checks)


# In the order of the lessons they follow; lessons/exercises/README.md has the table.
EXERCISES = {
    e.number: e
    for e in (
        _exercise(
            1,
            "01_greedy_loop",
            check_greedy_loop,
            ("greedy_speculative", "target draft prompt gamma max_new"),
        ),
        _exercise(
            2,
            "02_accept_and_residual",
            check_one_token,
            ("accept_reject", "u p_x q_x"),
            ("residual", "p q"),
        ),
        _exercise(3, "03_verify_row", check_verify_row, ("verify_row", "rng drafts q p")),
        _exercise(
            4,
            "04_kv_rollback",
            check_verify_and_rollback,
            ("verify_and_rollback", "target cache last drafts"),
        ),
        _exercise(
            5, "05_batched_verify", check_accepted_counts, ("accepted_counts", "u p_x q_x n_draft")
        ),
        _exercise(6, "06_choosing_gamma", check_best_gamma, ("best_gamma", "alpha c r gammas")),
        _exercise(
            7, "07_prompt_lookup", check_lookup, ("lookup", "context gamma max_ngram min_ngram")
        ),
        _exercise(
            8, "08_tree_siblings", check_verify_siblings, ("verify_siblings", "rng candidates q p")
        ),
    )
}


def find(number: int) -> Exercise:
    if number not in EXERCISES:
        raise UserError(
            f"There is no exercise {number}; the exercises are "
            f"{min(EXERCISES)} to {max(EXERCISES)} (nanospec exercise list)."
        )
    return EXERCISES[number]


def check(number: int, file: str | None = None, console: Console | None = None) -> bool:
    """Run exercise `number`'s checks on `file` (default: its stub in lessons/exercises/),
    printing each; True if all passed. Bad input (no such exercise or file, a syntax error,
    the wrong signature) raises UserError."""
    console = console or Console(highlight=False)
    exercise = find(number)
    path = Path(file) if file else exercise.stub
    fns = [load(path, name, params) for name, params in exercise.functions]
    console.print(escape(f"exercise {number}: {exercise.signature} in {path}"))
    try:
        for passed in exercise.checks(*fns):
            console.print(f"  [green]✓[/] {escape(passed)}")
    except Failure as failure:
        console.print(f"  [red]✗[/] {escape(str(failure))}")
        return False
    solution = exercise.solution.relative_to(REPO)  # as the learner, at the repository's root
    console.print(
        "[green]All checks passed.[/] "
        + escape(f"Compare with {solution}, then read {exercise.read_after}.")
    )
    return True


def listing() -> list[tuple[int, str, str]]:
    """(number, functions and their parameters, stub path) for every exercise."""
    return [(e.number, e.signature, str(e.stub.relative_to(REPO))) for e in EXERCISES.values()]
