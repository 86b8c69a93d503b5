"""`nanospec demo` from the command line: headless screenshots, and one-sentence errors.

The demo is registered through the `nanospec.commands` entry point, so these also check that
the installed package wires it up (`nanospec.cli.main(["demo", ...])`).
"""

import html
import subprocess
import sys

import pytest

from nanospec.cli import main


def svg_text(path) -> str:
    """An SVG screenshot's text with entities decoded (Rich writes spaces as &#160;)."""
    return html.unescape(path.read_text(encoding="utf-8")).replace("\xa0", " ")


def test_replay_screenshot_of_a_chosen_round(tmp_path, trace_path, capsys):
    out = tmp_path / "round3.svg"
    assert (
        main(["demo", "--replay", str(trace_path), "--screenshot", str(out), "--round", "3"]) == 0
    )
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    svg = svg_text(out)
    assert svg.startswith("<svg") and "nanospec demo · round 3" in svg
    assert "round 3 of 4" in svg and "★ bonus" in svg


def test_live_screenshot_on_the_tiny_models_defaults_to_the_last_round(tmp_path, tiny_ckpt_dir):
    out = tmp_path / "live.svg"
    code = main(
        [
            "--checkpoints",
            str(tiny_ckpt_dir),
            "demo",
            "--temperature",
            "0",
            "--gamma",
            "4",
            "--max-new-tokens",
            "6",
            "--screenshot",
            str(out),
        ]
    )
    assert code == 0
    svg = svg_text(out)
    assert "greedy" in svg and "✓" in svg and "round 2 of 2" in svg  # 5 + 1 tokens


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--round", "9"], "only 4 rounds"),
        (
            ["--gamma", "3"],
            "--replay plays a recorded trace as it was, so --gamma cannot change it",
        ),
        (["--screenshot-to-png"], "unrecognized arguments"),
    ],
)
def test_replay_mistakes_are_one_sentence(tmp_path, trace_path, capsys, argv, message):
    args = ["demo", "--replay", str(trace_path), "--screenshot", str(tmp_path / "s.svg"), *argv]
    if argv == ["--screenshot-to-png"]:
        with pytest.raises(SystemExit) as exit_:
            main(args)
        code = exit_.value.code
    else:
        code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "s.svg").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--screenshot", "out.png"], "give a file name ending in .svg"),
        (["--temperature", "-1", "--screenshot", "s.svg"], "--temperature must be 0 (greedy)"),
        (["--method", "lookahead", "--screenshot", "s.svg"], "Unknown method 'lookahead'"),
        (["--prompt", "word " * 400, "--screenshot", "s.svg"], "leaving no room to generate"),
    ],
)
def test_live_mistakes_are_one_sentence(
    tmp_path, tiny_ckpt_dir, capsys, monkeypatch, argv, message
):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code = main(["--checkpoints", str(tiny_ckpt_dir), "demo", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert list(work.iterdir()) == []  # no screenshot, nothing half-written


def test_missing_checkpoints_are_one_sentence(tmp_path, capsys):
    code = main(["--checkpoints", str(tmp_path / "nowhere"), "demo", "--screenshot", "s.svg"])
    assert code == 2 and "not found" in capsys.readouterr().err


def test_without_a_terminal_the_demo_says_how_to_export_instead(trace_path):
    argv = [sys.executable, "-m", "nanospec", "demo", "--replay", str(trace_path)]
    result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "nanospec: error: nanospec demo needs an interactive terminal; "
        "to export a screen instead, add --screenshot FILE.svg."
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--method", "foo"],
            "Unknown method 'foo'; choose one of draft, ngram, medusa, eagle, mtp, ssd.",
        ),
        (["--method", "ar"], "The demo watches drafting rounds and ar drafts nothing"),
        (["--race", "--method", "ar"], "--race always runs ar; give --method one of draft"),
        (["--prompt", ""], "The prompt is empty; give at least one token of text."),
        (["--race", "--prompt", "  \n "], "The prompt is empty; give at least one token of text."),
        (["--temperature", "-1"], "--temperature must be 0 (greedy) or positive"),
        (["--race", "--top-p", "1.5"], "--top-p must be in (0, 1]"),
    ],
)
def test_demo_settings_are_refused_before_loading_any_model(
    tmp_path, capsys, monkeypatch, argv, message
):
    def load(*args, **kwargs):
        raise AssertionError("loaded models")

    monkeypatch.setattr("nanospec.decode.Bundle.load", load)
    monkeypatch.chdir(tmp_path)
    code = main(["demo", *argv, "--screenshot", "s.svg"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "loaded models" not in err
    assert list(tmp_path.iterdir()) == []


def test_replaying_a_folder_asks_for_a_trace_file(tmp_path, capsys):
    code = main(["demo", "--replay", str(tmp_path), "--screenshot", str(tmp_path / "s.svg")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"nanospec: error: {tmp_path} is a folder; give a trace file (.jsonl) written by "
        f"`nanospec generate --trace` or the demo's w key."
    )
