"""`python -m nanospec.measure.quick_compile`: a program compiled both ways, side by side."""

import json
import subprocess
import sys

import pytest

from nanospec.measure import quick_compile


def test_a_program_compiled_both_ways_is_timed_and_written(tmp_path, capsys, compile_afresh):
    """Both settings compile and run the tiny test loop; the quick one is another program
    (the options reach XLA: its fusions differ), and the table and the JSON say the same."""
    out = tmp_path / "quick.json"
    argv = ["--programs", "test", "--repeats", "1", "--compile-repeats", "1", "--json", str(out)]
    report = quick_compile.main(argv)
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(json.dumps(report))
    ((name, both),) = report["programs"].items()
    assert set(both) == {"defaults", "quick"}
    for r in both.values():
        assert r["compile_cpu_s"] > 0 and r["compile_wall_s"] > 0 and r["run_ms"] > 0
    assert both["quick"]["fusions"] != both["defaults"]["fusions"]
    printed = capsys.readouterr().out
    assert name in printed and "written:" in printed


@pytest.mark.parametrize(
    "argv", [["--programs", "nope"], ["--repeats", "0"], ["--json", "out.txt"]]
)
def test_a_bad_argument_is_one_sentence_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as done:
        quick_compile.main(argv)
    assert done.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_it_runs_where_there_is_no_resource_module():
    """Windows has no `resource` module: the script still imports, and counts CPU seconds."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['resource'] = None\n"  # None: `import resource` fails
            "from nanospec.measure import quick_compile\n"
            "print(quick_compile.cpu_seconds() > 0)",
        ],
        capture_output=True,
        encoding="utf-8",
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout == "True\n", done.stderr
