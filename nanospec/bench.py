"""`nanospec bench`: speculative speedup, measured and predicted, side by side in one run.

For every γ it reports (DESIGN §6):

    α      per-draft acceptance probability on the workload (i.i.d. estimate from the loop's
           own counters; the draft acceptance rate, accepted / drafted, is reported beside it)
    c      T_draft / T_ar: per-token decode cost of the draft over the target's
    r      T_verify(γ+1) / T_ar: one target pass over γ+1 tokens, over a one-token pass
    E      expected tokens per round, (1 − α^{γ+1}) / (1 − α)
    pred decode   E / (γ·c + r): DESIGN §6's speedup of the decode phase alone
    predicted     the same model end to end: autoregressive time / (prefill + draft prefill +
                  rounds · (γ·T_draft + r·T_ar)), rounds = tokens / E — the measured runs
                  include each prompt's prefill, so the prediction must too
    measured      autoregressive time / speculative time for the same prompts and tokens
    meas/pred     the loop's efficiency (overheads, host syncs, recompiles would show here)

Method: every program is compiled and warmed up first; then `repeats` rounds time every method
on every workload prompt (batch 1, EOS disabled so each run decodes exactly `tokens` tokens),
interleaved so a noisy neighbour slows all methods alike; medians are reported. Per-token costs
are differences of two runs of the same compiled loop ((T(N) − T(1)) / (N − 1)), so prefill and
dispatch cancel out. These are ratios measured in one run on one machine — never compare
absolute times across runs.

What this file deliberately leaves out: asserting anything about time (tests never do).
"""

import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
from rich.console import Console
from rich.table import Table

from nanospec.fileio import atomic_write
from nanospec.generate import _generate, pad_prompts
from nanospec.cache import init_cache, rollback
from nanospec.model import forward
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import _fused, check_room
from nanospec.trace import metrics
from nanospec.workloads import workload_prompts


def _timed(fn) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def interleaved_medians(probes: dict, repeats: int) -> dict:
    """Median seconds of every probe, timed round-robin so noise hits all of them alike."""
    for fn in probes.values():  # compile and warm up
        jax.block_until_ready(fn())
    samples: dict = {k: [] for k in probes}
    for _ in range(repeats):
        for k, fn in probes.items():
            samples[k].append(_timed(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


def decode_probe(model, prompt: list[int], n: int):
    """Prefill + n greedy decode steps at batch 1 (EOS disabled): the autoregressive loop."""
    cfg, g, p = model
    tokens, lengths = pad_prompts([prompt], cfg.n_ctx)
    return lambda: _generate(g, p, cfg, tokens, lengths, jax.random.key(0), GREEDY, jnp.int32(n), -1)


FORWARD_CALLS = 32


def forward_probe(model, block: int, context: int = 64):
    """FORWARD_CALLS cached forward passes over `block` tokens, `context` tokens cached.

    The cache is a traced argument carried through the loop (written, then rolled back), as in
    the real loops — a cache baked in as a constant lets XLA precompute parts of attention.
    """
    cfg, g, p = model

    @jax.jit
    def loop(params, cache, tok):
        def body(i, carry):  # each pass feeds on the previous pass's argmax: nothing to hoist
            cache, tok = carry
            logits, _, cache = forward(g, params, tok, context + jnp.arange(block)[None], cache)
            return rollback(cache, cache.length - block), jnp.argmax(logits, -1).astype(jnp.int32)
        return jax.lax.fori_loop(0, FORWARD_CALLS, body, (cache, tok))

    cache = rollback(init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, 1, cfg.n_ctx), jnp.array([context]))
    tok = jnp.zeros((1, block), jnp.int32)
    return lambda: loop(p, cache, tok)


def iid_acceptance(hist: list[int]) -> float:
    """The per-draft acceptance probability α of the i.i.d. model behind E[tokens per round].

    Each round is a run of accepts ended by one rejection (or by reaching γ), so the maximum
    likelihood estimate is accepted / (accepted + rejections). The reported "draft acceptance
    rate" (accepted / drafted) is lower: it also counts the drafts discarded after a rejection.

    >>> iid_acceptance([1, 0, 1])   # γ = 2: one round rejected at once, one accepted both
    0.6666666666666666
    """
    gamma = len(hist) - 1
    accepted = sum(k * h for k, h in enumerate(hist))
    rejections = sum(hist) - hist[gamma]
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def expected_tokens(alpha: float, gamma: int) -> float:
    """E[tokens per round] = 1 + α + α² + … + α^γ."""
    return float(sum(alpha ** i for i in range(gamma + 1)))


def run_bench(bundle, methods=("ar", "draft"), gammas=(1, 2, 4, 6, 8), temperature: float = 0.0,
              workload: str = "facts", tokens: int = 64, repeats: int = 3, n_prompts: int = 8,
              seed: int = 0, json_path: str | None = None, console: Console | None = None) -> dict:
    console = console or Console()
    tok = bundle.tok
    target = bundle.models["target"]
    cfg, g, p = target
    sp = SamplingParams.make(temperature)
    prompts = [pad_prompts([tok.encode_prompt(t)], cfg.n_ctx) for t in workload_prompts(workload, n_prompts)]
    spec_methods = [m for m in methods if m != "ar"]
    for m in spec_methods:
        for gamma in gammas:
            for _, lengths in prompts:
                check_room(cfg, lengths, tokens, gamma)

    def ar_run(tokens_, lengths, key):
        return _generate(g, p, cfg, tokens_, lengths, key, sp, jnp.int32(tokens), -1)

    def spec_run(method, gamma):
        drafter, dparams = bundle.drafter(method)
        return lambda tk, ln, key: _fused(g, p, cfg, drafter, dparams, tk, ln, key, sp,
                                          jnp.int32(tokens), -1, gamma)

    programs = {("ar", 0): ar_run}
    programs.update({(m, gm): spec_run(m, gm) for m in spec_methods for gm in gammas})
    hists: dict = {}
    with console.status("compiling, warming up, counting acceptances…"):
        for (m, gm), fn in programs.items():
            for i, (tk, ln) in enumerate(prompts):
                state = jax.block_until_ready(fn(tk, ln, jax.random.key(seed + i)))
                if m != "ar":
                    hists[(m, gm)] = [a + b for a, b in zip(hists.get((m, gm), [0] * (gm + 1)),
                                                             state.hist.sum(0).tolist())]
    # Everything that is timed goes into one round-robin pool: the workload runs, the decode
    # loops behind c, and the forward passes behind r.
    probes = {k: (lambda fn=fn: [fn(tk, ln, jax.random.key(seed + i)) for i, (tk, ln) in enumerate(prompts)])
              for k, fn in programs.items()}
    probe_prompt = tok.encode_prompt(workload_prompts(workload, 1)[0])
    for name, model in bundle.models.items():
        for n in (1, tokens):
            probes[("decode", name, n)] = decode_probe(model, probe_prompt, n)
    for block in {1} | {gm + 1 for gm in gammas}:
        probes[("forward", block)] = forward_probe(target, block)
    with console.status("timing…"):
        med = interleaved_medians(probes, repeats)
    step = {name: max(med[("decode", name, tokens)] - med[("decode", name, 1)], 1e-9) / (tokens - 1)
            for name in bundle.models}  # seconds per decode step: prefill cancels out
    t_ar = step["target"]
    t_draft = {name: t for name, t in step.items() if name != "target"}
    fwd1 = med[("forward", 1)]
    fwd = {gm: med[("forward", gm + 1)] for gm in gammas}
    times = {k: med[k] for k in programs}

    ar_time = times[("ar", 0)]
    n_total = tokens * len(prompts)
    # What the autoregressive runs spent outside decode steps (prefill, dispatch): speculation
    # pays it too, plus the draft's own prefill, so an end-to-end prediction must include it.
    prefill = max(ar_time - n_total * t_ar, 0.0)
    draft_prefill = {name: len(prompts) * max(med[("decode", name, 1)] - step[name], 0.0)
                     for name in t_draft}
    rows = []
    for m in spec_methods:
        for gm in gammas:
            mt = metrics(hists[(m, gm)], generated=n_total)
            alpha = iid_acceptance(hists[(m, gm)])
            c = t_draft.get(m, 0.0) / t_ar
            r = fwd[gm] / fwd1
            e = expected_tokens(alpha, gm)
            round_time = gm * t_draft.get(m, 0.0) + r * t_ar
            predicted_time = prefill + draft_prefill.get(m, 0.0) + n_total / e * round_time
            pred = ar_time / predicted_time
            meas = ar_time / times[(m, gm)]
            rows.append({"method": m, "gamma": gm, "alpha": alpha,
                         "acceptance_rate": mt["acceptance_rate"],
                         "mean_acceptance_length": mt["mean_acceptance_length"], "c": c,
                         "verify_over_ar": r, "expected_tokens_per_round": e,
                         "predicted_decode_speedup": e / (gm * c + r),
                         "predicted_speedup": pred, "measured_speedup": meas,
                         "efficiency": meas / pred, "seconds": times[(m, gm)]})
    best = max(rows, key=lambda x: x["measured_speedup"]) if rows else None
    report = {"benchmark": "speculative", "workload": workload, "prompts": len(prompts),
              "tokens_per_prompt": tokens, "temperature": temperature, "repeats": repeats,
              "ar": {"seconds": ar_time, "tokens_per_second": n_total / ar_time,
                     "decode_ms_per_token": t_ar * 1e3, "prefill_seconds": prefill},
              "draft_decode_ms_per_token": {m: t * 1e3 for m, t in t_draft.items()},
              "rows": rows, "best": best,
              "machine": {"platform": jax.devices()[0].platform, "cpu": platform.processor() or
                          platform.machine(), "jax": jax.__version__}}
    _print(console, report)
    if json_path:
        atomic_write(json_path, json.dumps(report, indent=2))
    return report


def _print(console: Console, report: dict) -> None:
    ar = report["ar"]
    table = Table(title=f"{report['workload']} workload, T = {report['temperature']}, "
                        f"{report['prompts']} prompts × {report['tokens_per_prompt']} tokens, "
                        f"median of {report['repeats']}")
    for col in ("method", "γ", "accept rate", "α", "tok/round", "c", "r", "E", "pred decode",
                "predicted", "measured", "meas/pred"):
        table.add_column(col, justify="left" if col == "method" else "right")
    table.add_row("ar", "–", "–", "–", "1.00", "–", "1.00", "1.00", "1.00×", "1.00×", "1.00×", "–")
    for r in report["rows"]:
        table.add_row(r["method"], str(r["gamma"]), f"{r['acceptance_rate']:.2f}", f"{r['alpha']:.2f}",
                      f"{r['mean_acceptance_length']:.2f}", f"{r['c']:.3f}", f"{r['verify_over_ar']:.2f}",
                      f"{r['expected_tokens_per_round']:.2f}", f"{r['predicted_decode_speedup']:.2f}×",
                      f"{r['predicted_speedup']:.2f}×",
                      f"{r['measured_speedup']:.2f}×", f"{r['efficiency']:.2f}")
    console.print(table)
    console.print(f"autoregressive: {ar['tokens_per_second']:.0f} tokens/s end to end; decode step "
                  f"{ar['decode_ms_per_token']:.3f} ms ({1e3 / ar['decode_ms_per_token']:.0f} tokens/s)")
    for name, ms in report["draft_decode_ms_per_token"].items():
        console.print(f"{name} model alone: decode step {ms:.3f} ms ({1e3 / ms:.0f} tokens/s), "
                      f"c = {ms / ar['decode_ms_per_token']:.3f} of the target's")
    if report["best"]:
        b = report["best"]
        console.print(f"best: {b['method']} with γ = {b['gamma']}: {b['measured_speedup']:.2f}× "
                      f"measured, {b['predicted_speedup']:.2f}× predicted")
