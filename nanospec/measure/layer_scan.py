"""Layers in a Python loop or in `lax.scan`: what each costs here, to compile and to run.

    python -m nanospec.measure.layer_scan [--shapes target,gpt2-small,gpt2-xl] [--repeats 5]
                                          [--json FILE] [--xl-steps]

model.py runs its blocks in a Python `for` loop: XLA sees every layer written out, so the
program (and its compile time) grows with depth. The alternative is one block traced once and
run by `jax.lax.scan` over the blocks' parameters stacked along a new leading layer axis (and
the per-layer KV cache buffers stacked the same way): scan xs = (params, k, v), ys = the new
(k, v). This script builds both forms from the SAME parameters and sets them side by side:

    compile   seconds to trace, lower and compile (`jax.jit(f).lower(...).compile()`) one
              decode pass (1 token) and one verify pass (γ+1 = 8 tokens), batch 1
    step      ms per pass of the same two passes, FORWARD_CALLS passes in one program, the
              four programs timed round-robin over `repeats` passes (probes.interleaved_samples);
              medians, so drift and a noisy neighbour hit both forms alike
    agree     max |Δlogits| between the forms over both passes: 0, or float32 rounding

Shapes: the shipped target (6 layers, width 384, V = 2,048), GPT-2 small (12 layers, 768,
V = 50,257) and GPT-2 XL (48 layers, 1,600, 25 heads). Each pass sees a cache of n_ctx + 8
slots, half of the context committed (random keys and values). XL is only compiled, from
shapes (`jax.ShapeDtypeStruct`s: no 6 GB of weights), unless --xl-steps. The disk compile
cache stays off: a compile time must be a compile, not a load.

What the numbers mean for model.py. Here (a 2-core CPU, XLA:CPU) the scan compiles a deep
model's pass in a fraction of the loop's time, and the logits agree bit for bit, but every
pass runs slower. Inside the scan's while loop XLA copies each layer's weight slice out of the
stack (a dynamic-slice fused into a copy) before the dots read it, and each layer's KV buffers
out of the stacked cache, to write them whole into the new one (the loop writes only the T
new slots, in place): every pass moves all block weights and the whole cache again. A
program is compiled once and run for every token, so model.py keeps its loop. What would
change that: an XLA that reads the slice in place (XLA's GPU backend has a dynamic-slice
fusion for its library matrix products; not measured here: rerun this there), or models so
deep, or programs so many, that compiling dominates. The numbers, with the command: docs/results.md, "Layers in a loop or in lax.scan".

What this file deliberately leaves out: batches above 1, prefill, half precision, Flax's own
`nnx.scan` (it lowers to the same `lax.scan`), and remat or pipelining over the layer axis.
"""

import argparse
import statistics
import time
from dataclasses import replace

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec.cache import KVCache, attention_mask, rollback
from nanospec.errors import UserError
from nanospec.fileio import check_output
from nanospec.machine import described
from nanospec.measure.gpt2_shape import GPT2_SMALL
from nanospec.measure.probes import FORWARD_CALLS, interleaved_samples
from nanospec.measure.tables import console_for, sign_off, table
from nanospec.model import GPT, ModelConfig, count_params, forward

GPT2_XL = replace(GPT2_SMALL, name="gpt2-xl", n_layer=48, n_head=25, d_model=1600)
SHAPES = {"target": ModelConfig.target(), "gpt2-small": GPT2_SMALL, "gpt2-xl": GPT2_XL}
GAMMA = 7  # a verify pass reads γ+1 = 8 tokens
PASSES = {"decode": 1, "verify": GAMMA + 1}  # pass -> tokens it reads
FORMS = ("loop", "scan")


def stack(trees):
    """[tree_0, tree_1, ..] -> one tree whose leaves gain a leading layer axis (L, ...).
    Shapes in, shapes out: a list of ShapeDtypeStruct trees stacks without allocating."""
    fn = lambda ts: jax.tree.map(lambda *xs: jnp.stack(xs), *ts)
    abstract = isinstance(jax.tree.leaves(trees)[0], jax.ShapeDtypeStruct)
    return jax.eval_shape(fn, trees) if abstract else fn(trees)


def split_for_scan(model: GPT):
    """(outer_def, outer, block_def, stacked): the embeddings and ln_f as one state, and the
    blocks' states stacked (every leaf (L, ...)) under the one graphdef all blocks share."""
    outer_def, outer = nnx.split((model.wte, model.wpe, model.ln_f))
    splits = [nnx.split(block) for block in model.h]
    return outer_def, outer, splits[0][0], stack([state for _, state in splits])


def stack_cache(cache: KVCache) -> KVCache:
    """The per-layer buffers as one (L, B·H, S, Dh) array each; length unchanged. (KVCache's
    `capacity` and `rollback` work on either layout.)"""
    return cache._replace(k=stack(list(cache.k)), v=stack(list(cache.v)))


def scan_forward(outer_def, block_def, outer, stacked, tokens, positions, cache: KVCache):
    """The alternative measured: GPT.__call__ with its blocks run by `lax.scan`.

    tokens, positions: (B, T) int; cache: a stacked cache (stack_cache). Returns logits
    (B, T, V), the last block's output (B, T, C) and the stacked cache with `length + T`.
    """
    wte, wpe, ln_f = nnx.merge(outer_def, outer)
    T = tokens.shape[1]
    mask = attention_mask(cache.length, T, cache.capacity, None)  # (B, T, S)
    x = wte(tokens) + wpe(jnp.minimum(positions, wpe.num_embeddings - 1))  # (B, T, C)

    def layer(x, xs):  # one block: its parameters and its (B·H, S, Dh) buffers, sliced by scan
        params, k_buf, v_buf = xs
        x, k_buf, v_buf = nnx.merge(block_def, params)(x, k_buf, v_buf, cache.length, mask)
        return x, (k_buf, v_buf)

    x, (k, v) = jax.lax.scan(layer, x, (stacked, cache.k, cache.v))  # k, v: (L, B·H, S, Dh)
    return wte.attend(ln_f(x)), x, KVCache(k, v, cache.length + T)


def forms(model: GPT, cache: KVCache) -> dict:
    """{form: (pass function, weights, cache)}: one model and cache laid out for each form.
    A pass function is f(weights, tokens, positions, cache) -> (logits, hidden, cache)."""
    graphdef, params = nnx.split(model)
    outer_def, outer, block_def, stacked = split_for_scan(model)
    loop = lambda w, tokens, positions, c: forward(graphdef, w, tokens, positions, c)
    scan = lambda w, tokens, positions, c: scan_forward(
        outer_def, block_def, *w, tokens, positions, c
    )
    return {"loop": (loop, params, cache), "scan": (scan, (outer, stacked), stack_cache(cache))}


def half_full_cache(cfg: ModelConfig, key) -> KVCache:
    """Batch 1, n_ctx + γ+1 slots (a run's capacity, cache.capacity), n_ctx // 2 committed.
    The buffers are random so that the committed slots matter to the logits compared."""
    shape = (cfg.n_head, cfg.n_ctx + GAMMA + 1, cfg.head_dim)  # (B·H, S, Dh), B = 1
    bufs = [jax.random.normal(k, shape) for k in jax.random.split(key, 2 * cfg.n_layer)]
    return KVCache(tuple(bufs[::2]), tuple(bufs[1::2]), jnp.array([cfg.n_ctx // 2], jnp.int32))


def block_inputs(cfg: ModelConfig, T: int):
    """(tokens, positions), each (1, T): T tokens right after the committed context."""
    tokens = jax.random.randint(jax.random.key(T), (1, T), 0, cfg.vocab_size)
    return tokens, cfg.n_ctx // 2 + jnp.arange(T)[None]


def compile_times(both: dict, cfg: ModelConfig, repeats: int):
    """({(form, pass): median seconds}, {(form, pass): executable}): every pass of both forms
    traced, lowered and compiled afresh (a new function each time, so no cache answers),
    round-robin `repeats` times — the first compile in a process pays for warming JAX up."""
    samples: dict = {}
    executables = {}
    for _ in range(repeats):
        for name, T in PASSES.items():
            for form, (fn, weights, cache) in both.items():
                t0 = time.perf_counter()
                jitted = jax.jit(lambda *args, fn=fn: fn(*args))
                executables[(form, name)] = jitted.lower(
                    weights, *block_inputs(cfg, T), cache
                ).compile()
                samples.setdefault((form, name), []).append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}, executables


def step_probe(form, T: int, context: int):
    """FORWARD_CALLS cached passes over T tokens, as probes.forward_probe times the model
    (written there for model.forward and its per-layer cache, so not reusable as it stands):
    each pass feeds on the last one's argmax, the cache is carried and rolled back."""
    fn, weights, cache = form

    @jax.jit
    def loop(weights, cache, tok):
        def body(i, carry):
            cache, tok = carry
            logits, _, cache = fn(weights, tok, context + jnp.arange(T)[None], cache)
            return rollback(cache, cache.length - T), jnp.argmax(logits, -1).astype(jnp.int32)

        return jax.lax.fori_loop(0, FORWARD_CALLS, body, (cache, tok))

    tok = jnp.zeros((1, T), jnp.int32)
    return lambda: loop(weights, cache, tok)


def measure(
    cfg: ModelConfig, repeats: int = 5, compile_repeats: int = 3, steps: bool = True, seed: int = 0
) -> dict:
    """One shape's record: compile seconds of both passes in both forms; with `steps`, also
    ms per pass and the forms' max |Δlogits| (else the weights are only shapes, and those
    two are None)."""
    build = lambda: (GPT(cfg, nnx.Rngs(seed)), half_full_cache(cfg, jax.random.key(seed)))
    model, cache = build() if steps else nnx.eval_shape(build)
    both = forms(model, cache)
    compile_s, executables = compile_times(both, cfg, compile_repeats)
    record = {
        "config": cfg.to_dict(),
        "params": count_params(nnx.split(model)[1]),
        "capacity": cache.capacity,
        "context": cfg.n_ctx // 2,
        "compile_s": nest(compile_s),
        "step_ms": None,
        "max_abs_diff_logits": None,
    }
    if not steps:
        return record
    diffs = []
    for name, T in PASSES.items():
        tokens, positions = block_inputs(cfg, T)
        loop, scan = (
            executables[(f, name)](w, tokens, positions, c)[0] for f, (_, w, c) in both.items()
        )
        diffs.append(float(jnp.max(jnp.abs(loop - scan))))
    probes = {
        (f, n): step_probe(both[f], T, cfg.n_ctx // 2) for n, T in PASSES.items() for f in FORMS
    }
    samples = interleaved_samples(probes, repeats)
    ms = {k: 1e3 * statistics.median(v) / FORWARD_CALLS for k, v in samples.items()}
    return {**record, "step_ms": nest(ms), "max_abs_diff_logits": max(diffs)}


def nest(flat: dict) -> dict:
    """{(form, pass): x} -> {pass: {loop, scan, scan_over_loop}}."""
    out = {name: {f: flat[(f, name)] for f in FORMS} for name in PASSES}
    for x in out.values():
        x["scan_over_loop"] = x["scan"] / x["loop"]
    return out


def row(shape: str, record: dict, key: str, spec: str) -> list:
    """A table row: the shape, its layers, then loop, scan and scan/loop for each pass."""
    cells = [shape, record["config"]["n_layer"]]
    for x in (record[key][name] for name in PASSES):
        cells += [format(x["loop"], spec), format(x["scan"], spec), f"{x['scan_over_loop']:.2f}×"]
    return cells


def show(console, records: dict, repeats: int, compile_repeats: int) -> None:
    """Two tables (each fits a wide terminal): compile seconds, then ms per pass."""
    heads = ["shape", "layers", *(f"{n} {c}" for n in PASSES for c in (*FORMS, "scan/loop"))]
    rows = [row(s, r, "compile_s", ".2f") for s, r in records.items()]
    title = f"compile seconds (trace, lower, XLA), batch 1, median of {compile_repeats}"
    table(title, heads, rows, console)
    timed = {s: r for s, r in records.items() if r["step_ms"]}
    if timed:
        rows = [
            [*row(s, r, "step_ms", ".3f"), f"{r['max_abs_diff_logits']:.1e}"]
            for s, r in timed.items()
        ]
        title = f"ms per pass, batch 1, median of {repeats}"
        table(title, [*heads, "max |Δlogits|"], rows, console)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES)
    )
    ap.add_argument("--repeats", type=int, default=5, help="timed passes (round-robin)")
    ap.add_argument("--compile-repeats", type=int, default=3, help="compiles of each program")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    ap.add_argument("--xl-steps", action="store_true", help="time GPT-2 XL too (12 GB of weights)")
    args = ap.parse_args(argv)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if not shapes or any(s not in SHAPES for s in shapes):
        ap.error(f"--shapes takes a comma-separated list of {', '.join(SHAPES)}")
    if min(args.repeats, args.compile_repeats) < 1:
        ap.error("--repeats and --compile-repeats take a whole number of at least 1")
    try:  # a bad --json path fails now, not after minutes of compiling
        if args.json:
            check_output(args.json, ".json", "--json")
    except UserError as e:
        ap.error(str(e))
    jax.config.update("jax_enable_compilation_cache", False)  # compile, never load from disk
    console = console_for()
    records = {}
    for s in shapes:
        steps = s != "gpt2-xl" or args.xl_steps
        with console.status(f"{s}: compiling both forms{' and timing them' if steps else ''}…"):
            records[s] = measure(SHAPES[s], args.repeats, args.compile_repeats, steps)
    show(console, records, args.repeats, args.compile_repeats)
    report = {
        "gamma": GAMMA,
        "repeats": args.repeats,
        "compile_repeats": args.compile_repeats,
        "forward_calls": FORWARD_CALLS,
        "machine": described(),
        "shapes": records,
    }
    sign_off(console, report, args.json)
    return report


if __name__ == "__main__":
    main()
