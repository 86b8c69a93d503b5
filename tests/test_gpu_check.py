"""The GPU check (measure/gpu_check.py) runs unchanged on the CPU, small, and can fail.

A smoke test: every part on test_bench.py's tiny models (the shipped context, heads of depth
2) at small sizes, in-process, its one JSON read back. Its law part states the suite's N,
threshold and seed. A verify rule that accepts every draft makes it fail, in one sentence,
with exit status 1; a wrong flag is one sentence and exit status 2.
"""

import json

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import nanospec.verify
from nanospec import aot
from nanospec.checkpoint import record_file, save_model
from nanospec.heads.modules import KINDS, HeadConfig, build, save_head
from nanospec.measure import gpu_check
from nanospec.methods import DRAFTING
from nanospec.model import GPT, ModelConfig
from tests.statistical import test_joint_law

# Small sizes: two prompts (the tiny tokenizer spends a token on two characters, and the
# repetitive workload's prompts overfill the 256-token context), 8 tokens, one chunk of the
# law's rows, and the bench test's settings.
SMALL = ["--prompts", "2", "--max-new", "8", "--gamma", "2", "--law-n", "1000"]
SMALL += ["--bench-gammas", "1", "--bench-tokens", "4", "--bench-repeats", "1"]
SMALL += ["--bench-prompts", "1"]


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory, tiny_tokenizer):
    """test_bench.py's tiny bundle as a checkpoints folder: a target and a draft of the shipped
    context length with other weights, and heads of depth 2 (so its programs are the bench
    test's)."""
    root = tmp_path_factory.mktemp("gpu-check-ckpt")
    tiny_tokenizer.save(root / "tokenizer.json")
    record_file(root, "tokenizer.json", {"vocab_size": tiny_tokenizer.vocab_size})
    cfg = ModelConfig.tiny(vocab_size=tiny_tokenizer.vocab_size, n_ctx=256)
    for name, seed in (("target", 0), ("draft", 1)):
        named = ModelConfig.from_dict({**cfg.to_dict(), "name": name})
        save_model(root, named, nnx.split(GPT(named, nnx.Rngs(seed)))[1], {"note": "test model"})
    for kind in KINDS:
        hc = HeadConfig.for_target(kind, cfg, depth=2)
        save_head(root, hc, nnx.split(build(hc))[1], {"note": "untrained test head"})
    return root


def test_every_part_runs_on_the_cpu_and_writes_one_json(ckpt_dir, tmp_path, capsys):
    out = tmp_path / "gpu-check.json"
    code = gpu_check.main(["--json", str(out), "--checkpoints", str(ckpt_dir), *SMALL])
    printed = capsys.readouterr().out
    assert code == 0, printed
    # The suite runs on whatever JAX finds: the CPU here, a GPU where JAX's CUDA build is in.
    assert printed.startswith(f"JAX backend: {jax.default_backend()}; devices: {jax.devices()}")
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["complete"] and report["passed"] and report["seconds"] > 0
    assert report["device"]["backend"] == jax.default_backend()
    assert report["device"]["devices"] == [repr(d) for d in jax.devices()]
    assert report["versions"]["jax"] == jax.__version__
    identity = report["parts"]["identity"]
    assert identity["passed"] and identity["prompts"] == 2 and identity["max_new"] == 8
    assert [r["method"] for r in identity["methods"]] == list(DRAFTING)  # every one but ar
    for r in identity["methods"]:
        assert r["gamma"] == 2 and not r["failures"]
        assert r["identical_rows"] + len(r["near_ties"]) == 2
    law = report["parts"]["law"]
    assert law["passed"] and law["n"] == 1000 and law["pvalue"] > law["threshold"] == 1e-4
    assert 0 <= law["total_variation"] < 1
    bench = report["parts"]["bench"]
    assert [(r["method"], r["gamma"]) for r in bench["rows"]] == [("draft", 1)]
    assert bench["rows"][0]["measured_speedup"] > 0 and bench["tokens_per_prompt"] == 4
    assert "every part passed" in printed and "draft" in printed


def test_the_law_part_is_the_suites_law_test_at_its_n_threshold_and_seed():
    """test_joint_law.py's T1-gamma3 case: N, threshold and seed (its γ) are the suite's."""
    args = gpu_check.parser().parse_args([])
    assert args.law_n == gpu_check.LAW_N == test_joint_law.N
    assert gpu_check.LAW_THRESHOLD == test_joint_law.THRESHOLD
    assert gpu_check.LAW_NEW == test_joint_law.M
    assert test_joint_law.SETTINGS["T1"] == (gpu_check.LAW_T, 0, 1.0)
    assert ("T1", gpu_check.LAW_GAMMA) in test_joint_law.MATRIX
    assert args.law_seed == gpu_check.LAW_SEED == gpu_check.LAW_GAMMA  # the case's seed is its γ


@pytest.fixture
def accept_every_draft(monkeypatch):
    """A broken verify rule: every draft accepted, whatever the target thinks of it. Every
    compiled program is dropped on the way in and out, so the loops are traced with it and
    then without it."""
    jax.clear_caches()
    aot.clear()
    monkeypatch.setattr(
        nanospec.verify, "accept_reject", lambda u, p_x, q_x: jnp.ones_like(u, bool)
    )
    yield
    monkeypatch.undo()
    jax.clear_caches()
    aot.clear()


def test_a_verify_rule_that_accepts_every_draft_fails_in_one_sentence(
    ckpt_dir, tmp_path, capsys, accept_every_draft
):
    out = tmp_path / "gpu-check.json"
    flags = ["--json", str(out), "--checkpoints", str(ckpt_dir), *SMALL]
    code = gpu_check.main([*flags, "--parts", "identity,law", "--methods", "draft"])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("gpu_check: failed: draft (γ = 2) parted from the autoregressive")
    assert "the law test's p-value" in lines[0] and str(out) in lines[0]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["complete"] and not report["passed"]
    assert not report["parts"]["identity"]["passed"] and not report["parts"]["law"]["passed"]
    assert report["parts"]["law"]["pvalue"] < 1e-12  # rejected by a wide margin, not by chance
    assert "bench" not in report["parts"]


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--parts", "identity,speed"], "--parts takes a comma-separated list of identity"),
        (["--methods", "ar"], "--methods must name a drafting method"),
        (["--law-n", "0"], "--law-n takes a whole number of at least 1"),
        (["--gamma", "40"], "--gamma and --bench-gammas take γ from 1 to 32"),
        (["--bench-gammas", "two"], "--bench-gammas takes a comma-separated list of whole"),
        (["--json", "no-such-folder/x.json"], "the folder no-such-folder does not exist"),
    ],
)
def test_a_wrong_flag_is_one_sentence_and_exit_2(tmp_path, capsys, flags, message):
    code = gpu_check.main(["--json", str(tmp_path / "x.json"), *flags])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("gpu_check: error: ")
    assert message in captured.err
