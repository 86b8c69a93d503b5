"""Training: the loss falls, runs are deterministic, and a resumed run equals an uninterrupted one."""

import json
from dataclasses import replace

import numpy as np
import pytest

from nanospec.checkpoint import load_model, read_manifest, state_to_tensors
from nanospec.corpus import CorpusConfig
from nanospec.errors import UserError
from nanospec.training import lm as train_mod
from nanospec.training.lm import TrainConfig, get_batch, train, train_tokenizer

SMALL_CORPUS = CorpusConfig(n_train_docs=60, n_val_docs=6)


@pytest.fixture
def ckpt(tmp_path):
    train_tokenizer(tmp_path, vocab_size=320, corpus=SMALL_CORPUS)
    return tmp_path


def _train(ckpt, work, steps=60, **kw):
    tc = replace(TrainConfig.preset("tiny"), steps=steps, **kw)
    return train("tiny", ckpt, work, tc, corpus=SMALL_CORPUS, command="test", quiet=True)


def test_loss_falls_on_a_tiny_config_in_seconds(ckpt, tmp_path):
    info = _train(ckpt, tmp_path / "work")
    curve = [loss for _, loss in info["val_loss_curve"]]
    assert curve[-1] < np.log(320) - 1.0  # well below the uniform guess over the vocabulary
    assert info["final_train_loss"] < np.log(320) - 1.0
    entry = read_manifest(ckpt)["models"]["tiny.safetensors"]
    assert entry["command"] == "test" and entry["tokens_seen"] == 60 * 4 * 32


def test_training_is_deterministic_under_a_seed(ckpt, tmp_path):
    _train(ckpt, tmp_path / "a", steps=12)
    a = state_to_tensors(load_model(ckpt, "tiny")[2])
    _train(ckpt, tmp_path / "b", steps=12)
    b = state_to_tensors(load_model(ckpt, "tiny")[2])
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


class Interrupted(Exception):
    pass


def test_a_resumed_run_equals_an_uninterrupted_one(ckpt, tmp_path, monkeypatch):
    _train(ckpt, tmp_path / "straight", steps=40, ckpt_every=20)
    straight = state_to_tensors(load_model(ckpt, "tiny")[2])

    # A second run dies right after writing its step-20 state...
    real_save = train_mod._save_state

    def save_then_die(path, step, *args):
        real_save(path, step, *args)
        if step == 20:
            raise Interrupted

    monkeypatch.setattr(train_mod, "_save_state", save_then_die)
    with pytest.raises(Interrupted):
        _train(ckpt, tmp_path / "resumed", steps=40, ckpt_every=20)
    monkeypatch.undo()
    # ...and is started again: it picks up at step 20 and must end where the straight run did.
    _train(ckpt, tmp_path / "resumed", steps=40, ckpt_every=20)
    resumed = state_to_tensors(load_model(ckpt, "tiny")[2])
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name])


def test_batches_depend_only_on_seed_and_step():
    data = np.arange(1000, dtype=np.int32)
    x1, y1 = get_batch(data, 4, 16, seed=0, step=5)
    x2, y2 = get_batch(data, 4, 16, seed=0, step=5)
    x3, _ = get_batch(data, 4, 16, seed=0, step=6)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(x1) + 1)  # next-token targets
    assert not np.array_equal(x1, x3)


def test_unknown_preset_is_a_user_error():
    with pytest.raises(UserError, match="preset"):
        TrainConfig.preset("huge")


def test_manifest_is_valid_json_after_training(ckpt, tmp_path):
    _train(ckpt, tmp_path / "w", steps=4)
    json.loads((ckpt / "MANIFEST").read_text())
