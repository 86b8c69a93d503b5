"""The joint law on models read from Hugging Face folders, not only on models built in memory.

`laws.tiny_pair`'s target and draft are written in HF's layout (hf_folders.py: `transformer.`
names, Conv1D (in, out) matrices, a tied `lm_head.weight`, the `attn.bias` mask buffers, the
draft in two shards), read back through nanospec/hf/folder.py, and the speculative loop's
4-token joint law on them is compared with the exact law of the *in-memory* target — so a
reader that renamed, transposed or dropped anything would fail here. (Vocabulary 5 has no
byte-level tokenizer; the law needs none, so the weights are read without one.)

Each test: threshold p-value > 1e-4, so a false failure has probability 1e-4 per test (fixed
seeds: CI is deterministic). N = 20,000 in the fast layer, 100,000 in the slow one; the power
tests (test_power.py) show this threshold rejects broken samplers at N = 50,000.
"""

import numpy as np
import pytest

from nanospec.checkpoint import state_to_tensors
from nanospec.drafters import DraftModel
from nanospec.hf.folder import load_weights, read_config
from nanospec.sampling import SamplingParams
from tests.hf_folders import gpt2_config, write_folder
from tests.statistical.laws import (
    PROMPT,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_pair,
)

THRESHOLD = 1e-4
M = 4


def hf_layout(model) -> tuple[dict, dict]:
    """(config.json, HF-named tensors) of an in-memory nanospec model."""
    cfg, _, params = model
    config = gpt2_config(cfg.vocab_size, cfg.n_ctx, cfg.n_layer, cfg.d_model, cfg.n_head)
    tensors = {f"transformer.{k}": v for k, v in state_to_tensors(params).items()}
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()
    mask = np.tril(np.ones((cfg.n_ctx, cfg.n_ctx), np.float32))[None, None]
    tensors.update({f"transformer.h.{i}.attn.bias": mask for i in range(cfg.n_layer)})
    return config, tensors


@pytest.fixture(scope="module")
def folder_pair(tmp_path_factory):
    """(in-memory target, loaded target, loaded draft)."""
    root = tmp_path_factory.mktemp("law")
    target, draft = tiny_pair()
    loaded = []
    for name, model, shards in (("target", target, 1), ("draft", draft, 2)):
        folder = write_folder(root / name, *hf_layout(model), shards=shards)
        cfg = read_config(folder, name)
        loaded.append((cfg, *load_weights(folder, cfg)))
    return target, loaded[0], loaded[1]


def check(folder_pair, sp, gamma, n, seed):
    memory, target, draft = folder_pair
    drafter = DraftModel(draft[1], draft[0])
    out = run_speculative(target, drafter, draft[2], [list(PROMPT)] * n, M, sp, gamma, seed)
    pvalue = chi_square_pvalue(encode(out[tuple(PROMPT)]), exact_law(memory, PROMPT, M, sp))
    assert pvalue > THRESHOLD, f"p-value {pvalue:.3g}"


@pytest.mark.optimized
def test_smoke_folder_law_at_20k(folder_pair):
    check(folder_pair, SamplingParams.make(1.0), gamma=3, n=20_000, seed=300)


@pytest.mark.optimized
@pytest.mark.slow
@pytest.mark.parametrize("setting", [(1.0, 0, 1.0), (0.7, 3, 0.9)], ids=["T1", "T0.7-k3-p0.9"])
def test_folder_joint_law(folder_pair, setting):
    check(folder_pair, SamplingParams.make(*setting), gamma=3, n=100_000, seed=301)
