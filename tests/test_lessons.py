"""The lessons, tested exactly as a learner runs them: each one a separate process that must
exit 0 with its claims checked (✓), open as a notebook (jupytext's percent format), and be
listed in the README's lessons index. A lesson that stops being true exits 1 (teach.claim)."""

import os
import re
import subprocess
import sys
import xml.dom.minidom

import jupytext
import pytest

from nanospec.teach import REPO, lesson_files

LESSONS = lesson_files()
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_there_are_at_least_fifteen_numbered_lessons():
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert len(numbers) >= 15
    assert numbers == list(range(1, len(numbers) + 1)), "numbered 01, 02, … with no gaps"


@pytest.mark.slow
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_and_its_claims_hold(path):
    done = subprocess.run([sys.executable, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "100"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "✓" in out and "✗" not in out and "Traceback" not in out, out[-3000:]


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


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_readme_lessons_index_lists_the_lesson(path):
    title = path.read_text(encoding="utf-8").splitlines()[1].split(" — ", 1)[1].strip()
    row = next((line for line in README.splitlines()
                if line.startswith(f"| {path.name[:2]} ")), None)
    assert row is not None, f"README lessons index has no row for {path.name}"
    assert f"lessons/{path.name}" in row and title in row
    assert re.search(r"\| \d+ s \|", row), "the row quotes the lesson's run time"


def test_figures_flag_writes_an_svg(tmp_path):
    lesson = REPO / "lessons" / "04_one_token_exactly.py"
    done = subprocess.run([sys.executable, str(lesson), "--figures"], cwd=REPO, text=True,
                          capture_output=True, timeout=600,
                          env={**os.environ, "NANOSPEC_FIGURES": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    svg = tmp_path / "04_output_law.svg"
    assert xml.dom.minidom.parse(str(svg)).documentElement.tagName == "svg"
    assert not list(tmp_path.glob("*.tmp*")), "written all or nothing"


def test_figures_without_matplotlib_is_one_sentence_and_exit_2(monkeypatch, capsys):
    from nanospec import teach
    monkeypatch.setattr(sys, "argv", ["lesson.py", "--figures"])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(SystemExit) as done:
        teach.figure("never", lambda ax: None)
    assert done.value.code == 2
    assert capsys.readouterr().out.strip() == \
        "--figures needs matplotlib: pip install -e '.[figures]'"


def test_a_claim_prints_its_brackets(capsys):
    from nanospec import teach
    teach.claim(True, "the interval [lo, hi] holds [b]it[/b]")
    assert "[lo, hi] holds [b]it[/b]" in capsys.readouterr().out
