"""GPT-2's shape: where time and memory go at V = 50,257 with a real-sized model.

    python -m nanospec.measure.gpt2_shape --out DIR [--gamma 4] [--repeats 5] [--json FILE]

The shipped models are tiny (V = 2,048; a 6-layer, 384-wide target). This script writes two
random-weight Hugging Face folders into DIR — a GPT-2-small-shaped target (12 layers, 768 wide,
12 heads, V = 50,257, context 1,024) and a distilgpt2-shaped draft (6 layers of the same), with
a made-up tokenizer of GPT-2's size — loads them back through hf/folder.py (the path that
`--target FOLDER --draft FOLDER` take), and sets them beside the shipped pair:

    memory    parameters and float32 bytes, the output layer's share of them, KV cache bytes
              (2 × layers × width × 4 per token), one law over the vocabulary (V × 4 bytes),
              what a round holds per row (γ draft laws q and γ+1 target laws p), and SSD's
              speculation cache per row at its default fan-out (ssd/loop.py: SSDState.q holds
              K branches × γ laws, and K + 1 draft KV caches)
    timing    batch 1, one decode step (1 token, CONTEXT tokens cached), one verify pass of
              γ+1 tokens, r = verify / decode, the output layer alone (`ln_f` + `wte.attend`
              on the same input) over the whole step, and c = draft step / target step
    model     DESIGN.md §6 with c and r as measured: a round yields
              E = (1 − α^{γ+1}) / (1 − α) tokens and costs γ·c + r target steps, so the
              predicted decode speedup is E / (γ·c + r), for α = 0.6 and 0.8
    sampling  the sampling cut at V = 50,257 on 5 rows (sampling.sampling_probs at T = 1 with
              top-k 50, with top-p 0.9 on peaked and on flat rows, with no cut), beside a
              full `jnp.sort` of the rows

Method: every program is jitted and warmed up, then timed round-robin (`repeats` passes, every
probe once a pass, so drift hits all alike; measure/probes.py), each probe running
FORWARD_CALLS passes in one program so dispatch cancels; times are medians. Weights are random:
timing does not depend on them (acceptance does, so α is assumed here, not measured).

What this file deliberately leaves out: trained weights and a measured α (`nanospec bench
--target DIR/target --draft DIR/draft` measures one, meaningless for random weights), batches
above 1, prefill, half precision.
"""

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec import SHIPPED
from nanospec.checkpoint import load_model
from nanospec.hf.export import folder_files, write_folder
from nanospec.hf.folder import is_folder, load_folder
from nanospec.measure.probes import FORWARD_CALLS, forward_probe, interleaved_samples
from nanospec.measure.tables import console_for, sign_off, table
from nanospec.model import GPT, ModelConfig, count_params
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.ssd.fanout import SSDOptions, parse_fanout
from nanospec.ssd.loop import SSDProposer
from nanospec.tokenizer import Tokenizer

GPT2_SMALL = ModelConfig(
    "target", vocab_size=50_257, n_ctx=1024, n_layer=12, n_head=12, d_model=768
)
DISTILGPT2 = replace(GPT2_SMALL, name="draft", n_layer=6)
CONTEXT = 256  # tokens cached at a timed step (half the context where that is shorter)
ALPHAS = (0.6, 0.8)
ROWS = 5  # rows of the sampling-cut timing
F32 = 4  # bytes


def made_up_tokenizer(n_merges: int = 50_000) -> Tokenizer:
    """A byte-level BPE of GPT-2's size: 256 bytes + <|endoftext|> + the first `n_merges` pairs
    of single bytes, in order (0, 0), (0, 1), .., (195, 79) — 50,257 tokens. Any ASCII text
    encodes to about one token per two characters."""
    return Tokenizer([(a, b) for a in range(256) for b in range(256)][:n_merges])


def write_random(folder, cfg: ModelConfig, tok, seed: int, sharpen: float = 1.0) -> Path:
    """A Hugging Face folder holding GPT(cfg) with random weights (bos=False, as GPT-2's).

    `sharpen` scales every matrix (the embeddings and the blocks' weights; not the biases and
    LayerNorms): a random GPT at its init gives near-uniform laws and, greedy, repeats one
    token; sharpened, the blocks matter and the greedy laws have clear winners."""
    _, params = nnx.split(GPT(cfg, nnx.Rngs(seed)))
    params = jax.tree.map(lambda x: x * sharpen if x.ndim == 2 else x, params)
    return write_folder(folder, folder_files(cfg, params, tok, bos=False))


def random_pair(out, target: ModelConfig, draft: ModelConfig):
    """(target folder, draft folder) under `out`, sharing one made-up tokenizer; folders
    already there are kept (delete them to write afresh)."""
    out, tok = Path(out), None
    out.mkdir(parents=True, exist_ok=True)
    for seed, cfg in enumerate((target, draft)):
        if not is_folder(out / cfg.name):
            tok = tok or made_up_tokenizer()
            write_random(out / cfg.name, cfg, tok, seed)
    return out / target.name, out / draft.name


def kv_bytes_per_token(cfg: ModelConfig) -> int:
    return 2 * cfg.n_layer * cfg.d_model * F32  # a key and a value per layer


def memory(cfg: ModelConfig, params) -> dict:
    """Parameters and bytes of one model (float32), its output layer's share, its KV cache."""
    n, kv_token = count_params(params), kv_bytes_per_token(cfg)
    return {
        **{k: getattr(cfg, k) for k in ("n_layer", "d_model", "vocab_size", "n_ctx")},
        "params": n,
        "bytes": n * F32,
        "output_layer_share": cfg.vocab_size * cfg.d_model / n,  # wte, read again as the head
        "kv_bytes_per_token": kv_token,
        "kv_bytes_full_context": kv_token * cfg.n_ctx,
    }


def per_row(target: ModelConfig, draft: ModelConfig, gamma: int) -> dict:
    """What one row of a batch holds for a round at γ, and SSD's cache at its default fan-out."""
    law = target.vocab_size * F32
    fanout = parse_fanout(SSDOptions().fanout, gamma)
    k = len(SSDProposer(None, gamma, fanout).branch_k)  # branches: outcomes (k, t*) cached
    return {
        "law_bytes": law,
        "round_bytes": (2 * gamma + 1) * law,  # q (γ, V) and p (γ+1, V)
        "ssd_branches": k,
        "ssd_law_bytes": k * gamma * law,  # SSDState.q (K, γ, V)
        "ssd_kv_bytes": (k + 1) * kv_bytes_per_token(draft) * draft.n_ctx,  # kv_models()
    }


def context_of(cfg: ModelConfig) -> int:
    """Tokens cached at a timed step. The attention reads the whole cache buffer (n_ctx slots)
    whatever the length, so the context only places the positions."""
    return min(CONTEXT, cfg.n_ctx // 2)


def head_probe(model, block: int):
    """FORWARD_CALLS passes of the output layer alone (`ln_f`, `wte.attend`) on a (1, block, C)
    input, each fed the last one's max logit, as forward_probe's passes are fed their argmax."""
    cfg, graphdef, params = model

    @jax.jit
    def loop(params, x):
        m = nnx.merge(graphdef, params)

        def body(i, x):
            logits = m.wte.attend(m.ln_f(x))  # (1, block, V)
            return x + 1e-6 * jnp.max(logits, axis=-1, keepdims=True)

        return jax.lax.fori_loop(0, FORWARD_CALLS, body, x)

    x = jax.random.normal(jax.random.key(0), (1, block, cfg.d_model))
    return lambda: loop(params, x)


def cut_probe(law, x, sp):
    """FORWARD_CALLS applications of `law(x, sp)` (x (ROWS, V)), each fed the last one's."""

    @jax.jit
    def loop(x, sp):
        return jax.lax.fori_loop(0, FORWARD_CALLS, lambda i, x: x + 1e-6 * law(x, sp), x)

    return lambda: loop(x, sp)


def timings(models: dict, gamma: int, repeats: int) -> dict:
    """{probe: median ms of one pass}: every model's decode, verify and output-layer passes and
    the sampling cuts at the largest vocabulary, all timed in one round-robin pool."""
    probes = {}
    for name, model in models.items():
        ctx = context_of(model[0])
        probes[(name, "decode")] = forward_probe(model, 1, ctx)
        probes[(name, "verify")] = forward_probe(model, gamma + 1, ctx)
        probes[(name, "head")] = head_probe(model, 1)
    V = max(m[0].vocab_size for m in models.values())
    # Peaked rows: top-p 0.9 keeps under SHORTLIST tokens (sampling.py's cut finds it among
    # them); flat rows: it keeps thousands, so the cut needs the full sort.
    z = jax.random.normal(jax.random.key(1), (ROWS, V))
    probs = lambda x, sp: sampling_probs(x, sp)
    for cut, sp, x in (
        ("softmax, no cut", SamplingParams.make(1.0), 5 * z),
        ("top-k 50", SamplingParams.make(1.0, top_k=50), 5 * z),
        ("top-p 0.9, peaked rows", SamplingParams.make(1.0, top_p=0.9), 5 * z),
        ("top-p 0.9, flat rows", SamplingParams.make(1.0, top_p=0.9), 3 * z),
    ):
        probes[("cut", cut)] = cut_probe(probs, x, sp)
    probes[("cut", "jnp.sort")] = cut_probe(lambda x, sp: jnp.sort(x, axis=-1), z, None)
    samples = interleaved_samples(probes, repeats)
    return {k: 1e3 * statistics.median(v) / FORWARD_CALLS for k, v in samples.items()}


def predicted(c: float, r: float, gamma: int, alpha: float) -> dict:
    """DESIGN.md §6: E tokens a round for γ·c + r target steps.

    >>> round(predicted(0.1, 1.2, 4, 0.8)["speedup"], 3)  # E = 3.3616 for 1.6 target steps
    2.101
    """
    e = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    cost = gamma * c + r
    return {"alpha": alpha, "expected_tokens": e, "round_cost": cost, "speedup": e / cost}


def step_costs(ms: dict, name: str, cfg: ModelConfig) -> dict:
    """One model's timed passes: decode, verify, r, and the output layer's share of a step."""
    decode, verify, head = (ms[(name, k)] for k in ("decode", "verify", "head"))
    return {
        "context": context_of(cfg),
        "decode_ms": decode,
        "verify_ms": verify,
        "r": verify / decode,
        "output_layer_ms": head,
        "output_layer_share": head / decode,
    }


def mb(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:,.1f} MB"


# What each table shows: {header: the cell, from one row's record}.
MEMORY_COLUMNS = {
    "layers × width": lambda x: f"{x['n_layer']} × {x['d_model']}",
    "V": lambda x: f"{x['vocab_size']:,}",
    "params": lambda x: f"{x['params']:,}",
    "bytes": lambda x: mb(x["bytes"]),
    "output layer": lambda x: f"{x['output_layer_share']:.0%}",
    "KV / token": lambda x: f"{x['kv_bytes_per_token']:,} B",
    "KV, full context": lambda x: f"{mb(x['kv_bytes_full_context'])} ({x['n_ctx']:,})",
}
ROW_COLUMNS = {
    "one law": lambda x: f"{x['law_bytes'] / 1024:,.0f} KB",
    "a round: γ q + γ+1 p": lambda x: mb(x["round_bytes"]),
    "SSD branches K": lambda x: str(x["ssd_branches"]),
    "SSD laws: K·γ": lambda x: mb(x["ssd_law_bytes"]),
    "SSD draft KV: K+1": lambda x: mb(x["ssd_kv_bytes"]),
}
STEP_COLUMNS = {
    "context": lambda x: str(x["context"]),
    "decode ms": lambda x: f"{x['decode_ms']:.3f}",
    "verify γ+1 ms": lambda x: f"{x['verify_ms']:.3f}",
    "r": lambda x: f"{x['r']:.2f}",
    "output layer ms": lambda x: f"{x['output_layer_ms']:.3f}",
    "of a step": lambda x: f"{x['output_layer_share']:.0%}",
}
PREDICTION_COLUMNS = {
    "c": lambda x: f"{x['c']:.3f}",
    "r": lambda x: f"{x['r']:.2f}",
    "round γ·c + r": lambda x: f"{x['round_cost']:.2f}",
}
for _a in ALPHAS:  # at each assumed α: tokens a round, and the speedup
    PREDICTION_COLUMNS[f"E, α = {_a}"] = lambda x, a=_a: f"{x['at'][a]['expected_tokens']:.2f}"
    PREDICTION_COLUMNS[f"speedup, α = {_a}"] = lambda x, a=_a: f"{x['at'][a]['speedup']:.2f}×"


def show(console, title: str, first: str, columns: dict, records: dict) -> None:
    """One table: a row per record, its name first, then `columns`' cells."""
    rows = [[name, *(cell(x) for cell in columns.values())] for name, x in records.items()]
    table(title, [first, *columns], rows, console)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the random-weight model folders")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    console, g = console_for(), args.gamma
    with console.status("writing and loading the GPT-2-shaped folders…"):
        t_dir, d_dir = random_pair(args.out, GPT2_SMALL, DISTILGPT2)
        _, big_target = load_folder(t_dir, "target")
        _, big_draft = load_folder(d_dir, "draft")
    models = {
        "shipped target": load_model(SHIPPED, "target"),
        "shipped draft": load_model(SHIPPED, "draft"),
        "gpt2-small shape": big_target,
        "distilgpt2 shape": big_draft,
    }
    pairs = {"shipped": ("shipped target", "shipped draft")}
    pairs["gpt2 shape"] = ("gpt2-small shape", "distilgpt2 shape")

    mem = {name: memory(m[0], m[2]) for name, m in models.items()}
    show(console, "memory per model (float32)", "model", MEMORY_COLUMNS, mem)
    rows = {p: per_row(models[t][0], models[d][0], g) for p, (t, d) in pairs.items()}
    show(console, f"per row of a batch, γ = {g}", "pair", ROW_COLUMNS, rows)
    with console.status(f"timing, {args.repeats} round-robin passes…"):
        ms = timings(models, g, args.repeats)
    steps = {name: step_costs(ms, name, m[0]) for name, m in models.items()}
    show(console, f"one step at batch 1, median of {args.repeats}", "model", STEP_COLUMNS, steps)
    pred = {}
    for p, (t, d) in pairs.items():
        c, r = steps[d]["decode_ms"] / steps[t]["decode_ms"], steps[t]["r"]
        at = {a: predicted(c, r, g, a) for a in ALPHAS}
        pred[p] = {"c": c, "r": r, "round_cost": g * c + r, "at": at}
    show(
        console,
        f"predicted decode speedup E / (γ·c + r), γ = {g}",
        "pair",
        PREDICTION_COLUMNS,
        pred,
    )
    cuts = {cut: {"ms": t} for (kind, cut), t in ms.items() if kind == "cut"}
    base = cuts["softmax, no cut"]["ms"]
    table(
        f"the sampling cut at V = {GPT2_SMALL.vocab_size:,}, {ROWS} rows, T = 1",
        ["law", "ms", "× softmax"],
        [[cut, f"{x['ms']:.3f}", f"{x['ms'] / base:.1f}"] for cut, x in cuts.items()],
        console,
    )
    report = {
        "gamma": g,
        "repeats": args.repeats,
        "context": CONTEXT,
        "folders": {"target": str(t_dir), "draft": str(d_dir)},
        "configs": {name: m[0].to_dict() for name, m in models.items()},
        "memory": mem,
        "per_row": rows,
        "timing": steps,
        "predicted": pred,
        "sampling_cut_ms": {cut: x["ms"] for cut, x in cuts.items()},
        "machine": {"platform": jax.devices()[0].platform, "jax": jax.__version__},
    }
    sign_off(console, report, args.json)
    return report


if __name__ == "__main__":
    main()
