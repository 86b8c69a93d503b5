"""Tiny GPT-2-family folders written the way Hugging Face writes them, and an independent numpy
GPT-2 forward to check nanospec's logits against.

No hub is reachable here, so the tests make their own folders: `config.json` as transformers'
GPT2Config saves it, weights under HF's names (`transformer.`-prefixed, Conv1D matrices stored
(in, out), `lm_head.weight` tied to `wte`, the causal-mask buffers `attn.bias` that older
transformers saved), in one safetensors file or sharded with an index, and a real tokenizer
written by the `tokenizers` library (hf_tokenizers.py).

`np_logits` is GPT-2 from its paper and HF's modeling_gpt2.py, in numpy, written without
looking at nanospec/model.py: pre-LayerNorm blocks, tanh GELU, causal softmax attention.
"""

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def gpt2_config(vocab_size: int, n_positions: int = 128, n_layer: int = 2, n_embd: int = 32,
                n_head: int = 2, **extra) -> dict:  # fmt: skip
    """config.json as transformers' GPT2Config.save_pretrained writes it (the keys that matter)."""
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": vocab_size - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": vocab_size - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": n_positions,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_inner": None,
        "n_layer": n_layer,
        "n_positions": n_positions,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_type": "cls_index",
        "use_cache": True,
        "vocab_size": vocab_size,
        **extra,
    }


def random_tensors(config: dict, seed: int = 0, sharpen: float = 1.0) -> dict[str, np.ndarray]:
    """Random weights under HF's names, with the mask buffers and the tied lm_head.

    `sharpen` scales the embedding, so the next-token laws are peaked enough for greedy runs
    to be stable against float rounding (random GPT-2 weights give near-uniform logits)."""
    rng = np.random.default_rng(seed)
    V, P, C = config["vocab_size"], config["n_positions"], config["n_embd"]

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t = {
        "transformer.wte.weight": normal(V, C) * sharpen,
        "transformer.wpe.weight": normal(P, C, std=0.1),
        "transformer.ln_f.weight": 1 + normal(C, std=0.1),
        "transformer.ln_f.bias": normal(C),
    }
    for i in range(config["n_layer"]):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            t[h + ln + ".weight"] = 1 + normal(C, std=0.1)
            t[h + ln + ".bias"] = normal(C)
        for name, (n_in, n_out) in {
            "attn.c_attn": (C, 3 * C),
            "attn.c_proj": (C, C),
            "mlp.c_fc": (C, 4 * C),
            "mlp.c_proj": (4 * C, C),
        }.items():
            t[h + name + ".weight"] = normal(n_in, n_out, std=0.2)  # Conv1D: (in, out)
            t[h + name + ".bias"] = normal(n_out)
        t[h + "attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]  # a buffer
    t["lm_head.weight"] = t["transformer.wte.weight"].copy()
    return t


def write_weights(folder: Path, tensors: dict, shards: int = 1, dtype=np.float32) -> None:
    """model.safetensors, or `shards` files model-0000i-of-0000n.safetensors and the index."""
    tensors = {k: np.ascontiguousarray(v.astype(dtype)) for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names, weight_map = sorted(tensors), {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in names[s::shards]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": sum(v.nbytes for v in tensors.values())}}
    index["weight_map"] = weight_map
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")


def write_folder(folder: Path, config: dict, tensors: dict, tokenizer_from: Path | None = None,
                 shards: int = 1, dtype=np.float32) -> Path:  # fmt: skip
    """A whole folder: config.json, the weights, and the tokenizer files copied from
    `tokenizer_from` (a folder hf_tokenizers.write_tokenizer wrote)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    write_weights(folder, tensors, shards, dtype)
    if tokenizer_from is not None:
        for f in Path(tokenizer_from).iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
    return folder


def np_logits(tensors: dict, config: dict, ids: list[int]) -> np.ndarray:
    """GPT-2's forward in numpy (float64): (T, V) logits for one sequence of token ids."""
    w = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in tensors.items()}
    H, eps = config["n_head"], config["layer_norm_epsilon"]
    T = len(ids)

    def layer_norm(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def conv1d(x, name):  # HF's Conv1D: x @ W + b with W stored (in, out)
        return x @ w[name + ".weight"] + w[name + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    x = w["wte.weight"][ids] + w["wpe.weight"][np.arange(T)]
    causal = np.tril(np.ones((T, T), bool))
    for i in range(config["n_layer"]):
        h = f"h.{i}."
        q, k, v = np.split(conv1d(layer_norm(x, h + "ln_1"), h + "attn.c_attn"), 3, axis=-1)
        q, k, v = (a.reshape(T, H, -1).transpose(1, 0, 2) for a in (q, k, v))  # (H, T, D)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.where(causal, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights @ v).transpose(1, 0, 2).reshape(T, -1)
        x = x + conv1d(attended, h + "attn.c_proj")
        x = x + conv1d(
            gelu_new(conv1d(layer_norm(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj"
        )
    return layer_norm(x, "ln_f") @ w["wte.weight"].T
