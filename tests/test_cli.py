"""Tests for nanospec.cli, driven the way a person drives it: `main([...])` with real arguments.

- the happy path: `generate --json` prints exactly one JSON object (text, tokens, stats), and
  `--num-samples 3` gives three samples;
- every input a person can get wrong (an empty or over-long prompt, a missing or corrupted
  checkpoint, out-of-range or non-numeric settings) gives a non-zero exit code and exactly ONE
  sentence on stderr — never a traceback, never argparse's usage block;
- one real subprocess proves the process exit code is 2.

All tests run against the tiny untrained checkpoint folder from conftest (`tiny_ckpt_dir`).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nanospec.cli import main
from nanospec.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parent.parent


def run(capsys, ckpt_dir, *args):
    """main(["--checkpoints", ckpt_dir, *args]) -> (exit code, stdout, stderr)."""
    try:
        code = main(["--checkpoints", str(ckpt_dir), *args])
    except SystemExit as e:  # argparse exits instead of returning
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_clear_error(code, out, err, fragment):
    assert code == 2, (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith("nanospec: error: "), lines[0]
    assert fragment in lines[0], (fragment, lines[0])
    assert out == ""


def flip_byte(path, offset):
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0xFF
    path.write_bytes(bytes(blob))


# ------------------------------------------------------------------ the happy path


def test_generate_json_prints_one_object_with_text_tokens_and_stats(capsys, tiny_ckpt_dir):
    code, out, err = run(
        capsys,
        tiny_ckpt_dir,
        "generate",
        "--prompt",
        "The capital of",
        "--max-new-tokens",
        "5",
        "--temperature",
        "0",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)  # the whole of stdout is one JSON object
    assert {"text", "tokens", "stats"} <= doc.keys()
    assert "samples" not in doc
    tok = Tokenizer.load(tiny_ckpt_dir / "tokenizer.json")
    assert 1 <= len(doc["tokens"]) <= 5
    assert all(0 <= t < tok.vocab_size for t in doc["tokens"])
    assert doc["text"] == tok.decode(t for t in doc["tokens"] if t != tok.eos_id)
    stats = doc["stats"]
    assert stats["new_tokens"] == len(doc["tokens"])
    assert stats["prompt_tokens"] == len(tok.encode_prompt("The capital of"))  # <|endoftext|> first
    assert stats["tokens_per_second"] > 0
    assert {
        "compile_seconds",
        "generate_seconds",
        "temperature",
        "top_k",
        "top_p",
        "seed",
    } <= stats.keys()


def test_num_samples_gives_that_many_samples(capsys, tiny_ckpt_dir):
    code, out, err = run(
        capsys,
        tiny_ckpt_dir,
        "generate",
        "--prompt",
        "hi",
        "--max-new-tokens",
        "6",
        "--num-samples",
        "3",
        "--seed",
        "1",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["samples"]) == 3
    assert doc["samples"][0] == {
        "text": doc["text"],
        "tokens": doc["tokens"],
        "finish_reason": doc["finish_reason"],
    }
    assert doc["stats"]["new_tokens"] == sum(len(s["tokens"]) for s in doc["samples"])
    # Each row draws its own randomness: with a near-uniform untrained model over ~300 tokens,
    # identical rows would mean a shared key. (Deterministic under the seed, so never flaky.)
    assert len({tuple(s["tokens"]) for s in doc["samples"]}) == 3


@pytest.mark.parametrize(
    "extra",
    [["--method", m] for m in ("draft", "ngram", "medusa", "eagle", "mtp")]
    + [
        ["--method", "eagle", "--tree", "2,2"],
        ["--method", "medusa", "--tree", "3,1", "--siblings", "sample"],
    ],
    ids=lambda a: "-".join(x.strip("-") for x in a),
)
def test_every_drafting_method_reproduces_greedy_autoregressive_text(capsys, tiny_ckpt_dir, extra):
    common = [
        "generate",
        "--prompt",
        "The capital of",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0",
        "--json",
    ]
    code, out, err = run(capsys, tiny_ckpt_dir, *common)
    assert code == 0, err
    ar = json.loads(out)["tokens"]
    code, out, err = run(capsys, tiny_ckpt_dir, *common, *extra)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tokens"] == ar
    assert doc["stats"]["method"] == extra[1] and doc["stats"]["rounds"] >= 1


# ------------------------------------------------------------------ one sentence per mistake


BAD_SETTINGS = {  # id: (arguments after `generate --prompt hi`, a fragment of the sentence)
    "negative-temperature": (["--temperature", "-1"], "--temperature"),
    "nan-temperature": (["--temperature", "nan"], "--temperature"),
    "text-temperature": (["--temperature", "warm"], "--temperature"),
    "top-p-0": (["--top-p", "0"], "--top-p"),
    "top-p-1.5": (["--top-p", "1.5"], "--top-p"),
    "top-k-negative": (["--top-k", "-1"], "--top-k"),
    "top-k-text": (["--top-k", "many"], "--top-k"),
    "max-new-tokens-0": (["--max-new-tokens", "0"], "--max-new-tokens"),
    "num-samples-0": (["--num-samples", "0"], "--num-samples"),
    "unknown-method": (["--method", "huge"], "--method"),
    "unknown-flag": (["--temprature", "1"], "--temprature"),
    "medusa-gamma-too-big": (["--method", "medusa", "--gamma", "6"], "gamma can be at most 4"),
    "ngram-tree": (["--method", "ngram", "--tree", "2"], "single continuation"),
    "siblings-without-tree": (["--siblings", "top"], "--siblings"),
    "tree-and-gamma": (["--method", "draft", "--tree", "2", "--gamma", "3"], "drop --gamma"),
    "ar-tree": (["--method", "ar", "--tree", "2"], "drafting method"),
    "tree-not-numbers": (["--method", "draft", "--tree", "2,x"], "--tree"),
    "tree-too-big": (["--method", "draft", "--tree", "9,9,9"], "64 nodes"),
    "tree-too-deep-for-heads": (["--method", "mtp", "--tree", "1,1,1,1,1"], "at most 4 deep"),
}


@pytest.mark.parametrize("args, fragment", BAD_SETTINGS.values(), ids=BAD_SETTINGS.keys())
def test_a_bad_setting_is_one_sentence(capsys, tiny_ckpt_dir, args, fragment):
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", "hi", *args)
    assert_one_clear_error(code, out, err, fragment)


def test_a_missing_prompt_is_one_sentence(capsys, tiny_ckpt_dir):
    assert_one_clear_error(*run(capsys, tiny_ckpt_dir, "generate"), "--prompt")


def test_a_missing_command_is_one_sentence(capsys, tiny_ckpt_dir):
    assert_one_clear_error(*run(capsys, tiny_ckpt_dir), "required")


def test_an_empty_prompt_is_one_sentence(capsys, tiny_ckpt_dir):
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", "")
    assert_one_clear_error(code, out, err, "empty")


def test_a_prompt_longer_than_the_context_is_one_sentence(capsys, tiny_ckpt_dir):
    prompt = " x" * 100  # ~100 tokens; the tiny model's context holds 64
    assert len(Tokenizer.load(tiny_ckpt_dir / "tokenizer.json").encode_prompt(prompt)) >= 64
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", prompt)
    assert_one_clear_error(code, out, err, "context")


def test_a_missing_checkpoint_folder_is_one_sentence(capsys, tmp_path):
    code, out, err = run(capsys, tmp_path / "no-such-folder", "generate", "--prompt", "hi")
    assert_one_clear_error(code, out, err, "not found")


def test_a_corrupted_checkpoint_is_one_sentence(capsys, tiny_ckpt_dir):
    target = tiny_ckpt_dir / "target.safetensors"
    flip_byte(target, target.stat().st_size // 2)
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", "hi")
    assert_one_clear_error(code, out, err, "corrupted")


OUT_OF_RANGE = {  # numbers too big for the int32 JAX holds them in
    "seed-2**64": ["--seed", str(2**64)],
    "top-k-2**32": ["--top-k", str(2**32)],
    "max-new-tokens-2**40": ["--max-new-tokens", str(2**40)],
}


@pytest.mark.parametrize("args", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_huge_number_is_one_sentence(capsys, tiny_ckpt_dir, args):
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", "hi", *args)
    assert_one_clear_error(code, out, err, args[0])


def test_a_prompt_that_is_not_utf8_is_one_sentence(capsys, tiny_ckpt_dir):
    undecodable = os.fsdecode(b"caf\xe9")  # Latin-1 bytes in a UTF-8 terminal -> "caf\udce9"
    code, out, err = run(capsys, tiny_ckpt_dir, "generate", "--prompt", undecodable)
    assert_one_clear_error(code, out, err, "UTF-8")


# ------------------------------------------------------------------ the real process


def test_the_process_exits_2_without_a_traceback(tiny_ckpt_dir):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nanospec",
            "--checkpoints",
            str(tiny_ckpt_dir),
            "generate",
            "--prompt",
            "hi",
            "--temperature",
            "-1",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "nanospec: error: --temperature must be 0 (greedy) or positive, got -1.0."
    ]
    assert proc.stdout == ""
