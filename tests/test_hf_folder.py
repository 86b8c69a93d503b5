"""Hugging Face GPT-2-family folders in and out (nanospec/hf/): logits, round trip, pairing.

- logits: a folder in HF's layout (hf_folders.py: `transformer.` names, Conv1D (in, out)
  matrices, the tied lm_head, mask buffers; one file, shards, float16) loads into nanospec's
  GPT with the logits of an independent numpy GPT-2 forward, to 1e-4;
- round trip: the shipped target and draft exported (`export-hf`) and loaded back are the
  shipped models, tensor for tensor, with the shipped tokenizer's ids, and run speculation
  with the same greedy tokens;
- pairing: a foreign target with the shipped draft or heads, or two folders whose tokenizers
  differ, is refused in one sentence that says what differs;
- greedy identity on folders: every chain and tree method emits AR's greedy tokens;
- no start token: a folder whose tokenizer adds none (GPT-2's) is read without one.
"""

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from nanospec import SHIPPED
from nanospec.checkpoint import load_model, load_tokenizer, state_to_tensors
from nanospec.decode import Bundle, decode
from nanospec.errors import UserError
from nanospec.hf.bpe import differs
from nanospec.hf.export import export
from nanospec.hf.folder import load_folder
from nanospec.model import forward
from nanospec.trees.tree import Tree
from tests.hf_folders import gpt2_config, np_logits, random_tensors, write_folder
from tests.hf_tokenizers import write_tokenizer

TEXTS = [
    "The capital of France is Paris. The capital of Spain is Madrid.",
    "def capital_of(country):\n    return capitals[country]  # 42, 3.14\n",
    "Ünïcödé, 東京, emoji 🙂 and   runs of  spaces.\n\n",
] * 20
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def tokenizers_dir(tmp_path_factory) -> dict[str, Path]:
    """Two tokenizers in HF's layout, trained on different text (so they differ)."""
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        "a": write_tokenizer(root / "a", TEXTS, vocab_size=400),
        "legacy": write_tokenizer(root / "legacy", TEXTS, vocab_size=400, legacy=True),
        "other": write_tokenizer(root / "other", [t[::-1] for t in TEXTS], vocab_size=400),
    }


def vocab_of(tok_dir: Path) -> int:
    doc = json.loads((tok_dir / "tokenizer.json").read_text(encoding="utf-8"))
    return 1 + max([*doc["model"]["vocab"].values(), *(t["id"] for t in doc["added_tokens"])])


@pytest.fixture(scope="module")
def pair(tmp_path_factory, tokenizers_dir) -> tuple[Path, Path]:
    """A target and a draft folder (different seeds and depths) sharing one tokenizer."""
    root = tmp_path_factory.mktemp("pair")
    V = vocab_of(tokenizers_dir["a"])
    t_cfg, d_cfg = gpt2_config(V, n_layer=2), gpt2_config(V, n_layer=1)
    target = write_folder(
        root / "target", t_cfg, random_tensors(t_cfg, 0, 40.0), tokenizers_dir["a"]
    )
    draft = write_folder(root / "draft", d_cfg, random_tensors(d_cfg, 1, 40.0), tokenizers_dir["a"])
    return target, draft


@pytest.mark.parametrize("shards,dtype", [(1, np.float32), (3, np.float32), (1, np.float16)])
def test_logits_equal_an_independent_numpy_gpt2(tmp_path, tokenizers_dir, shards, dtype):
    """HF's names, Conv1D layout, tied head and mask buffers are read as GPT-2 means them."""
    cfg = gpt2_config(vocab_of(tokenizers_dir["a"]), layer_norm_epsilon=1e-4)
    tensors = random_tensors(cfg, seed=3, sharpen=10.0)
    folder = write_folder(tmp_path / "m", cfg, tensors, tokenizers_dir["a"], shards, dtype)
    tok, (mcfg, graphdef, params) = load_folder(folder)
    assert mcfg.ln_eps == 1e-4 and mcfg.n_ctx == 128 and tok.vocab_size == mcfg.vocab_size
    ids = tok.encode("def f(x): return x * 2  # Ünïcödé 🙂")
    logits, _, _ = forward(graphdef, params, jnp.asarray([ids]), jnp.arange(len(ids))[None])
    stored = {k: v.astype(dtype).astype(np.float32) for k, v in tensors.items()}
    expected = np_logits(stored, cfg, ids)
    assert np.abs(np.asarray(logits[0]) - expected).max() < 1e-4


def test_the_shipped_models_leave_and_come_back_unchanged(tmp_path):
    """export-hf then load: every tensor equal, the tokenizer the shipped one, the same text."""
    shipped_tok = load_tokenizer(SHIPPED)
    folders = {}
    for name in ("target", "draft"):
        folders[name] = export(SHIPPED, name, tmp_path / name)
        tok, (cfg, _, params) = load_folder(folders[name], name)
        _, _, shipped = load_model(SHIPPED, name)
        ours, theirs = state_to_tensors(params), state_to_tensors(shipped)
        assert ours.keys() == theirs.keys()
        assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
        assert differs(shipped_tok, tok) is None and tok.bos_id == shipped_tok.eos_id
        for text in TEXTS[:3] + [PROMPT]:
            assert tok.encode_prompt(text) == shipped_tok.encode_prompt(text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft", "target"]  # no temp left
    on_folders = Bundle.load(SHIPPED, ("target", "draft"), folders["target"], folders["draft"])
    shipped = Bundle.load(SHIPPED, ("target", "draft"))
    runs = [decode(b, PROMPT, "draft", temperature=0.0, max_new=12) for b in (on_folders, shipped)]
    assert runs[0].tokens == runs[1].tokens and runs[0].texts == runs[1].texts


def test_export_writes_into_a_new_or_empty_folder_only(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UserError, match="not an empty folder"):
        export(SHIPPED, "draft", tmp_path / "full")
    with pytest.raises(UserError, match="does not exist"):
        export(SHIPPED, "draft", tmp_path / "no" / "such")
    (tmp_path / "empty").mkdir()
    export(SHIPPED, "draft", tmp_path / "empty")
    assert (tmp_path / "empty" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "full"]


@pytest.mark.parametrize("method", ["draft", "ngram", "ssd", "tree"])
def test_greedy_tokens_on_folders_equal_autoregressive(pair, method):
    bundle = Bundle.load(SHIPPED, ("target", "draft"), *pair)
    ar = decode(bundle, PROMPT, "ar", temperature=0.0, max_new=24)
    tree = Tree.from_branching((2, 1)) if method == "tree" else None
    run = decode(
        bundle, PROMPT, "draft" if tree else method, temperature=0.0, max_new=24, tree=tree
    )
    assert run.tokens == ar.tokens
    assert run.stats["mean_acceptance_length"] >= 1.0


def test_a_foreign_target_pairs_only_with_what_shares_its_tokenizer(pair, tmp_path, tokenizers_dir):
    target, draft = pair
    with pytest.raises(UserError, match="pass --draft FOLDER") as e:
        Bundle.load(SHIPPED, ("target", "draft"), target=target)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="medusa"):
        Bundle.load(SHIPPED, ("target", "medusa"), target=target)
    skipped = Bundle.load(SHIPPED, ("target", "draft", "medusa"), target=target, skip=True)
    assert sorted(skipped.models) == ["target"]
    cfg = gpt2_config(vocab_of(tokenizers_dir["other"]))
    other = write_folder(tmp_path / "o", cfg, random_tensors(cfg), tokenizers_dir["other"])
    with pytest.raises(UserError, match="do not share a tokenizer: they differ in") as e:
        Bundle.load(SHIPPED, ("target", "draft"), target, other)
    assert str(target) in str(e.value) and "tokenizer.json" in str(e.value)
    with pytest.raises(UserError, match="do not share a tokenizer"):  # the shipped target
        Bundle.load(SHIPPED, ("target", "draft"), draft=draft)


def test_the_older_tokenizer_layout_loads_the_same(tmp_path, tokenizers_dir, pair):
    """vocab.json + merges.txt beside the same weights: the same ids, and it pairs with the
    tokenizer.json folder."""
    target, _ = pair
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for name in ("config.json", "model.safetensors"):
        (legacy / name).write_bytes((target / name).read_bytes())
    for f in tokenizers_dir["legacy"].iterdir():
        (legacy / f.name).write_bytes(f.read_bytes())
    tok, _ = load_folder(legacy)
    tok_a, _ = load_folder(target)
    assert all(tok.encode(t) == tok_a.encode(t) for t in TEXTS[:3])
    bundle = Bundle.load(SHIPPED, ("target", "draft"), target, legacy)
    assert decode(bundle, PROMPT, "draft", temperature=0.0, max_new=8).tokens


def test_a_folder_without_a_start_token_reads_the_prompt_alone(pair):
    """GPT-2 adds no start token: the prompt's ids are the text's, and decoding starts there."""
    tok, _ = load_folder(pair[0])
    assert tok.bos_id is None and tok.encode_prompt(PROMPT) == tok.encode(PROMPT)
    bundle = Bundle.load(SHIPPED, ("target",), target=pair[0])
    run = decode(bundle, PROMPT, "ar", temperature=0.0, max_new=6)
    assert len(run.tokens[0]) == 6 or run.tokens[0][-1] == tok.eos_id
