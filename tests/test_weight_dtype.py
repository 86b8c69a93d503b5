"""Weights held in 16 bits (measure/weight_dtype.py): what the conversion keeps and changes.

The conversion on the tiny model (which arrays change type, that the float32 model is left as
it was, that the logits stay float32 and near float32's), the whole comparison on the tiny
checkpoint folder once, and the report and the refusals on made-up input. Nothing asserts a
time: the speed columns are measurements, printed, not checked.
"""

import doctest
import io

import jax
import jax.numpy as jnp
import pytest
from rich.console import Console

import nanospec.measure.weight_dtype
from nanospec.decode import Bundle
from nanospec.measure.weight_dtype import DTYPES, compare, held_in, main, print_report
from nanospec.model import forward


def test_doctests():
    assert doctest.testmod(nanospec.measure.weight_dtype).failed == 0


def leaves(params) -> dict:
    return {jax.tree_util.keystr(k): x for k, x in jax.tree_util.tree_leaves_with_path(params)}


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_only_the_blocks_matmul_weights_change_type(tiny_model, name):
    before = {k: x.dtype for k, x in leaves(tiny_model[2]).items()}
    cfg, g, p = held_in(tiny_model, DTYPES[name])
    held = leaves(p)
    linear = [k for k in held if any(m in k for m in ("c_attn", "c_proj", "c_fc"))]
    assert len(linear) == 2 * 4 * cfg.n_layer  # kernel and bias of 4 matmuls a block
    assert {str(held[k].dtype) for k in linear} == {name}
    assert {str(x.dtype) for k, x in held.items() if k not in linear} == {"float32"}  # wte, LN
    # the float32 model is untouched (flax's merge hands back the variables it was given)
    assert {k: x.dtype for k, x in leaves(tiny_model[2]).items()} == before
    tokens, positions = jnp.arange(8)[None] % cfg.vocab_size, jnp.arange(8)[None]
    logits = forward(g, p, tokens, positions)[0]
    reference = forward(tiny_model[1], tiny_model[2], tokens, positions)[0]
    assert logits.dtype == jnp.float32
    change = float(jnp.max(jnp.abs(logits - reference)))
    # rounded weights move the logits, by about the rounding of a 16-bit number (2⁻⁸ for
    # bfloat16's 8-bit significand) times their size, not by more
    assert 0 < change < 2**-8 * float(jnp.max(jnp.abs(reference))) * 4
    assert held_in(tiny_model, jnp.float32) is tiny_model


def test_the_comparison_on_the_tiny_checkpoints(tiny_ckpt_dir):
    bundle = Bundle.load(tiny_ckpt_dir, ("target", "draft"))
    report = compare(bundle, gamma=2, tokens=6, texts=["the cat", "a dog"], repeats=1)
    assert list(report["dtypes"]) == list(DTYPES) and report["prompts"] == 2
    for name, row in report["dtypes"].items():
        # the loop is exact for whatever target it is given: greedy speculative = autoregressive
        assert row["speculative_equals_autoregressive"], name
        assert 0 <= row["tokens_as_float32"] <= 12 and row["r"] > 0 and row["prefill_ms"] > 0
    f32 = report["dtypes"]["float32"]
    assert f32["max_logit_change"] == 0 and f32["tokens_as_float32"] == 12
    out = io.StringIO()
    print_report(Console(file=out, width=80), report)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80
    assert (
        "bfloat16, against float32: a one-token pass" in out.getvalue()
        and "12/12" in out.getvalue()
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--gamma", "0"], "--gamma takes a whole number from 1 to 32"),
        (["--prompts", "9"], "--prompts from 1 to 8"),
        (["--tokens", "1"], "--tokens takes a whole number of at least 2"),
        (["--json", "/no/such/folder/w.json"], "the folder /no/such/folder does not exist"),
    ],
)
def test_the_script_refuses_bad_input_in_one_sentence(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and words in capsys.readouterr().err
