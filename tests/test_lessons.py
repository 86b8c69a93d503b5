"""The lessons, tested as a learner uses them. Each one runs top to bottom as a notebook in a
real Jupyter kernel (jupytext converts it, nbclient executes it on ipykernel) with every claim
checked (✓) and no error output — which runs the same code as `python lessons/NN_….py`, so
each lesson runs once in the suite. Each is listed in the README's lessons index. A claim that
fails stops the lesson: exit status 1 as a script, ClaimFailed in a kernel (teach.claim)."""

import json
import re
import subprocess
import sys
import xml.dom.minidom

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from nanospec.teach import REPO, lesson_files

LESSONS = lesson_files()
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_there_are_at_least_fifteen_numbered_lessons():
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert len(numbers) >= 15
    assert numbers == list(range(1, len(numbers) + 1)), "numbered 01, 02, … with no gaps"


def execute(nb, timeout: int = 600):
    """Run `nb` in a fresh ipykernel in the repository (as `jupyter lab` there would), and
    return every output's text, streams and displays alike."""
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    return outputs_text(nb)


def outputs_text(nb) -> str:
    """Every output's text (rich's colours stripped); an error output fails the test."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") + out.get("data", {}).get("text/plain", ""))
            assert out["output_type"] != "error", out
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(parts))


@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_as_a_notebook_and_its_claims_hold(path, as_users_compile):
    nb = jupytext.read(path, fmt="py:percent")
    text = execute(nb)
    assert "✓" in text and "✗" not in text and "Traceback" not in text, text[-3000:]


def notebook(*cells: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def test_in_a_kernel_a_failed_claim_raises_and_figures_show_inline(tmp_path, monkeypatch):
    """In a notebook a claim that fails shows ✗ and raises (never sys.exit, which would end
    the kernel); figures appear inline without --figures, and nothing is written to disk."""
    monkeypatch.setenv("NANOSPEC_FIGURES", str(tmp_path))
    nb = notebook(
        "from nanospec.teach import claim, figure\n"
        "figure('line', lambda ax: ax.plot([0, 1], [1, 0]))",
        "claim(True, 'two is even')",
        "claim(False, 'three is even')",
        "print('never reached')",
    )
    with pytest.raises(CellExecutionError) as stopped:
        execute(nb, timeout=120)
    assert "ClaimFailed" in str(stopped.value) and "three is even" in str(stopped.value)
    assert "SystemExit" not in str(stopped.value)
    shown = nb.cells[0].outputs
    assert any("image/png" in out.get("data", {}) for out in shown)
    assert "✓ two is even" in outputs_text(nbformat.v4.new_notebook(cells=nb.cells[1:2]))
    assert nb.cells[3].get("outputs", []) == []  # the notebook stopped at the failed claim
    assert not list(tmp_path.iterdir())


def test_make_lessons_runs_every_lesson_and_lists_each_failure(tmp_path, monkeypatch, capsys):
    from nanospec import teach

    lessons = []
    for name, body in (
        ("01_fails.py", "import sys; sys.exit(1)"),
        ("02_holds.py", "pass"),
        ("03_fails.py", "raise SystemExit(1)"),
    ):
        lessons.append(tmp_path / name)
        lessons[-1].write_text(body)
    monkeypatch.setattr(teach, "lesson_files", lambda: lessons)
    monkeypatch.setattr(teach, "FIGURES", tmp_path / "out")
    assert teach.run_all([]) == 1
    out = capsys.readouterr().out
    assert "2 of 3 lessons failed: 01_fails.py, 03_fails.py." in out
    assert set(json.loads((tmp_path / "out" / "timings.json").read_text())) == {
        "01_fails.py",
        "02_holds.py",
        "03_fails.py",
    }


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_as_a_notebook(path):
    source = path.read_text(encoding="utf-8")
    nb = jupytext.reads(source, fmt="py:percent")
    kinds = [c.cell_type for c in nb.cells]
    assert kinds[0] == "markdown" and "code" in kinds
    first = nb.cells[0].source
    number = int(path.name[:2])
    assert first.startswith(f"# Lesson {number:02d} — "), first[:60]
    assert "**You will see**" in first and "**It explains**" in first
    # Every marker became a cell, and no prose cell swallowed code (or the reverse).
    assert len(nb.cells) == len(re.findall(r"^# %%", source, flags=re.M))
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert "import " not in cell.source and "claim(" not in cell.source
    # And back: the notebook writes the same cells again.
    again = jupytext.reads(jupytext.writes(nb, fmt="py:percent"), fmt="py:percent")
    assert [c.source for c in again.cells] == [c.source for c in nb.cells]


# The clashes lessons/NOTATION.md retired, as they were written: a time written T, a law a
# draft reports written r, a sampled law written s, a test's level written α.
CLASHES = {
    "a time is t, not T": r"\bT\((?:N|1)\)|\bT_(?:ar|spec|verify|draft)\b",
    "a reported law is q′, not r": r"\blaw r\b|residual\(p, r\)|u·r\(x\)",
    "a sampled law is q, not s": r"\blaw s\b|s\(y\)·",
    "a test's level is δ, not α": r"\bat α = 0\.|\blevel α\b|α = 1e-",
    "a sibling's residual law is ρ, not r": r"\br_k\b|\br_0 = p",
    "r is a pass's cost, not a round's number": r"\bround r\b",
    "a token is x or y, not t": r"\btoken t(?![*\w])|embed\(t\)|token \{t\}|\bfor t in (?:top|toks)\b|, t, gap\b",
    "r takes a pass's width n: r(n), not r(N)": r"\br\(N\)",
}
COURSE = [*LESSONS, *sorted((REPO / "lessons" / "exercises").rglob("*.py"))]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: str(p.relative_to(REPO / "lessons")))
def test_the_course_keeps_one_notation(path):
    """Every lesson's header points to lessons/NOTATION.md, and no file of the course uses a
    symbol in a meaning NOTATION.md retired."""
    source = path.read_text(encoding="utf-8")
    if path in LESSONS:
        header = jupytext.reads(source, fmt="py:percent").cells[0].source
        assert "Notation: lessons/NOTATION.md" in header
    for rule, pattern in CLASHES.items():
        found = [m.group(0) for m in re.finditer(pattern, source)]
        assert not found, f"{path.name}: {rule} ({found[:3]})"


def test_every_retired_clash_is_named_in_notation_md():
    notation = (REPO / "lessons" / "NOTATION.md").read_text(encoding="utf-8")
    for symbol in (
        "for a reported law",
        "for a sampled law",
        "for times",
        "for a test's",
        "for a sibling's residual",
        "for a round's number",
        "for a token",
        "`r(N)`",
    ):
        assert symbol in notation, symbol


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_readme_lessons_index_lists_the_lesson(path):
    title = path.read_text(encoding="utf-8").splitlines()[1].split(" — ", 1)[1].strip()
    row = next(
        (line for line in README.splitlines() if line.startswith(f"| {path.name[:2]} ")), None
    )
    assert row is not None, f"README lessons index has no row for {path.name}"
    assert f"lessons/{path.name}" in row and title in row
    assert re.search(r"\| \d+ s \|", row), "the row quotes the lesson's run time"


def test_figures_flag_writes_an_svg(tmp_path, monkeypatch):
    """A lesson run with --figures writes each figure as an SVG, all or nothing."""
    from nanospec import teach

    monkeypatch.setattr(sys, "argv", ["lesson.py", "--figures"])
    monkeypatch.setattr(teach, "FIGURES", tmp_path)
    teach.figure("04_output_law", lambda ax: ax.bar([0, 1, 2], [0.5, 0.3, 0.2]))
    svg = tmp_path / "04_output_law.svg"
    assert xml.dom.minidom.parse(str(svg)).documentElement.tagName == "svg"
    assert not list(tmp_path.glob("*.tmp*")), "written all or nothing"


def test_a_lesson_that_fails_a_claim_exits_1_with_its_cross(tmp_path):
    script = tmp_path / "lesson.py"
    script.write_text(
        "from nanospec.teach import claim\n"
        "claim(1 + 1 == 3, 'one and one make three')\nprint('never reached')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "✗ not true here: one and one make three" in done.stdout
    assert "never reached" not in done.stdout


def test_figures_without_matplotlib_is_one_sentence_and_exit_2(monkeypatch, capsys):
    from nanospec import teach

    monkeypatch.setattr(sys, "argv", ["lesson.py", "--figures"])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(SystemExit) as done:
        teach.figure("never", lambda ax: None)
    assert done.value.code == 2
    assert (
        capsys.readouterr().out.strip()
        == "--figures needs matplotlib: pip install -c constraints.txt -e '.[figures]'"
    )


def test_a_claim_prints_its_brackets(capsys):
    from nanospec import teach

    teach.claim(True, "the interval [lo, hi] holds [b]it[/b]")
    assert "[lo, hi] holds [b]it[/b]" in capsys.readouterr().out
