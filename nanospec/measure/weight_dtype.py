"""The target's weights held in 16 bits: what they buy on this machine, and what they change.

    python -m nanospec.measure.weight_dtype [--gamma 7] [--tokens 128] [--prompts 4]
                                            [--repeats 5] [--json FILE]

A one-token pass streams the target's weights (46 MB in float32) and little else, so weights
held in bfloat16 or float16 read half the bytes; llama.cpp's float16 run is 1.7-1.9 times its
float32 one on the same weights (docs/results.md, "The peer"). Whether XLA:CPU turns that
into speed is a measurement, and what the rounding does to the text is another: so, for the
target's matmul weights (every block's Linear kernels and biases) held in float32, bfloat16 and
float16, each matmul casting its input to the weights' type and accumulating in float32 (as
mixed-precision dots do; the output layer, LayerNorms, attention and the KV cache stay
float32), this prints and writes:

    speed       the one-token pass and the pass over γ + 1 tokens (forward_probe); the
                autoregressive loop's first token (prefill included) and each further one
                (bench's T_ar); its tokens/s and the draft model's (γ) over the prompts; all
                timed round-robin in one process, medians
    rounding    the largest |Δ logit| from the float32 target's over the prompts' positions,
                and the greedy tokens: how many of the first `--tokens` match the float32
                target's before the first that differs (a summed count over the prompts)
    exactness   speculative decoding with the 16-bit target verifying: greedy tokens equal
                that target's own autoregressive ones, on every prompt (the loop is exact for
                whatever target it is given; it is the target that changed)

What this file deliberately leaves out: the KV cache and activations in 16 bits (the one-token
pass's bytes are the weights'), int8 weights (a quantizer is another project), and making 16-bit
weights an option of the CLI: docs/results.md says why, from this script's numbers.
"""

import argparse
import statistics

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec.compat import get_value, set_value
from nanospec.errors import UserError
from nanospec.fileio import check_output
from nanospec.machine import described
from nanospec.measure.probes import FORWARD_CALLS, forward_probe, interleaved_samples
from nanospec.measure.tables import console_for, plain_table, sign_off

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def held_in(model, dtype):
    """(cfg, graphdef, params) with every Linear's kernel and bias stored as `dtype`, its input
    cast to it and its products accumulated in float32. float32 gives the model back as is."""
    if dtype == jnp.float32:
        return model
    cfg, g, p = model
    # a clone: flax 0.12's merge hands back the very variables `p` holds, and set_value would
    # then change the float32 model too
    module = nnx.clone(nnx.merge(g, p))
    for block in module.h:
        for layer in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            for var in (layer.kernel, layer.bias):
                set_value(var, get_value(var).astype(dtype))
            layer.dtype, layer.preferred_element_type = dtype, jnp.float32
    g, p = nnx.split(module)
    return cfg, g, p


def agreeing(reference: list[int], tokens: list[int]) -> int:
    """How many tokens match `reference` before the first that differs.

    >>> agreeing([5, 6, 7, 8], [5, 6, 9, 8]), agreeing([5, 6], [5, 6])
    (2, 2)
    """
    n = 0
    for a, b in zip(reference, tokens):
        if a != b:
            break
        n += 1
    return n


def largest_logit_change(model, reference, prompts) -> float:
    """max |logits − reference's| over every position of every prompt (no cache: one pass)."""
    from nanospec.model import forward

    worst = 0.0
    for ids in prompts:
        tokens = jnp.array([ids], jnp.int32)
        positions = jnp.arange(len(ids))[None]
        a = forward(model[1], model[2], tokens, positions)[0]
        b = forward(reference[1], reference[2], tokens, positions)[0]
        worst = max(worst, float(jnp.max(jnp.abs(a - b))))
    return worst


def compare(bundle, gamma: int, tokens: int, texts: list[str], repeats: int) -> dict:
    """Every number the module docstring lists, for each of DTYPES, over the prompts `texts`."""
    from nanospec.decode import Bundle
    from nanospec.generate import pad_prompts
    from nanospec.measure.bench import program_for
    from nanospec.sampling import GREEDY

    f32 = bundle.models["target"]
    cfg = f32[0]
    ids = [bundle.tok.encode_prompt(t) for t in texts]
    tk, ln = pad_prompts(ids, cfg.n_ctx)
    rows = [(tk[i : i + 1], ln[i : i + 1]) for i in range(len(ids))]
    probes, greedy, logit = {}, {}, {}
    for name, dtype in DTYPES.items():
        model = held_in(f32, dtype)
        held = Bundle(bundle.tok, {**bundle.models, "target": model})
        for n in (1, gamma + 1):
            probes[name, "pass", n] = forward_probe(model, n)
        for method in ("ar", "draft"):
            fn = program_for(held, method, GREEDY, tokens, gamma=gamma, prompt=rows[0])
            probes[name, method] = lambda fn=fn: [fn(t, n, jax.random.key(0)) for t, n in rows]
            if method == "ar":  # n is traced: the first token alone, prefill included
                probes[name, "first"] = lambda fn=fn: [
                    fn(t, n, jax.random.key(0), n=1) for t, n in rows
                ]
            out = jax.block_until_ready(probes[name, method]())
            greedy[name, method] = [
                [int(x) for x in jax.device_get(state.seq[0, int(n[0]) : int(n[0]) + tokens])]
                for (state, _), (_, n) in zip(out, rows)
            ]
        logit[name] = largest_logit_change(model, f32, ids)
    med = {k: statistics.median(v) for k, v in interleaved_samples(probes, repeats).items()}
    report = {"gamma": gamma, "tokens": tokens, "prompts": len(ids), "dtypes": {}}
    for name in DTYPES:
        one, wide = (med[name, "pass", n] / FORWARD_CALLS for n in (1, gamma + 1))
        ar = greedy[name, "ar"]
        report["dtypes"][name] = {
            "pass_1_ms": 1e3 * one,
            f"pass_{gamma + 1}_ms": 1e3 * wide,
            "r": wide / one,
            # bench's T_ar: a further token's cost in the autoregressive loop, prefill excluded
            "ar_step_ms": 1e3 * (med[name, "ar"] - med[name, "first"]) / len(ids) / (tokens - 1),
            "prefill_ms": 1e3 * med[name, "first"] / len(ids),
            "ar_tokens_per_s": tokens * len(ids) / med[name, "ar"],
            "draft_tokens_per_s": tokens * len(ids) / med[name, "draft"],
            "max_logit_change": logit[name],
            "tokens_as_float32": sum(map(agreeing, greedy["float32", "ar"], ar)),
            "speculative_equals_autoregressive": greedy[name, "draft"] == ar,
        }
    return report


def print_report(console, report: dict) -> None:
    """Two tables of 80 columns, speed and rounding, a row per dtype; the ratios to float32."""

    g, n = report["gamma"], report["tokens"] * report["prompts"]
    d32 = report["dtypes"]["float32"]
    console.print("\nthe target's weights held in 16 bits: speed, ms", style="bold")
    headers = ["weights", "1 token", f"{g + 1} tokens", "r", "AR step", "prefill"]
    headers += ["AR tok/s", f"γ={g} tok/s"]
    cells = [
        [
            name,
            f"{d['pass_1_ms']:.3f}",
            f"{d[f'pass_{g + 1}_ms']:.3f}",
            f"{d['r']:.2f}",
            f"{d['ar_step_ms']:.3f}",
            f"{d['prefill_ms']:.2f}",
            f"{d['ar_tokens_per_s']:,.0f}",
            f"{d['draft_tokens_per_s']:,.0f}",
        ]
        for name, d in report["dtypes"].items()
    ]
    console.print(plain_table(headers, cells))
    console.print("and what the rounding changes", style="bold")
    headers = ["weights", "largest |Δ logit|", "greedy tokens as float32's", "spec = AR"]
    cells = [
        [
            name,
            f"{d['max_logit_change']:.3f}",
            f"{d['tokens_as_float32']}/{n}",
            "yes" if d["speculative_equals_autoregressive"] else "NO",
        ]
        for name, d in report["dtypes"].items()
    ]
    console.print(plain_table(headers, cells))
    for name, d in report["dtypes"].items():
        if name != "float32":
            console.print(
                f"{name}, against float32: a one-token pass "
                f"{d32['pass_1_ms'] / d['pass_1_ms']:.2f}× as fast, an AR step "
                f"{d32['ar_step_ms'] / d['ar_step_ms']:.2f}×, AR decoding "
                f"{d['ar_tokens_per_s'] / d32['ar_tokens_per_s']:.2f}×, the draft model's loop "
                f"{d['draft_tokens_per_s'] / d32['draft_tokens_per_s']:.2f}×"
            )
    console.print(
        "AR step: a further token's cost in the autoregressive loop (bench's T_ar); prefill: "
        "its first token's; as float32's: tokens before the first that differs; spec = AR: "
        "speculative greedy tokens equal to that target's own autoregressive ones"
    )


def main(argv=None) -> dict:
    from nanospec import SHIPPED
    from nanospec.decode import Bundle
    from nanospec.measure.workloads import workload_prompts

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gamma", type=int, default=7, help="drafts a round (1 to 32)")
    ap.add_argument("--tokens", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--prompts", type=int, default=4, help="facts prompts (1 to 8)")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes (round-robin)")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    args = ap.parse_args(argv)
    try:  # bad input fails now, in one sentence, not after the compiling
        if not 1 <= args.gamma <= 32 or not 1 <= args.prompts <= 8:
            raise UserError("--gamma takes a whole number from 1 to 32, --prompts from 1 to 8.")
        if args.tokens < 2 or args.repeats < 1:
            raise UserError("--tokens takes a whole number of at least 2, --repeats of at least 1.")
        if args.json:
            check_output(args.json, ".json", "--json")
    except UserError as e:
        ap.error(str(e))
    console = console_for()
    bundle = Bundle.load(SHIPPED, ("target", "draft"))
    with console.status("compiling 3 × 4 programs, then timing round-robin…"):
        texts = workload_prompts("facts", args.prompts)
        report = compare(bundle, args.gamma, args.tokens, texts, args.repeats)
    report["machine"] = described()
    print_report(console, report)
    sign_off(console, report, args.json)
    return report


if __name__ == "__main__":
    main()
