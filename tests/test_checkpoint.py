"""Tests for nanospec.checkpoint and nanospec.fileio: shipped weights and how they are written.

- equivalence: save_model -> load_model gives bit-identical parameters and logits;
- known answers: every tensor has its GPT-2 name and shape, the config rides in the metadata,
  and MANIFEST holds the file's real sha256 and size;
- errors: a corrupted, missing, unlisted, truncated or garbage file is a `UserError` with a
  clear sentence, never a raw exception;
- invariants: `atomic_write` leaves the old file or the new one (never half of one), no temp
  files, and files readable by everyone (0o644).
"""

import hashlib
import json
import os
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save as st_save

from nanospec.checkpoint import (
    MANIFEST,
    load_model,
    load_model_file,
    read_manifest,
    save_model,
    state_to_tensors,
)
from nanospec.compat import get_value
from nanospec.errors import UserError
from nanospec.fileio import atomic_write, sha256_file
from nanospec.model import ModelConfig, forward


@pytest.fixture
def saved(tmp_path, tiny_model):
    """A checkpoint folder holding the tiny model as `tiny.safetensors`, and that file's path."""
    cfg, _, params = tiny_model
    path = save_model(tmp_path, cfg, params, info={"note": "untrained test model"})
    return tmp_path, path


def flip_byte(path, offset):
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0xFF
    path.write_bytes(bytes(blob))


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ------------------------------------------------------------------ round trip


def _fp16(x) -> np.ndarray:
    """What float16 storage keeps of a float32 array (then computed in float32 again)."""
    return np.asarray(x).astype(np.float16).astype(np.float32)


def test_round_trip_gives_the_float16_rounded_parameters(saved, tiny_model):
    ckpt_dir, _ = saved
    cfg, _, params = tiny_model
    cfg2, _, params2 = load_model(ckpt_dir, "tiny")
    assert cfg2 == cfg
    before, after = dict(nnx.to_flat_state(params)), dict(nnx.to_flat_state(params2))
    assert before.keys() == after.keys()
    for path in before:
        a, b = _fp16(get_value(before[path])), np.asarray(get_value(after[path]))
        assert b.dtype == np.float32 and np.array_equal(a, b), path


def test_saving_a_loaded_model_again_is_exact(saved, tmp_path):
    """Rounding happens once: what was loaded saves and loads back bit for bit."""
    ckpt_dir, _ = saved
    cfg, _, params = load_model(ckpt_dir, "tiny")
    save_model(tmp_path, cfg, params)
    _, _, again = load_model(tmp_path, "tiny")
    for (path, a), (_, b) in zip(nnx.to_flat_state(params), nnx.to_flat_state(again)):
        assert np.array_equal(np.asarray(get_value(a)), np.asarray(get_value(b))), path


def test_round_trip_logits_match_to_float16_precision(saved, tiny_model):
    ckpt_dir, _ = saved
    cfg, graphdef, params = tiny_model
    _, graphdef2, params2 = load_model(ckpt_dir, "tiny")
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 10)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(10), (2, 10))
    logits, _, _ = forward(graphdef, params, tokens, positions)
    logits2, _, _ = forward(graphdef2, params2, tokens, positions)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(logits2), atol=2e-3)


# ------------------------------------------------------------------ names, metadata, manifest


def gpt2_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    """GPT-2's state dict (minus its attention-mask buffers and the tied lm_head), by hand."""
    C, V = cfg.d_model, cfg.vocab_size
    shapes = {
        "wte.weight": (V, C),
        "wpe.weight": (cfg.n_ctx, C),
        "ln_f.weight": (C,),
        "ln_f.bias": (C,),
    }
    for i in range(cfg.n_layer):
        shapes |= {
            f"h.{i}.ln_1.weight": (C,),
            f"h.{i}.ln_1.bias": (C,),
            f"h.{i}.attn.c_attn.weight": (C, 3 * C),
            f"h.{i}.attn.c_attn.bias": (3 * C,),
            f"h.{i}.attn.c_proj.weight": (C, C),
            f"h.{i}.attn.c_proj.bias": (C,),
            f"h.{i}.ln_2.weight": (C,),
            f"h.{i}.ln_2.bias": (C,),
            f"h.{i}.mlp.c_fc.weight": (C, 4 * C),
            f"h.{i}.mlp.c_fc.bias": (4 * C,),
            f"h.{i}.mlp.c_proj.weight": (4 * C, C),
            f"h.{i}.mlp.c_proj.bias": (C,),
        }
    return shapes


def test_tensors_have_gpt2_names_and_shapes(saved, tiny_model):
    _, path = saved
    cfg, _, _ = tiny_model
    with safe_open(str(path), framework="numpy") as f:
        shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    assert shapes == gpt2_shapes(cfg)
    assert shapes["h.0.attn.c_attn.weight"] == (32, 96)  # (C, 3C) with C = 32: no transposes
    assert shapes["h.0.mlp.c_fc.weight"] == (32, 128)  # (C, 4C)


def test_config_travels_in_the_metadata(saved, tiny_model):
    _, path = saved
    cfg, _, _ = tiny_model
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert ModelConfig.from_dict(json.loads(meta["config"])) == cfg
    assert load_model_file(path)[0] == cfg  # loading without the manifest finds it too


def test_manifest_records_the_files_sha256_and_size(saved):
    ckpt_dir, path = saved
    manifest = json.loads((ckpt_dir / MANIFEST).read_text())
    blob = path.read_bytes()
    assert manifest["files"]["tiny.safetensors"] == {
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
    }
    assert manifest["models"]["tiny.safetensors"] == {"note": "untrained test model"}
    assert sha256_file(path) == hashlib.sha256(blob).hexdigest()


def test_saving_twice_updates_one_manifest_entry(saved, tiny_model):
    ckpt_dir, path = saved
    cfg, _, params = tiny_model
    changed = jax.tree.map(lambda x: 2 * x, params)  # a different model, same shapes
    old_sha = sha256_file(path)
    save_model(ckpt_dir, cfg, changed)  # info=None keeps the recorded training info
    assert sha256_file(path) != old_sha
    manifest = read_manifest(ckpt_dir)
    assert list(manifest["files"]) == ["tiny.safetensors"]
    assert manifest["files"]["tiny.safetensors"]["sha256"] == sha256_file(path)
    assert manifest["models"]["tiny.safetensors"] == {"note": "untrained test model"}
    _, _, loaded = load_model(ckpt_dir, "tiny")  # the new file verifies and holds the new model
    assert np.array_equal(
        state_to_tensors(loaded)["wte.weight"], _fp16(2 * state_to_tensors(params)["wte.weight"])
    )


# ------------------------------------------------------------------ refusing bad files


def test_a_corrupted_file_is_refused(saved):
    ckpt_dir, path = saved
    flip_byte(path, path.stat().st_size - 5)  # inside a tensor: still a parseable safetensors
    with pytest.raises(UserError, match="corrupted"):
        load_model(ckpt_dir, "tiny")


def test_a_missing_file_is_refused(saved):
    ckpt_dir, path = saved
    path.unlink()
    with pytest.raises(UserError, match="not found"):
        load_model(ckpt_dir, "tiny")


def test_a_file_missing_from_the_manifest_is_refused(saved):
    ckpt_dir, path = saved
    (ckpt_dir / "stranger.safetensors").write_bytes(path.read_bytes())
    with pytest.raises(UserError, match="not listed"):
        load_model(ckpt_dir, "stranger")


def test_a_manifest_that_is_not_json_is_refused(saved):
    ckpt_dir, _ = saved
    (ckpt_dir / MANIFEST).write_text("{ not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_model(ckpt_dir, "tiny")


@pytest.mark.parametrize("damage", ["truncated", "header-only", "garbage", "empty", "no-metadata"])
def test_an_invalid_file_is_a_user_error_even_unverified(saved, damage):
    _, path = saved
    blob = path.read_bytes()
    tensors = {"wte.weight": np.zeros((2, 2), np.float32)}
    path.write_bytes(
        {
            "truncated": blob[: len(blob) // 2],
            "header-only": blob[:8],
            "garbage": os.urandom(4096),
            "empty": b"",
            "no-metadata": st_save(tensors),
        }[damage]
    )
    with pytest.raises(UserError, match="not a valid nanospec checkpoint"):
        load_model(path.parent, "tiny", verify=False)


def test_tensors_that_do_not_fit_the_config_are_a_user_error(saved, tiny_model):
    _, path = saved
    cfg, _, params = tiny_model
    tensors = state_to_tensors(params)
    meta = {"config": json.dumps(cfg.to_dict())}
    del tensors["ln_f.bias"]
    path.write_bytes(st_save(tensors, metadata=meta))
    with pytest.raises(UserError, match="does not fit"):
        load_model(path.parent, "tiny", verify=False)
    tensors = state_to_tensors(params)
    tensors["wpe.weight"] = tensors["wpe.weight"][:10]  # a shorter context than the config says
    path.write_bytes(st_save(tensors, metadata=meta))
    with pytest.raises(UserError, match="has shape"):
        load_model(path.parent, "tiny", verify=False)


# ------------------------------------------------------------------ atomic_write


def test_atomic_write_writes_bytes_and_text_without_leftovers(tmp_path):
    atomic_write(tmp_path / "a.bin", b"\x00\x01")
    atomic_write(tmp_path / "sub" / "b.txt", "héllo")  # creates the folder, writes UTF-8
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "sub" / "b.txt").read_bytes() == "héllo".encode()
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "sub") == []


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
@pytest.mark.parametrize(
    "error", [OSError("disk full"), KeyboardInterrupt()], ids=["oserror", "ctrl-c"]
)
def test_a_failed_write_keeps_the_old_file_and_no_temp_files(tmp_path, monkeypatch, where, error):
    dest = tmp_path / "MANIFEST"
    atomic_write(dest, "old content")
    if where == "write":
        monkeypatch.setattr(os, "fdopen", _fdopen_failing_on_write(error))
    elif where == "fsync":
        monkeypatch.setattr(os, "fsync", _raiser(error))
    else:
        monkeypatch.setattr(os, "replace", _raiser(error))
    with pytest.raises(type(error)):
        atomic_write(dest, "new content")
    monkeypatch.undo()
    assert dest.read_text() == "old content"
    assert leftovers(tmp_path) == []


def _raiser(error):
    def fail(*args, **kwargs):
        raise error

    return fail


def _fdopen_failing_on_write(error):
    """os.fdopen whose file takes a few bytes, then fails: a disk filling up mid-write."""
    real_fdopen = os.fdopen

    class HalfWritten:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:5])
            self.f.flush()
            raise error

    return lambda fd, *args, **kwargs: HalfWritten(real_fdopen(fd, *args, **kwargs))


def test_a_write_of_non_bytes_leaves_nothing_behind(tmp_path):
    with pytest.raises(TypeError):
        atomic_write(tmp_path / "x.json", 12345)  # not bytes or str: f.write raises TypeError
    assert list(tmp_path.iterdir()) == []


def test_written_files_are_readable_by_everyone(saved, tmp_path):
    ckpt_dir, path = saved
    atomic_write(tmp_path / "trace.json", "{}")
    for p in (path, ckpt_dir / MANIFEST, tmp_path / "trace.json"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p
