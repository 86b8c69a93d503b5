"""measure/layer_scan.py: the scan form it times computes what the model computes, and its
measuring runs end to end.

The script's max |Δlogits| column claims that the two forms are one model; the first test
checks that claim on a tiny model, for the logits, the hidden states and the KV cache, over a
prefill into an empty cache and then a 3-token block read against it. The others run `measure`
on the tiny model and check that every number is there (tests never assert times).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec.measure import layer_scan
from nanospec.model import GPT, ModelConfig

CFG = ModelConfig.tiny()


def test_the_scan_form_computes_what_the_loop_computes():
    """Equivalence: a 5-token prefill into an empty cache, then a 3-token block at length 5;
    both forms carry their own cache (per-layer tuples, or one stacked array) from pass to pass."""
    model = GPT(CFG, nnx.Rngs(0))
    both = layer_scan.forms(model, model.empty_cache(1, capacity=16))
    caches = {form: cache for form, (_, _, cache) in both.items()}
    passes = {form: jax.jit(fn) for form, (fn, _, _) in both.items()}  # eager would compile each op
    tokens = jax.random.randint(jax.random.key(1), (1, 8), 0, CFG.vocab_size)  # (1, 8)
    for start, T in ((0, 5), (5, 3)):
        block, positions = tokens[:, start : start + T], start + jnp.arange(T)[None]
        out = {f: passes[f](w, block, positions, caches[f]) for f, (_, w, _) in both.items()}
        (logits, hidden, cache), (s_logits, s_hidden, s_cache) = out["loop"], out["scan"]
        np.testing.assert_allclose(s_logits, logits, atol=1e-5)
        np.testing.assert_allclose(s_hidden, hidden, atol=1e-5)
        np.testing.assert_allclose(s_cache.k, jnp.stack(cache.k), atol=1e-5)  # (L, B·H, S, Dh)
        np.testing.assert_allclose(s_cache.v, jnp.stack(cache.v), atol=1e-5)
        assert s_cache.length.tolist() == cache.length.tolist() == [start + T]
        assert float(jnp.abs(cache.k[-1][:, start : start + T]).max()) > 0  # the block was written
        caches = {"loop": cache, "scan": s_cache}


def test_measure_reports_every_number():
    """Compile seconds and ms per pass of both forms, both passes, all present and positive,
    and the logits it compares agree."""
    record = layer_scan.measure(CFG, repeats=1, compile_repeats=1)
    for key in ("compile_s", "step_ms"):
        for name in layer_scan.PASSES:
            x = record[key][name]
            assert x["loop"] > 0 and x["scan"] > 0
            assert x["scan_over_loop"] == pytest.approx(x["scan"] / x["loop"])
    assert record["max_abs_diff_logits"] <= 1e-5
    assert record["capacity"] == CFG.n_ctx + layer_scan.GAMMA + 1
    assert record["params"] > 0


def test_shapes_only_compiles_without_weights():
    """GPT-2 XL's path: lowered from ShapeDtypeStructs, so nothing is timed or compared."""
    record = layer_scan.measure(CFG, compile_repeats=1, steps=False)
    assert all(record["compile_s"][n]["scan"] > 0 for n in layer_scan.PASSES)
    assert record["step_ms"] is None and record["max_abs_diff_logits"] is None


def test_an_unknown_shape_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        layer_scan.main(["--shapes", "target,gpt5"])
    assert exit_.value.code == 2
    assert "--shapes takes a comma-separated list of target, gpt2-small, gpt2-xl" in (
        capsys.readouterr().err
    )
