"""The side-by-side run against llama.cpp (measure/peer*.py), without building llama.cpp.

The suite never builds llama.cpp: these tests read output recorded from a real run
(tests/data/llama_cpp/: llama-completion and llama-speculative on one facts prompt, PROMPT
below, greedy, 128 tokens, 2 threads, on the shipped models converted to GGUF), and
check what the script decides before anything is built: which requirements the converter's venv
gets, which folders `--llama-cpp` accepts, and that no network and bad arguments are one
sentence each.
"""

import doctest
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from nanospec import SHIPPED
from nanospec.errors import UserError
from nanospec.measure import peer, peer_llama, peer_report, peer_setup

DATA = Path(__file__).parent / "data" / "llama_cpp"
PROMPT = "Nigeria is in Africa, while Peru is in"  # a facts workload prompt
REPO = Path(__file__).resolve().parent.parent


def recorded(name: str) -> tuple[bytes, str]:
    return (DATA / f"{name}.stdout").read_bytes(), (DATA / f"{name}.stderr").read_text("utf-8")


def test_doctests():
    assert doctest.testmod(peer).failed == 0
    assert doctest.testmod(peer_report).failed == 0
    assert doctest.testmod(peer_llama).failed == 0
    assert doctest.testmod(peer_setup).failed == 0


def test_completion_output_gives_its_text_tokens_and_clock():
    run = peer_llama.parse_completion(*recorded("completion"), PROMPT.encode())
    # 127 forward passes after the prompt's: 128 tokens; "total time" 231.46 ms, of which the
    # prompt's eval 9.86 ms
    assert run.tokens == 128 and run.drafted == run.accepted == 0
    assert run.prompt_s == pytest.approx(0.00986) and run.seconds == pytest.approx(0.23146)
    assert run.text.startswith(b" South America. Nigeria uses the naira")
    assert not run.text.startswith(PROMPT.encode()) and not run.text.endswith(b"\n")


def test_speculative_output_gives_its_counters():
    run = peer_llama.parse_speculative(*recorded("speculative"), PROMPT.encode())
    # it ends the round that passes 128 tokens: 132 of them, 20 rounds of 7 drafts
    assert (run.tokens, run.drafted, run.accepted) == (132, 140, 111)
    assert run.prompt_s == pytest.approx(0.079) and run.decode_s == pytest.approx(1.817)
    completion = peer_llama.parse_completion(*recorded("completion"), PROMPT.encode())
    assert run.text.startswith(completion.text)  # greedy: speculation changes no token


def test_output_from_another_llama_cpp_is_one_sentence():
    stdout, stderr = recorded("completion")
    for out, err in ((stdout, "no timings here"), (b"no prompt echoed\n\n", stderr)):
        with pytest.raises(UserError) as e:
            peer_llama.parse_completion(out, err, PROMPT.encode())
        assert "\n" not in str(e.value)


def test_token_ids_and_version_lines():
    assert peer_llama.parse_token_ids("[256, 78, 420]\n") == [256, 78, 420]
    version = (DATA / "version.stderr").read_text("utf-8")
    assert peer_llama.parse_version(version) == "version: 0.5.0-dev (build 1, commit 0c1e570)"


def test_the_converter_venv_gets_llama_cpps_pins_from_pypi_and_its_own_gguf(tmp_path):
    req = tmp_path / "requirements"
    req.mkdir()
    (req / "requirements-convert_hf_to_gguf.txt").write_text(
        "-r ./requirements-convert_legacy_llama.txt\n"
        "--extra-index-url https://download.pytorch.org/whl/cpu\n"
        "## a comment\ntorch==2.11.0\n",
        encoding="utf-8",
    )
    (req / "requirements-convert_legacy_llama.txt").write_text(
        "numpy~=2.2.6\n\ntransformers==4.57.6\ngguf>=0.1.0\n", encoding="utf-8"
    )
    assert peer_setup.converter_requirements(tmp_path) == [
        "numpy~=2.2.6",
        "torch==2.11.0",
        "transformers==4.57.6",
        str(tmp_path / "gguf-py"),
    ]


def test_llama_cpp_folders_are_found_or_refused(tmp_path):
    source = tmp_path / "sdist" / "vendor" / "llama.cpp"
    source.mkdir(parents=True)
    for name in ("CMakeLists.txt", "convert_hf_to_gguf.py"):
        (source / name).write_text("", encoding="utf-8")
    build = tmp_path / "b"
    build.mkdir()
    (build / "CMakeCache.txt").write_text(
        f"CMAKE_HOME_DIRECTORY:INTERNAL={source}\n", encoding="utf-8"
    )
    work = tmp_path / "work"
    assert peer_setup.locate(source, work) == (source, work / "build")
    assert peer_setup.locate(tmp_path / "sdist", work) == (source, work / "build")
    assert peer_setup.locate(build, work) == (source, build)  # a build folder builds in place
    for wrong, says in ((tmp_path / "none", "no such folder"), (work.parent, "neither")):
        with pytest.raises(UserError, match=says):
            peer_setup.locate(wrong, work)


def test_a_changed_source_under_an_old_build_folder_is_refused(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "CMakeCache.txt").write_text(
        f"CMAKE_HOME_DIRECTORY:INTERNAL={tmp_path / 'old'}\n", encoding="utf-8"
    )
    with pytest.raises(UserError, match="configured for another llama.cpp"):
        peer_setup.build(tmp_path / "new", build, tmp_path / "build.log")


def test_greedy_texts_are_compared_up_to_the_first_end_of_text():
    ids = [5, 6, 256, 7]  # what a nanospec run emitted: text, <|endoftext|>, more text
    pieces = [b"Li", b"ma", b"<|endoftext|>", b"The"]
    span = peer_report.compared_span(ids, 256)
    assert peer_report.agreement(pieces, b"Lima. The capital", span) is None  # EOS banned there
    assert peer_report.agreement(pieces, b"Lisbon", span) == 1


def run_script(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nanospec.measure.peer", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_offline_without_llama_cpp_is_one_sentence(tmp_path):
    """No --llama-cpp and no index pip can reach: refused before anything is built."""
    import os

    dead = "http://127.0.0.1:9/simple"
    env = {**os.environ, "PIP_INDEX_URL": dead, "PIP_EXTRA_INDEX_URL": dead}
    env.update(PIP_FIND_LINKS=str(tmp_path), PYTHONPATH=str(REPO))
    done = run_script(["--work", str(tmp_path / "work"), "--checkpoints", str(SHIPPED)], env)
    assert done.returncode == 2 and done.stdout.strip() == "", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Could not download the llama-cpp-python source" in lines[0]
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == []  # nothing half-made


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--rounds", "0"], "--rounds takes"),
        (["--json", "out.txt"], ".json"),
        (["--llama-cpp", "/no/such/llama.cpp"], "no such folder"),
    ],
)
def test_a_bad_argument_is_one_sentence_and_exit_2(argv, says, tmp_path):
    done = run_script([*argv, "--work", str(tmp_path / "work")])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert says in done.stderr.strip().splitlines()[-1]


def test_a_report_row_reads_as_the_table_says():
    row = {
        "engine": "llama.cpp",
        "run": "speculative",
        "weights": "float32",
        "tokens_per_second": {"median": 949.4, "min": 901.0, "max": 1002.0},
        "over_nanospec": {"median": 1.4, "min": 1.31, "max": 1.52},
        "acceptance_rate": 0.775,
        "text_agrees": False,
        "first_difference": {"pass": 0, "prompt": 2, "token": 17},
        "compared_tokens_per_prompt": [40, 50],
    }
    assert peer_report._cells(row, 7) == [
        "llama.cpp speculative γ=7",
        "float32",
        "949",
        "901–1,002",
        "1.40× (1.31–1.52)",
        "77.5%",
        "differs: prompt 3, token 18",
    ]
    assert json.loads(json.dumps(row)) == row  # the report is plain JSON


def cut_short_tool(tmp_path, whole_from: int) -> Path:
    """A stand-in for llama-completion that prints the recorded output, its stderr cut after
    3 lines until its `whole_from`-th run; it counts its runs in tmp_path/runs."""
    tool, runs = tmp_path / "llama-completion", tmp_path / "runs"
    tool.write_text(
        "#!/bin/sh\n"
        f'n=$(( $(cat "{runs}" 2>/dev/null || echo 0) + 1 )); echo $n > "{runs}"\n'
        f'cat "{DATA / "completion.stdout"}"\n'
        f'if [ $n -ge {whole_from} ]; then cat "{DATA / "completion.stderr"}" >&2;\n'
        f'else head -n 3 "{DATA / "completion.stderr"}" >&2; fi\n',
        encoding="utf-8",
    )
    tool.chmod(0o755)
    return tool


@pytest.mark.parametrize("whole_from", [2, 99])
def test_a_run_whose_output_was_cut_short_runs_again(tmp_path, whole_from):
    """llama.cpp's logger may exit before its last lines are out: the run is made again, up
    to TRIES times, and then the output is refused in one sentence."""
    tool = cut_short_tool(tmp_path, whole_from)
    parse = peer_llama.parse_completion
    if whole_from <= peer_llama.TRIES:
        run = peer_llama._run_and_parse([str(tool)], "llama-completion", parse, PROMPT)
        assert run.tokens == 128
    else:
        with pytest.raises(UserError, match="no line matching"):
            peer_llama._run_and_parse([str(tool)], "llama-completion", parse, PROMPT)
    runs = min(whole_from, peer_llama.TRIES)
    assert (tmp_path / "runs").read_text(encoding="utf-8").strip() == str(runs)


def test_a_summary_row_counts_runs_pairs_ratios_and_finds_the_first_difference(tiny_tokenizer):
    tok, eos = tiny_tokenizer, tiny_tokenizer.eos_id
    ids = tok.encode("the cat sat") + [eos] + tok.encode(" on")
    ours = b"".join(tok.token_bytes(t) for t in ids)
    before_eos = b"".join(tok.token_bytes(t) for t in ids[: ids.index(eos)])

    def record(seconds: list[float], text: bytes, drafted=0, accepted=0) -> peer_report.Record:
        """One prompt, a warm-up pass and then one timed pass per entry of `seconds`."""
        runs = [[peer_report.Sample(128, s, text, drafted, accepted, ids)] for s in seconds]
        return peer_report.Record([runs[0], *runs])

    records = {
        peer_report.NANO_AR: record([0.4, 0.4, 0.4], ours),
        peer_report.NANO_SPEC: record([0.2, 0.2, 0.2], ours, drafted=70, accepted=50),
        # llama.cpp: twice as fast, one run stalled; past EOS it wrote on without the token
        peer_report.MODES[0]: record([0.2, 0.2, 2.0], before_eos + b" and ran"),
        peer_report.MODES[1]: record([0.1, 0.1, 0.1], b"A dog", drafted=7, accepted=0),
    }
    rows = {(r["engine"], r["run"]): r for r in peer_report.summarize(records, tok)}
    ar = rows[("llama.cpp", "autoregressive")]
    assert ar["text_agrees"] and ar["slow_runs"] == 1 and ar["acceptance_rate"] is None
    assert ar["over_nanospec"] == {"median": 2.0, "min": 0.2, "max": 2.0}
    assert ar["tokens_per_second"]["median"] == 640.0
    spec = rows[("llama.cpp", "speculative")]
    assert spec["first_difference"] == {"pass": 0, "prompt": 0, "token": 0}
    assert spec["over_nanospec"]["median"] == 2.0 and spec["acceptance_rate"] == 0.0
    assert rows[("nanospec", "speculative")]["acceptance_rate"] == 50 / 70
    report = {
        **dict(workload="facts", prompts=1, tokens=128, rounds=3, threads=2, gamma=7),
        **dict(rows=list(rows.values()), prompt_ids=[{"same_ids": True}]),
        **dict(llama_cpp={"version": "llama.cpp version: test"}, machine={"cpu": "a CPU"}),
    }
    console = Console(file=io.StringIO(), width=200)
    peer_report.show(console, report)
    printed = console.file.getvalue()  # 1 stalled run of 3: the report says the machine was busy
    assert "machine was busy" in printed and "equal nanospec's on 1 of 1" in printed
    assert "differs: prompt 1, token 1" in printed and "2.00× (0.20–2.00)" in printed
