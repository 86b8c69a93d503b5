"""Shipped weights: save and load models as safetensors, checked against checkpoints/MANIFEST.

Tensor names follow GPT-2 exactly, so a reader who knows GPT-2 finds every tensor where they
expect it (Flax's `kernel`, `scale` and `embedding` are all called `weight`, as in GPT-2):

    wte.weight (V, C)                 h.0.ln_1.weight, h.0.ln_1.bias (C,)
    wpe.weight (n_ctx, C)             h.0.attn.c_attn.weight (C, 3C), h.0.attn.c_attn.bias
    ln_f.weight, ln_f.bias (C,)       h.0.attn.c_proj.weight (C, C) ... h.0.mlp.c_fc.weight (C, 4C)

GPT-2 stores its Conv1D weights as (in, out), which is also Flax's kernel layout, so no tensor
is transposed. The model's config travels inside the safetensors metadata.

Weights are stored as float16 (as GPT-2's weights are usually distributed) and computed in
float32: that halves the files (the target fits the 40 MB budget) and the shipped model *is*
the rounded one — every test and measurement uses exactly what is on disk.

`MANIFEST` (JSON) records, for every shipped file, its size and sha256, and for every model how
it was trained. Loading re-hashes the file and refuses one that does not match.

What this file deliberately leaves out: sharded files, dtype conversion, loading HF checkpoints.
"""

import json
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from nanospec.compat import get_value, set_value
from nanospec.errors import UserError
from nanospec.fileio import atomic_write, sha256_file
from nanospec.model import GPT, ModelConfig

MANIFEST = "MANIFEST"
STORAGE_DTYPE = np.float16
_GPT2_SUFFIX = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}


def gpt2_name(path: tuple) -> str:
    """('h', 0, 'attn', 'c_attn', 'kernel') -> 'h.0.attn.c_attn.weight'."""
    return ".".join(str(p) for p in path[:-1]) + "." + _GPT2_SUFFIX[path[-1]]


def state_to_tensors(params, dtype=np.float32) -> dict[str, np.ndarray]:
    return {
        gpt2_name(path): np.asarray(get_value(var)).astype(dtype)
        for path, var in nnx.to_flat_state(params)
    }


def load_tensors_into(params, tensors: dict[str, np.ndarray], where: str = "checkpoint"):
    """Copy named tensors into an nnx.State in place; every name and shape must match."""
    flat = list(nnx.to_flat_state(params))
    expected = {gpt2_name(path) for path, _ in flat}
    if expected != set(tensors):
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise UserError(
            f"{where} does not fit the model (missing {missing[:3]}, extra {extra[:3]})."
        )
    for path, var in flat:
        arr = tensors[gpt2_name(path)]
        if arr.shape != get_value(var).shape:
            raise UserError(
                f"{where}: tensor {gpt2_name(path)} has shape {arr.shape}, "
                f"expected {get_value(var).shape}."
            )
        set_value(var, jnp.asarray(arr, jnp.float32))
    return params


# ------------------------------------------------------------------ the manifest


def read_manifest(ckpt_dir: str | Path) -> dict[str, Any]:
    path = Path(ckpt_dir) / MANIFEST
    if not path.is_file():
        return {"format": "nanospec-manifest", "version": 1, "files": {}, "models": {}}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise UserError(f"{path} is not valid JSON; restore it from git.") from None


def write_manifest(ckpt_dir: str | Path, manifest: dict[str, Any]) -> None:
    atomic_write(Path(ckpt_dir) / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def record_file(ckpt_dir: str | Path, filename: str, info: dict[str, Any] | None = None) -> None:
    """Hash `filename` into the manifest, and merge `info` (how it was made) into its entry."""
    ckpt_dir = Path(ckpt_dir)
    manifest = read_manifest(ckpt_dir)
    path = ckpt_dir / filename
    manifest["files"][filename] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    if info is not None:
        manifest["models"][filename] = info
    write_manifest(ckpt_dir, manifest)


def verify_file(ckpt_dir: str | Path, filename: str) -> Path:
    """Return the path if it exists and its sha256 matches the manifest; else a UserError."""
    ckpt_dir = Path(ckpt_dir)
    path = ckpt_dir / filename
    if not path.is_file():
        raise UserError(f"Checkpoint file not found: {path} (run `make retrain` to rebuild it).")
    entry = read_manifest(ckpt_dir)["files"].get(filename)
    if entry is None:
        raise UserError(f"{path} is not listed in {ckpt_dir / MANIFEST}; refusing an unknown file.")
    if not isinstance(entry, dict) or sha256_file(path) != entry.get("sha256"):
        raise UserError(f"{path} is corrupted: its sha256 does not match {ckpt_dir / MANIFEST}.")
    return path


# ------------------------------------------------------------------ models


def write_weights(
    ckpt_dir: str | Path, filename: str, params, metadata: dict[str, str], info: dict | None = None
) -> Path:
    """The one safetensors writer: `params` as float16 tensors with GPT-2 names plus
    `metadata`, written atomically, then recorded (sha256, and `info`) in the manifest."""
    path = Path(ckpt_dir) / filename
    blob = st_save(
        state_to_tensors(params, STORAGE_DTYPE), metadata={**metadata, "dtype": "float16"}
    )
    atomic_write(path, blob)
    record_file(ckpt_dir, path.name, info)
    return path


def read_weights(path: Path, key: str, what: str = "nanospec checkpoint"):
    """The one safetensors reader: (tensors, json.loads of metadata[key]); any parse failure
    is one sentence saying the file is not a valid `what`."""
    blob = path.read_bytes()
    try:
        tensors = st_load(blob)
        header_len = int.from_bytes(blob[:8], "little")
        meta = json.loads(blob[8 : 8 + header_len])["__metadata__"]
        return tensors, json.loads(meta[key])
    except Exception as e:  # safetensors raises several kinds; all mean "not a valid file"
        raise UserError(f"{path} is not a valid {what} ({type(e).__name__}).") from None


def save_model(ckpt_dir: str | Path, cfg: ModelConfig, params, info: dict | None = None) -> Path:
    """Write `<cfg.name>.safetensors` atomically and record it in the manifest."""
    return write_weights(
        ckpt_dir, f"{cfg.name}.safetensors", params, {"config": json.dumps(cfg.to_dict())}, info
    )


def load_model(ckpt_dir: str | Path, name: str, verify: bool = True):
    """Load `<name>.safetensors` -> (config, graphdef, params). Checks the sha256 first."""
    filename = f"{name}.safetensors"
    path = verify_file(ckpt_dir, filename) if verify else Path(ckpt_dir) / filename
    return load_model_file(path)


def load_model_file(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise UserError(f"Checkpoint file not found: {path}.")
    tensors, config = read_weights(path, "config")
    try:
        cfg = ModelConfig.from_dict(config)
    except Exception as e:
        raise UserError(
            f"{path} is not a valid nanospec checkpoint ({type(e).__name__})."
        ) from None
    # Shapes only (nnx.eval_shape): running the random initialisers just to overwrite them
    # cost ~50 small compiles, most of the time a load took.
    graphdef, params = nnx.split(nnx.eval_shape(lambda: GPT(cfg, nnx.Rngs(0))))
    load_tensors_into(params, tensors, where=str(path))
    return cfg, graphdef, params


def load_tokenizer(ckpt_dir: str | Path):
    from nanospec.tokenizer import Tokenizer

    return Tokenizer.load(verify_file(ckpt_dir, "tokenizer.json"))


def load_models(ckpt_dir: str | Path, names: list[str]):
    """The shared tokenizer and the named models: (tokenizer, {name: (cfg, graphdef, params)})."""
    tok = load_tokenizer(ckpt_dir)
    models = {name: load_model(ckpt_dir, name) for name in names}
    for name, (cfg, _, _) in models.items():
        if cfg.vocab_size != tok.vocab_size:
            raise UserError(
                f"{name} was trained with {cfg.vocab_size} tokens but the tokenizer "
                f"has {tok.vocab_size}; retrain it."
            )
    return tok, models
