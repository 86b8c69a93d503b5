"""The shipped checkpoints: intact, small, and with the facts-versus-grammar contrast we need.

These are the only tests (with tests/statistical/test_greedy_identity.py and
test_two_sample.py) that load the real weights.
"""

import html
import json
import re

import pytest

from nanospec.checkpoint import load_models, read_manifest
from nanospec.cli import main
from nanospec.decode import Bundle, decode
from nanospec.fileio import sha256_file
from nanospec.measure.evaluate import (
    agreement,
    all_fact_accuracy,
    capital_accuracy,
    next_token_accuracy,
)
from tests.conftest import SHIPPED


@pytest.fixture(scope="module")
def bundle():
    return Bundle.load(SHIPPED, ["target", "draft"])


def test_manifest_lists_every_shipped_file_with_its_hash():
    manifest = read_manifest(SHIPPED)
    files = {p.name for p in SHIPPED.iterdir() if p.name != "MANIFEST"}
    assert files == set(manifest["files"])
    for name, entry in manifest["files"].items():
        assert sha256_file(SHIPPED / name) == entry["sha256"]
        assert (SHIPPED / name).stat().st_size == entry["bytes"]
    for name in ("target.safetensors", "draft.safetensors"):
        info = manifest["models"][name]
        assert info["command"].startswith("nanospec train ")
        assert info["final_val_loss"] < 2.0 and info["wall_seconds"] > 0


@pytest.mark.parametrize("kind", ["medusa", "eagle", "mtp"])
def test_every_head_records_how_it_was_trained_and_how_well_it_drafts(kind):
    info = read_manifest(SHIPPED)["models"][f"{kind}.safetensors"]
    assert info["command"].startswith("nanospec train heads")
    assert info["wall_seconds"] > 0 and info["final_val_loss"] < 3.0 and info["params"] > 0
    acc = info["acceptance_on_validation"]
    assert acc["temperature"] == 0 and 0 < acc["acceptance_rate"] <= 1
    assert 1 <= acc["mean_acceptance_length"] <= acc["gamma"] + 1


@pytest.mark.parametrize("name", ["draft.safetensors", "eagle.safetensors"])
def test_drafters_with_positions_were_trained_on_every_position_they_draft_at(name):
    """The draft model and EAGLE have attention and a learned position table: windows shorter
    than the context leave position rows untrained that drafting still reaches (EAGLE trained
    on 128-token windows drafted 12-24% fewer tokens per round on long prompts)."""
    info = read_manifest(SHIPPED)["models"][name]
    assert info["train"]["seq_len"] >= info["config"]["n_ctx"]


def test_all_checkpoints_fit_in_40_mb():
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 40 * 2**20


def test_the_draft_costs_at_most_a_fifth_of_the_target_per_token(bundle):
    """Compute per decoded token (multiply-adds of every matrix), not wall time: tests never
    time things. `nanospec bench` measures the real ratio (README)."""

    def macs(cfg, context=128):
        per_layer = 12 * cfg.d_model**2 + 2 * context * cfg.d_model  # weights + attention
        return cfg.n_layer * per_layer + cfg.vocab_size * cfg.d_model  # + the output layer

    assert macs(bundle.models["draft"][0]) <= macs(bundle.models["target"][0]) / 5


def test_greedy_france_is_paris(bundle):
    r = decode(bundle, "The capital of France is", method="ar", temperature=0.0, max_new=4)
    assert r.texts[0].startswith(" Paris")


def test_the_target_knows_at_least_95_percent_of_the_capitals(bundle):
    cfg, g, p = bundle.models["target"]
    acc, misses = capital_accuracy(bundle.tok, cfg, g, p)
    assert acc >= 0.95, misses


@pytest.mark.optimized
def test_the_draft_misses_facts_but_keeps_the_grammar(bundle):
    """Greedy, so deterministic: a regression check on the shipped weights (numbers in README)."""
    results = {}
    for name in ("target", "draft"):
        model = bundle.models[name]
        results[name] = {
            "facts": all_fact_accuracy(bundle.tok, *model)["all"],
            **next_token_accuracy(bundle.tok, *model, n_windows=16),
        }
    t, d = results["target"], results["draft"]
    assert d["facts"] <= t["facts"] - 0.03, json.dumps(results)  # measurably worse at facts
    assert abs(d["function_word_accuracy"] - t["function_word_accuracy"]) <= 0.02, json.dumps(
        results
    )


def test_agreement_is_whole_for_a_model_with_itself_and_partial_for_the_draft(bundle):
    """evaluate.agreement (lesson 02): a known answer, then the shipped pair's."""
    target, draft = bundle.models["target"], bundle.models["draft"]
    itself = agreement(bundle.tok, target, target, n_windows=8)
    assert all(v > 1 - 1e-5 for v in itself.values()), itself
    pair = agreement(bundle.tok, target, draft, n_windows=8)
    assert all(0.5 < v < 1 for v in pair.values()), pair


def test_loading_refuses_a_corrupted_copy(tmp_path):
    import shutil

    for p in SHIPPED.iterdir():
        shutil.copy(p, tmp_path / p.name)
    blob = bytearray((tmp_path / "draft.safetensors").read_bytes())
    blob[-100] ^= 0xFF
    (tmp_path / "draft.safetensors").write_bytes(bytes(blob))
    from nanospec.errors import UserError

    with pytest.raises(UserError, match="corrupted"):
        load_models(tmp_path, ["draft"])


def test_ignore_eos_goes_past_the_end_of_text_with_the_same_tokens_before_it(bundle):
    """The shipped target ends its answer about France with <|endoftext|> (43 tokens);
    `ignore_eos` keeps every token up to it and goes on to max_new (generate --ignore-eos)."""
    prompt = "The capital of France is"
    short = decode(bundle, prompt, method="draft", temperature=0, max_new=60)
    full = decode(bundle, prompt, method="draft", temperature=0, max_new=60, ignore_eos=True)
    n = len(short.tokens[0])
    assert short.finish_reasons == ["stop"] and n < 60
    assert full.finish_reasons == ["length"] and len(full.tokens[0]) == 60
    assert full.tokens[0][:n] == short.tokens[0]


def test_the_workshops_rejection_is_at_seed_1_round_4(tmp_path):
    """lessons/WORKSHOP.md's block 4 opens the demo with `nanospec demo --seed 1 --round 4` to
    show a rejection, and the README's screenshot is that round: ' capital' is rejected (q 0.24,
    p 0.03) and ' main' drawn from the residual. The run is seeded, so this is that round."""
    out = tmp_path / "round4.svg"
    argv = ["--checkpoints", str(SHIPPED), "demo", "--seed", "1", "--round", "4"]
    assert main([*argv, "--screenshot", str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    screen = html.unescape("".join(re.findall(r">([^<>]*)</text>", svg))).replace("\xa0", " ")
    assert "round 4 of" in screen and "Rejected ✗" in screen
    assert re.search(r"' capital'\s*0\.24\s*0\.03", screen) and "↻ ' main'" in screen
