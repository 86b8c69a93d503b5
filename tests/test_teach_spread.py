"""`python -m nanospec.teach --spread N`: the instructor's table of what each lesson prints.
The grouping and the table are checked on claims written by hand; one test runs a fake lesson
twice through the real subprocess path, with $NANOSPEC_CLAIMS recording its claims."""

import re

import pytest

from nanospec import teach


@pytest.mark.parametrize(
    "sentence, parts, numbers",
    [
        ("α̂ = 0.93 above α* = 0.40", ("α̂ = ", " above α* = ", ""), ["0.93", "0.40"]),
        (
            "served 1.25× the tokens, 45% of them",
            ("served ", "× the tokens, ", "% of them"),
            ["1.25", "45"],
        ),
        (
            "p-value 0.031 > 1e-4 at N = 20,000",
            ("p-value ", " > ", " at N = ", ""),
            ["0.031", "1e-4", "20,000"],
        ),
        (
            "moved by -3 and −2, held 3/4",
            ("moved by ", " and ", ", held ", "/", ""),
            ["-3", "−2", "3", "4"],
        ),
        ("[.644 .237] in float32 on x2", ("[", " ", "] in float32 on x2"), [".644", ".237"]),
    ],
)
def test_template_replaces_each_number_and_keeps_the_words(sentence, parts, numbers):
    assert teach.template(sentence) == (parts, numbers)


def test_span_is_least_to_most_by_value_or_the_one_value():
    assert teach.span(["0.66", "0.61", "0.64"]) == "0.61–0.66"
    assert teach.span(["9", "10"]) == "9–10"  # by value, not as text
    assert teach.span(["-3", "−5"]) == "−5–-3"
    assert teach.span(["7", "7"]) == "7"


def claims(lesson, *pairs):
    return [{"lesson": lesson, "sentence": s, "ok": ok} for s, ok in pairs]


def test_table_shows_ranges_bold_counts_failures_and_matches_repeats_by_order():
    runs = [
        claims(
            "01_a.py", ("step cost 0.61× at 16 slots", True), ("TV 0.010", True), ("TV 0.020", True)
        )
        + claims("02_b.py", ("α = 0.9", True)),
        claims(
            "01_a.py", ("step cost 0.66× at 16 slots", True), ("TV 0.010", True), ("TV 0.030", True)
        )
        + claims("02_b.py", ("α = 0.9", False)),
        claims(
            "01_a.py", ("step cost 0.64× at 16 slots", True), ("TV 0.010", True), ("TV 0.020", True)
        ),
    ]  # 02_b stopped before its claim
    seconds = {"01_a.py": [40.2, 44.6, 41.0], "02_b.py": [3.0, 3.1, 2.9], "03_c.py": [1, 1, 1]}
    rows = teach.spread_rows(runs, seconds, {"02_b.py": 2})
    assert rows[2:] == [
        "| 01_a.py | 40–45 | step cost **0.61–0.66**× at 16 slots | 3/3 |",
        "| | | TV 0.010 | 3/3 |",
        "| | | TV **0.020–0.030** | 3/3 |",
        "| 02_b.py | 3 | α = 0.9 | 1/3, ✗ 1 |",
        "| | | *exited with a non-zero status in 2 of 3 runs* | |",
        "| 03_c.py | 1 | *no claims* | |",
    ]


def test_a_claims_markdown_is_escaped():
    sentence = "α* = 0.5 | x_1 is *not* [a link] <b>, but 1 < 2 > 0"
    row = teach.spread_rows([claims("01_a.py", (sentence, True))], {"01_a.py": [1.0]}, {})[2]
    assert row == (
        r"| 01_a.py | 1 | α\* = 0.5 \| x\_1 is \*not\* \[a link\] \<b>, but 1 < 2 > 0 "
        "| 1/1 |"
    )


def test_spread_runs_each_lesson_n_times_and_writes_the_table(tmp_path, monkeypatch):
    """A fake lesson whose numbers change from run to run, and whose second claim fails in
    its second run: the claims reach the table through $NANOSPEC_CLAIMS."""
    lesson = tmp_path / "01_fake.py"
    lesson.write_text(
        "import pathlib; from nanospec.teach import claim\n"
        "f = pathlib.Path(__file__).with_suffix('.n'); n = len(f.read_text()) if f.exists() "
        "else 0; f.write_text('x' * (n + 1))\n"
        "claim(True, f'run {n}, 7 every time'); claim(n == 0, f'{0.5 + n / 4:.2f} held')\n"
    )
    monkeypatch.setattr(teach, "lesson_files", lambda: [lesson])
    out = tmp_path / "NUMBERS.md"
    assert teach.run_spread(2, out, []) == 1  # a run failed
    text = out.read_text(encoding="utf-8")
    assert "Every lesson run 2 times on" in text and f"--spread 2 --out {out}" in text
    lines = text.splitlines()
    assert re.fullmatch(
        r"\| 01_fake\.py \| \d+(–\d+)? \| run \*\*0–1\*\*, 7 every time "
        r"\| 2/2 \|",
        lines[-3],
    ), lines[-3]
    assert lines[-2:] == [
        "| | | **0.50–0.75** held | 1/2, ✗ 1 |",
        "| | | *exited with a non-zero status in 1 of 2 runs* | |",
    ]


def test_without_a_load_average_the_table_says_n_a_and_the_command_to_paste(tmp_path, monkeypatch):
    """Windows has no os.getloadavg: the spread still runs, and its header says "n/a" where the
    load goes; the command it names is the one a learner pastes, through the venv make made."""
    monkeypatch.delattr(teach.os, "getloadavg")
    lesson = tmp_path / "01_plain.py"
    lesson.write_text("from nanospec.teach import claim\nclaim(True, 'it ran')\n")
    monkeypatch.setattr(teach, "lesson_files", lambda: [lesson])
    out = tmp_path / "NUMBERS.md"
    assert teach.load_average() is None
    assert teach.run_spread(1, out, []) == 0
    text = out.read_text(encoding="utf-8")
    assert (
        "what else it was doing: the one-minute load average was n/a: this system keeps none."
        in text
    )
    python = ".venv/bin/python" if teach.os.name == "posix" else r".venv\Scripts\python"
    assert f"Written by `{python} -m nanospec.teach --spread 1 --out {out}`" in text


def test_load_runs_busy_loops_beside_the_lessons_and_stops_them(tmp_path, monkeypatch):
    """`--load 2`: two spinning processes run while every lesson runs (a lesson sees them),
    are gone when the spread is written, and the table's header says they were there."""
    lesson = tmp_path / "01_busy.py"
    lesson.write_text(
        "import os; from nanospec.teach import claim\n"
        f"pids = [int(x) for x in open({str(tmp_path / 'pids')!r}).read().split()]\n"
        "def alive(pid):\n"
        "    try:\n"
        "        return os.kill(pid, 0) is None\n"
        "    except OSError:\n"
        "        return False\n"
        "claim(sum(map(alive, pids)) == 2, 'two loops spin beside the lesson')\n"
    )
    started = []

    def watched(k):
        started.extend(real(k))
        (tmp_path / "pids").write_text("".join(f"{p.pid} " for p in started))
        return started

    real = teach.busy_loops
    monkeypatch.setattr(teach, "busy_loops", watched)
    monkeypatch.setattr(teach, "lesson_files", lambda: [lesson])
    out = tmp_path / "NUMBERS.md"
    assert teach.run_spread(1, out, [], load_k=2) == 0
    assert len(started) == 2 and all(p.poll() is not None for p in started)
    text = out.read_text(encoding="utf-8")
    assert "with 2 busy loops beside them (`--load 2`)" in text
    assert f"--spread 1 --load 2 --out {out}" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["--spread", "0"],
        ["--out", "x.md"],
        ["--spread", "2", "--out", "table.txt"],
        ["--load", "2"],
        ["--spread", "1", "--load", "-1"],
    ],
)
def test_a_wrong_spread_command_is_one_sentence_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as done:
        teach.main(argv)
    assert done.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
