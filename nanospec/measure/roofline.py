"""The roofline: this machine's memory and matmul limits, and where the target's passes stand.

    python -m nanospec.measure.roofline [--gamma 2,4,7] [--repeats 5] [--mb 256] [--json FILE]

The same code gives different speedups on different machines, and the term that moves most is
r(γ+1), the verify pass in one-token passes (docs/design.md §6). This measures why, in the
same process and so under the same XLA settings as the model's own programs:

    bandwidth   a copy of a large buffer (`--mb`, past any last-level cache; GB/s counts the
                bytes read and written), a read of it, and a read of a buffer the size of one
                target pass's bytes, re-read over and over as the decode loop re-reads its
                weights (there a large last-level cache helps)
    matmul      FLOP/s of x @ W at the target's shapes (c_attn, attn c_proj, c_fc, mlp c_proj,
                the tied output layer) for 1, γ + 1 and 16 rows of x, and for one pass's
                matmuls together (the shapes weighted by how often a pass runs them)
    matmuls     a pass's matmuls alone, in a pass's order, over weights as large as the
                target's, for 1 and γ + 1 rows: each probe above re-reads one matrix that its
                caches keep, a pass streams all of them from memory; their r is the r a pass
                would have if nothing but its matmuls cost anything
    a pass      its bytes (the weights read, the KV cache read) and FLOPs (the matmuls, and
                attention over every slot of the cache), counted from the ModelConfig

and then where the passes stand: the decode step (bench's T_ar) against its bound, bytes /
bandwidth, and the pass over n tokens (bench's forward probe) against max(bytes / bandwidth,
FLOPs / the matmul rate at n rows) and against the one-token pass. "of bound" is bound /
measured: 1 is as fast as the machine allows. "r at bound" is the r a pass at its bound would
have: where it is near 1 and the measured r is not, the verify pass is held back by how its
kernels run here, not by what the machine can do.

Every probe is compiled and warmed up first, then timed round-robin with the passes
(probes.interleaved_samples), medians. A read is written as a matrix-vector product on one
core: XLA:CPU's plain sum of a large buffer read it at a few GB/s here, its accumulations done
one after another, and the same read split over two cores as one_row_dot splits a decode
step's products ran slower here (its rows far longer than any weight's). So where a decode
step's products run on two cores (model.one_row_dot) they may read faster than this bound's
bandwidth, and the one-token pass's "of bound" may pass 1.

What this file deliberately leaves out: bytes written (the new keys and values, the
activations: under 1% of a pass here), the element-wise work (LayerNorm, GELU, softmax), whose
time the bound does not count, and batches above 1.
"""

import argparse
import statistics
from functools import partial

import jax
import jax.numpy as jnp

from nanospec.errors import UserError
from nanospec.fileio import check_output
from nanospec.machine import described, vector_extension
from nanospec.measure.probes import FORWARD_CALLS, decode_probe, forward_probe, interleaved_samples
from nanospec.measure.tables import console_for, print_roofline, sign_off
from nanospec.measure.workloads import workload_prompts
from nanospec.model import one_row_dot

BANDWIDTH_MB = 256  # the large buffer, in MiB: far past a CPU's last-level cache (tens of MB)
MATMUL_FLOPS_PER_CALL = 2e8  # each matmul probe repeats x @ W about this much work per call
BYTES_PER_CALL = 2**30  # each bandwidth probe moves about this many bytes per call
FLOAT = 4  # bytes: the model runs in float32
DECODE_N = 33  # the standalone run's T_ar: (T(33) − T(1)) / 32, as bench takes it


def param_count(cfg) -> int:
    """The parameters model.py builds for `cfg`, counted from the config alone.

    Per block: ln_1 and ln_2 (2d each), c_attn (d·3d + 3d), attn c_proj (d² + d), c_fc
    (d·4d + 4d), mlp c_proj (4d·d + d): 12d² + 13d. Then wte (V·d), wpe (n_ctx·d), ln_f (2d).

    >>> from nanospec.model import ModelConfig
    >>> param_count(ModelConfig.target()), param_count(ModelConfig.draft())
    (11532288, 691712)
    """
    d = cfg.d_model
    return cfg.n_layer * (12 * d * d + 13 * d) + cfg.vocab_size * d + cfg.n_ctx * d + 2 * d


def matmul_shapes(cfg) -> dict:
    """{name: (d_in, d_out, times a pass runs it)}: every x @ W of one target pass."""
    d, layers = cfg.d_model, cfg.n_layer
    return {
        f"c_attn {d}×{3 * d}": (d, 3 * d, layers),
        f"attn c_proj {d}×{d}": (d, d, layers),
        f"c_fc {d}×{4 * d}": (d, 4 * d, layers),
        f"mlp c_proj {4 * d}×{d}": (4 * d, d, layers),
        f"output {d}×{cfg.vocab_size}": (d, cfg.vocab_size, 1),
    }


def pass_cost(cfg, n: int, slots: int) -> dict:
    """Bytes read and FLOPs of one target pass over n tokens at batch 1, with `slots` KV slots.

    Every weight is read once, but of the position table only the n rows the pass looks up;
    model.py's attention reads its whole KV buffer (the committed slots and the masked rest
    alike), so `slots` is the cache's capacity. FLOPs: 2 per multiply-add of the matmuls, and
    of attention's two einsums over every slot (scores, then the weighted values).

    >>> from nanospec.model import ModelConfig
    >>> one, eight = (pass_cost(ModelConfig.target(), n, 256) for n in (1, 8))
    >>> one["bytes"], one["flops"], eight["bytes"], eight["flops"]
    (50456064, 25165824, 50466816, 201326592)
    """
    d, layers = cfg.d_model, cfg.n_layer
    weights = FLOAT * (param_count(cfg) - (cfg.n_ctx - min(n, cfg.n_ctx)) * d)
    cache = FLOAT * 2 * layers * slots * d  # K and V, every layer
    matmul = sum(2 * n * i * o * k for i, o, k in matmul_shapes(cfg).values())
    attention = 2 * 2 * n * slots * d * layers
    return {
        "weight_bytes": weights,
        "cache_bytes": cache,
        "bytes": weights + cache,
        "matmul_flops": matmul,
        "attention_flops": attention,
        "flops": matmul + attention,
    }


# The probes. Each is a jitted loop whose every pass depends on the last one (nothing for XLA
# to hoist), made once at module level (docs/design.md §3: one jit idiom).


@partial(jax.jit, static_argnums=2, donate_argnums=0)
def _copy(x, s, sweeps: int):
    # donated and carried in place, so no call pays to allocate (and first touch) a new buffer
    return jax.lax.fori_loop(0, sweeps, lambda i, x: x + s, x)


@partial(jax.jit, static_argnums=(1, 2))
def _read(x, width: int, sweeps: int):
    m = x.reshape(-1, width)  # (rows, width), inside the program: outside it would be a copy

    def body(i, u):  # m @ u reads all of m; the next sweep's u depends on this one's result
        # (width,); a max, as no rewrite can hoist it (a sum could become u · m's column sums)
        return u + 1e-30 * jnp.max(m @ u)

    return jax.lax.fori_loop(0, sweeps, body, jnp.ones(width, jnp.float32))


@partial(jax.jit, static_argnums=(2, 3))
def _matmul(x, w, calls: int, split: bool):
    def body(i, x):  # (rows, d_out), as the model computes it: its blocks' products split one
        # row over the cores (model.one_row_dot), its tied output layer is a plain product
        y = one_row_dot(x, w, (((1,), (0,)), ((), ()))) if split else x @ w
        return x + 1e-6 * jnp.max(y, axis=-1, keepdims=True)  # (rows, d_in): depends on y

    return jax.lax.fori_loop(0, calls, body, x)


@partial(jax.jit, static_argnums=3)
def _chain(x, layers, out, calls: int):
    def mm(x, w):  # x @ W as the model's Linear layers compute it (one row on two cores too)
        return one_row_dot(x, w, (((x.ndim - 1,), (0,)), ((), ())))

    def body(i, x):  # as a pass runs them: c_attn, attn c_proj, c_fc, mlp c_proj; then output
        for qkv, proj, fc, fc_proj in layers:
            q, k, v = jnp.split(mm(x, qkv), 3, axis=-1)  # all three used: none left uncomputed
            x = x + 1e-3 * mm(q + k + v, proj)
            # tanh, as GELU: between two dots, it keeps XLA from multiplying them out
            x = x + 1e-3 * mm(jnp.tanh(mm(x, fc)), fc_proj)
        return x + 1e-6 * jnp.max(jnp.einsum("vc,tc->tv", out, x), axis=-1, keepdims=True)

    return jax.lax.fori_loop(0, calls, body, x)


def chain_probes(cfg, rows) -> tuple[dict, dict]:
    """(probes, FLOPs each call does): a pass's matmuls alone (`_chain`), FORWARD_CALLS
    times a call, as forward_probe runs its passes, for each row count. The weights are
    random, shaped as the target's: every layer its own, so they stream as a pass's do."""
    key = jax.random.key(1)
    shapes = [(d_in, d_out) for d_in, d_out, _ in matmul_shapes(cfg).values()]
    layers = [
        [
            0.02 * jax.random.normal(jax.random.fold_in(key, 4 * i + j), s)
            for j, s in enumerate(shapes[:4])
        ]
        for i in range(cfg.n_layer)
    ]
    out = 0.02 * jax.random.normal(key, shapes[4][::-1], jnp.float32)  # (V, d), as wte lies
    probes, flops = {}, {}
    for n in rows:
        x = jnp.ones((n, cfg.d_model), jnp.float32)
        probes[("roofline", "chain", n)] = lambda x=x: _chain(x, layers, out, FORWARD_CALLS)
        flops[("roofline", "chain", n)] = FORWARD_CALLS * pass_cost(cfg, n, 0)["matmul_flops"]
    return probes, flops


def _sweeps(nbytes: int) -> int:
    return max(1, min(64, BYTES_PER_CALL // max(nbytes, 1)))


def _read_probe(buffer: list, width: int = 1024):
    """(probe, bytes a call reads): buffer[0], a flat float32 array read as a (rows, width)
    matrix `_sweeps` times a call; buffer[0] is looked up at each call (the copy replaces it)."""
    sweeps = _sweeps(buffer[0].size * FLOAT)
    return lambda: _read(buffer[0], width, sweeps), sweeps * buffer[0].size * FLOAT


def bandwidth_probes(large_mb: float, pass_bytes: int) -> tuple[dict, dict]:
    """(probes, bytes each call moves): a copy and a read of `large_mb` MiB, and a read of a
    buffer of `pass_bytes` (one pass's, re-read as the decode loop re-reads its weights)."""
    large_bytes = int(large_mb * 2**20)
    large = [jnp.zeros(max(large_bytes // (FLOAT * 1024), 1) * 1024, jnp.float32)]
    # a pass larger than the large buffer (GPT-2 XL's 6 GB) is past every cache too
    small_bytes = min(pass_bytes, large_bytes)
    small = [jnp.zeros(max(small_bytes // (FLOAT * 1024), 1) * 1024, jnp.float32)]
    sweeps = _sweeps(large[0].size * FLOAT)

    def copy():
        large[0] = _copy(large[0], jnp.float32(1.0), sweeps)  # the new buffer replaces the old
        return large[0]

    read, read_bytes = _read_probe(large)  # the copy's own buffer: the same memory, read only
    read_pass, pass_read_bytes = _read_probe(small)
    probes = {("roofline", "copy"): copy, ("roofline", "read"): read}
    probes[("roofline", "read pass")] = read_pass
    moved = {
        ("roofline", "copy"): 2 * sweeps * large[0].size * FLOAT,  # read and written
        ("roofline", "read"): read_bytes,
        ("roofline", "read pass"): pass_read_bytes,
    }
    return probes, moved


def matmul_probes(cfg, rows) -> tuple[dict, dict]:
    """(probes, FLOPs each call does): x @ W at each of the target's shapes, for each row
    count, repeated to about MATMUL_FLOPS_PER_CALL a call (at least 4, at most 256 times)."""
    probes, flops = {}, {}
    key = jax.random.key(0)
    for name, (d_in, d_out, _) in matmul_shapes(cfg).items():
        w = 0.02 * jax.random.normal(key, (d_in, d_out), jnp.float32)
        for n in rows:
            one = 2 * n * d_in * d_out
            calls = max(4, min(256, round(MATMUL_FLOPS_PER_CALL / one)))
            x = jnp.ones((n, d_in), jnp.float32)
            k = ("roofline", "matmul", name, n)
            split = not name.startswith("output")  # the tied output layer: model.py's einsum
            probes[k] = lambda x=x, w=w, calls=calls, split=split: _matmul(x, w, calls, split)
            flops[k] = calls * one
    return probes, flops


def roofline_probes(cfg, blocks, large_mb: float = BANDWIDTH_MB) -> tuple[dict, dict]:
    """(probes, work): every roofline probe for passes over each of `blocks` tokens (16 rows
    too), and the bytes or FLOPs each call does, for `stand`."""
    rows = sorted({1, 16, *blocks})
    probes, work = bandwidth_probes(large_mb, pass_cost(cfg, 1, cfg.n_ctx)["bytes"])
    mm, flops = matmul_probes(cfg, rows)
    chain, chain_flops = chain_probes(cfg, sorted({1, *blocks}))
    return {**probes, **mm, **chain}, {**work, **flops, **chain_flops}


def stand(
    cfg, slots: int, med: dict, work: dict, t_ar: float, t_pass: dict, large_mb: float
) -> dict:
    """The roofline report: this machine's limits from the probes' medians (`med`, seconds a
    call; `work`, bytes or FLOPs a call; `large_mb`, the large buffer's size), and where the
    decode step (t_ar, seconds) and the passes over n tokens (t_pass: {n: seconds a pass}, 1
    among them) stand against them."""
    gbs = {k[1]: work[k] / med[k] / 1e9 for k in work if k[1] in ("copy", "read", "read pass")}
    bandwidth = max(gbs.values())  # a pass streams its bytes no faster than the best of these
    shapes = matmul_shapes(cfg)
    rows = sorted({k[3] for k in work if k[1] == "matmul"})

    def seconds(name: str, n: int) -> float:  # one x @ W: a call's time over its products
        k, (i, o, _) = ("roofline", "matmul", name, n), shapes[name]
        return med[k] * 2 * n * i * o / work[k]

    gflops = {
        name: {str(n): 2 * n * i * o / seconds(name, n) / 1e9 for n in rows}
        for name, (i, o, _) in shapes.items()
    }
    # One pass's matmuls together: their FLOPs over the time the probes say each takes.
    gflops["one pass"] = {
        str(n): pass_cost(cfg, n, slots)["matmul_flops"]
        / sum(k * seconds(name, n) for name, (_, _, k) in shapes.items())
        / 1e9
        for n in rows
    }

    def bound(n: int) -> dict:
        cost = pass_cost(cfg, n, slots)
        memory = cost["bytes"] / (bandwidth * 1e9)
        compute = cost["flops"] / (gflops["one pass"][str(n)] * 1e9)
        return {
            "tokens": n,
            "mb": cost["bytes"] / 1e6,
            "mflop": cost["flops"] / 1e6,
            "memory_ms": 1e3 * memory,
            "compute_ms": 1e3 * compute,
            "bound_ms": 1e3 * max(memory, compute),
            "bound_by": "memory" if memory >= compute else "compute",
        }

    chain = {k[2]: med[k] / FORWARD_CALLS for k in work if k[1] == "chain"}  # s a pass
    one = bound(1)
    passes = [{"pass": "decode step", **one, "measured_ms": 1e3 * t_ar}]
    for n in sorted(t_pass):
        at = bound(n)
        passes.append(
            {
                "pass": f"pass over {n}",
                **at,
                "measured_ms": 1e3 * t_pass[n],
                "r": t_pass[n] / t_pass[1],
                "r_at_bound": at["bound_ms"] / one["bound_ms"],
            }
        )
        if n in chain and 1 in chain:
            passes[-1]["matmuls_ms"] = 1e3 * chain[n]
            passes[-1]["r_matmuls"] = chain[n] / chain[1]
    for p in passes:
        p["of_bound"] = p["bound_ms"] / p["measured_ms"]
    return {
        "vector": vector_extension(),
        "slots": slots,
        "bandwidth_gbs": gbs,
        "bandwidth_mb": large_mb,
        "pass_mb": min(pass_cost(cfg, 1, slots)["bytes"], large_mb * 2**20) / 1e6,
        "matmul_gflops": gflops,
        "passes": passes,
    }


def _gammas(text: str) -> list[int]:
    """--gamma 2,4,7 -> [2, 4, 7], each from 1 to 32 (bench's range)."""
    try:
        gammas = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        gammas = []
    if not gammas or not all(1 <= g <= 32 for g in gammas):
        raise UserError(f"--gamma takes whole numbers from 1 to 32, comma-separated, not {text!r}.")
    return gammas


def main(argv=None) -> dict:
    from nanospec import SHIPPED
    from nanospec.decode import Bundle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gamma", default="7", help="comma-separated γ: passes over γ + 1 tokens")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes (round-robin)")
    ap.add_argument("--mb", type=float, default=BANDWIDTH_MB, help="the large buffer, in MiB")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    args = ap.parse_args(argv)
    try:  # bad input fails now, in one sentence, not after the timing
        gammas = _gammas(args.gamma)
        if args.repeats < 1 or args.mb <= 0:
            raise UserError("--repeats takes a whole number of at least 1, --mb a positive size.")
        if args.json:
            check_output(args.json, ".json", "--json")
    except UserError as e:
        ap.error(str(e))
    console = console_for()
    bundle = Bundle.load(SHIPPED, ("target",))
    target = bundle.models["target"]
    cfg = target[0]
    prompt = bundle.tok.encode_prompt(workload_prompts("facts", 1)[0])
    blocks = sorted({1} | {g + 1 for g in gammas})
    probes = {("decode", n): decode_probe(target, prompt, n) for n in (1, DECODE_N)}
    probes.update({("forward", n): forward_probe(target, n) for n in blocks})
    extra, work = roofline_probes(cfg, blocks, args.mb)
    with console.status("compiling, then timing round-robin…"):
        samples = interleaved_samples({**probes, **extra}, args.repeats)
    med = {k: statistics.median(v) for k, v in samples.items()}
    t_ar = max(med[("decode", DECODE_N)] - med[("decode", 1)], 1e-9) / (DECODE_N - 1)
    t_pass = {n: med[("forward", n)] / FORWARD_CALLS for n in blocks}
    report = {
        "gamma": gammas,
        "repeats": args.repeats,
        "machine": described(),
        **stand(cfg, cfg.n_ctx, med, work, t_ar, t_pass, args.mb),
    }
    print_roofline(console, report)
    sign_off(console, report, args.json)
    return report


if __name__ == "__main__":
    main()
