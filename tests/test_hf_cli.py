"""The commands on Hugging Face folders, driven as a person drives them: `--target` and
`--draft` on generate, eval, bench, demo and serve; `export-hf`; `models pull` offline; and
every bad folder (a missing file, a config that is not GPT-2's, a tensor of the wrong shape, a
truncated safetensors file, a tokenizer that does not load) as one sentence and exit 2.
"""

import json
import os
import signal
import subprocess
import sys

import httpx
import numpy as np
import openai
import pytest

from nanospec import SHIPPED
from tests.hf_folders import gpt2_config, random_tensors, write_folder
from tests.hf_tokenizers import write_tokenizer
from tests.test_cli import REPO, assert_one_clear_error, run
from tests.test_hf_folder import PROMPT, TEXTS, vocab_of
from tests.test_server import serve_process


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A target and a draft folder sharing a tokenizer, and the tokenizer's own folder."""
    root = tmp_path_factory.mktemp("hf")
    tok = write_tokenizer(root / "tok", TEXTS, vocab_size=400)
    V = vocab_of(tok)
    t_cfg, d_cfg = gpt2_config(V, n_layer=2), gpt2_config(V, n_layer=1)
    target = write_folder(root / "target", t_cfg, random_tensors(t_cfg, 0, 40.0), tok)
    draft = write_folder(root / "draft", d_cfg, random_tensors(d_cfg, 1, 40.0), tok)
    return {"target": target, "draft": draft, "tok": tok, "V": V}


def test_generate_speculates_on_folders(capsys, folders):
    common = ["--prompt", PROMPT, "--temperature", "0", "--max-new-tokens", "16", "--json"]
    common += ["--target", str(folders["target"])]
    code, out, _ = run(capsys, SHIPPED, "generate", "--method", "ar", *common)
    assert code == 0
    ar = json.loads(out)
    code, out, err = run(
        capsys, SHIPPED, "generate", "--method", "draft", "--draft", str(folders["draft"]), *common
    )
    assert code == 0, err
    spec = json.loads(out)
    assert spec["tokens"] == ar["tokens"] and spec["text"] == ar["text"]


def test_eval_and_bench_take_folders(capsys, folders, tmp_path):
    code, out, err = run(capsys, SHIPPED, "eval", "--target", str(folders["target"]), "--wide")
    assert code == 0, err
    assert "target" in out and "draft" not in out  # the shipped draft cannot pair with it
    report = tmp_path / "bench.json"
    flags = ["--methods", "ar,draft", "--gamma", "2", "--tokens", "8", "--prompts", "1"]
    flags += ["--repeats", "1", "--json", str(report), "--wide"]
    code, out, err = run(
        capsys,
        SHIPPED,
        "bench",
        "--target",
        str(folders["target"]),
        "--draft",
        str(folders["draft"]),
        *flags,
    )
    assert code == 0, err
    assert json.loads(report.read_text(encoding="utf-8"))


def test_the_demo_draws_a_folder_pair(capsys, folders, tmp_path):
    shot = tmp_path / "demo.svg"
    code, _, err = run(
        capsys,
        SHIPPED,
        "demo",
        "--target",
        str(folders["target"]),
        "--draft",
        str(folders["draft"]),
        "--prompt",
        PROMPT,
        "--temperature",
        "0",
        "--max-new-tokens",
        "8",
        "--screenshot",
        str(shot),
    )
    assert code == 0, err
    assert "capital" in shot.read_text(encoding="utf-8")


def test_export_hf_writes_a_folder_that_generate_reads(capsys, tmp_path):
    code, out, err = run(
        capsys, SHIPPED, "export-hf", "--model", "target", "--out", str(tmp_path / "t")
    )
    assert code == 0, err and "from_pretrained" in out
    names = {p.name for p in (tmp_path / "t").iterdir()}
    assert names == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    }
    config = json.loads((tmp_path / "t" / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    assert config["n_ctx"] == config["n_positions"] == 256  # both names, as GPT-2's own has
    ask = ["--prompt", PROMPT, "--temperature", "0", "--max-new-tokens", "8", "--json"]
    code, out, _ = run(capsys, SHIPPED, "generate", "--target", str(tmp_path / "t"), *ask)
    code2, shipped, _ = run(capsys, SHIPPED, "generate", *ask)
    assert code == code2 == 0 and json.loads(out)["text"] == json.loads(shipped)["text"]
    code, out, err = run(capsys, SHIPPED, "export-hf", "--out", str(tmp_path / "t"))
    assert_one_clear_error(code, out, err, "not an empty folder")


def test_models_pull_offline_is_one_sentence(tmp_path):
    """No hub here: the one command that may reach the network says how to copy a folder in."""
    env = {**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    for extra in ({}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}):
        done = subprocess.run(
            [sys.executable, "-m", "nanospec", "models", "pull", "distilgpt2"],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2 and done.stdout == "", done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and "Could not fetch distilgpt2" in lines[0], lines
        assert "copy the folder here and pass it as --target FOLDER" in lines[0]


def corrupt(folder, tmp_path, how):
    """A copy of `folder` broken one way; returns the copy and the phrase the error names."""
    bad = tmp_path / how
    bad.mkdir()
    for f in folder.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    config = json.loads((bad / "config.json").read_text(encoding="utf-8"))
    if how == "no-config":
        (bad / "config.json").unlink()
        return bad, "has no config.json"
    if how == "no-weights":
        (bad / "model.safetensors").unlink()
        return bad, "has no model.safetensors"
    if how == "no-tokenizer":
        (bad / "tokenizer.json").unlink()
        return bad, "has no tokenizer"
    if how == "llama":
        (bad / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
        return bad, "describes a 'llama' model"
    if how == "relu":
        (bad / "config.json").write_text(json.dumps({**config, "activation_function": "relu"}))
        return bad, "an activation other than gelu_new"
    if how == "truncated":
        blob = (bad / "model.safetensors").read_bytes()
        (bad / "model.safetensors").write_bytes(blob[: len(blob) // 2])
        return bad, "not a readable safetensors file"
    if how == "bad-tokenizer":
        (bad / "tokenizer.json").write_text("{not json", encoding="utf-8")
        return bad, "tokenizer.json"
    if how == "wrong-shape":
        (bad / "model.safetensors").unlink()
        tensors = random_tensors(config)
        tensors["transformer.h.1.mlp.c_fc.weight"] = np.zeros((32, 64), np.float32)
        write_folder(bad, config, tensors)
        return bad, "h.1.mlp.c_fc.weight has shape (32, 64)"
    if how == "untied":
        (bad / "model.safetensors").unlink()
        tensors = random_tensors(config)
        tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1
        write_folder(bad, config, tensors)
        return bad, "lm_head.weight differs from the token embedding"
    if how == "vocab":
        (bad / "config.json").write_text(json.dumps({**config, "vocab_size": 300}))
        return bad, "token ids but its tokenizer has"
    raise AssertionError(how)


BAD = [
    "no-config",
    "no-weights",
    "no-tokenizer",
    "llama",
    "relu",
    "truncated",
    "bad-tokenizer",
    "wrong-shape",
    "untied",
    "vocab",
]


@pytest.mark.parametrize("how", BAD)
def test_a_bad_folder_is_one_sentence_and_exit_2(capsys, folders, tmp_path, how):
    bad, phrase = corrupt(folders["target"], tmp_path, how)
    code, out, err = run(
        capsys, SHIPPED, "generate", "--target", str(bad), "--prompt", PROMPT, "--method", "ar"
    )
    assert_one_clear_error(code, out, err, phrase)


def test_pairing_mistakes_are_one_sentence(capsys, folders):
    ask = ["--prompt", PROMPT, "--target", str(folders["target"])]
    code, out, err = run(capsys, SHIPPED, "generate", "--method", "draft", *ask)
    assert_one_clear_error(code, out, err, "pass --draft FOLDER")
    code, out, err = run(capsys, SHIPPED, "generate", "--method", "eagle", *ask)
    assert_one_clear_error(code, out, err, "eagle")
    code, out, err = run(
        capsys, SHIPPED, "generate", "--target", "/no/such/folder", "--prompt", "x"
    )
    assert_one_clear_error(code, out, err, "is not a folder")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is TerminateProcess on Windows")
def test_serve_speculates_on_folders_over_real_http(folders):
    """`nanospec serve --target --draft` as a process: greedy equals generate's AR text,
    streamed equals whole, a sampled request with a large top-k and logprobs is answered,
    and SIGTERM drains it to exit 0."""
    target, draft = str(folders["target"]), str(folders["draft"])
    ar = subprocess.run(
        [sys.executable, "-m", "nanospec", "generate", "--target", target, "--prompt", PROMPT]
        + ["--temperature", "0", "--max-new-tokens", "16", "--json"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(ar.stdout)["text"]
    proc, url = serve_process(
        ["-m", "nanospec"], "--target", target, "--draft", draft, "--method", "draft"
    )
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        ask = dict(model="nanospec", prompt=PROMPT, max_tokens=16, temperature=0)
        assert client.completions.create(**ask).choices[0].text == expected
        streamed = "".join(c.choices[0].text for c in client.completions.create(**ask, stream=True))
        assert streamed == expected
        sampled = httpx.post(
            url + "/v1/completions",
            json={**ask, "temperature": 1.0, "top_k": 100_000, "top_p": 0.9, "logprobs": 3},
            timeout=120,
        )
        assert sampled.status_code == 200, sampled.text
        assert sampled.json()["choices"][0]["logprobs"]["top_logprobs"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
