"""How often SSD's speculation cache holds the outcome, on the shipped models: a script.

    python -m nanospec.measure.ssd_hits [--json runs/ssd_hits.json] [--prompts 16]
                                        [--copies 16] [--tokens 64]

For the facts workload, γ = 4, at T = 0 and T = 1, it runs SSD (ssd/loop.py) fused over a batch of
prompts (at T = 1 each prompt `--copies` times: a hit rate needs thousands of rounds to be
known to a percent) and reads the loop's counters: the hit rate (rounds whose drafts were ready in the
cache, over every round but each row's first, which has no cache yet), the draft acceptance
rate (accepted / drafted), the per-draft acceptance probability α̂ of lesson 08's i.i.d. model
(measure/bench.py `iid_acceptance`: accepted / (accepted + rejections); the rate understates
it, since the drafts after a rejection are never judged) and tokens per round. Four questions:

1. hit rate against the uniform fan-out F = 1..4, and β fitted to the miss model
   1 − p_hit(F) = m·F^(−β) (least squares on log miss against log F);
2. geometric against uniform fan-out at equal budgets (the geometric one uses the α̂ and β
   just measured);
3. Saguaro's C against hit rate and acceptance (F = 2, T = 1);
4. the α̂ (of the F = 1 run) and β that `ssd.fanout.SHIPPED_ALPHA_BETA` records, printed
   after table 1.

These are counts, not times: no clock is read, so the numbers are the same on any machine.
What this leaves out: time (measure/ssd_timeline.py), other workloads and γ.
"""

import argparse
import json
from dataclasses import replace

import jax
import numpy as np
from rich.console import Console

from nanospec import SHIPPED, compile_cache
from nanospec.cache import capacity
from nanospec.decode import Bundle, make_loop
from nanospec.fileio import atomic_write
from nanospec.generate import pad_prompts
from nanospec.measure.bench import iid_acceptance
from nanospec.measure.tables import table
from nanospec.measure.workloads import workload_prompts
from nanospec.sampling import SamplingParams
from nanospec.ssd.fanout import SSDOptions, geometric_fanout
from nanospec.trace import metrics

GAMMA = 4
TEMPERATURES = (0.0, 1.0)


def measure(bundle, ids, options: SSDOptions, temperature: float, tokens: int, seed: int = 0):
    """One fused SSD run over every prompt: {hit_rate (and its standard error, rounds taken
    as independent), acceptance_rate (accepted / drafted), alpha (the i.i.d. model's α̂,
    bench.iid_acceptance), tokens_per_round}."""
    cfg, _, params = bundle.models["target"]
    padded, lengths = pad_prompts(ids, cfg.n_ctx)
    loop, dparams = make_loop(bundle, "ssd", GAMMA, ssd=options)
    slots = capacity(cfg.n_ctx, padded.shape[1], tokens, loop.block)
    loop = replace(loop, eos_id=-1, capacity=slots)  # every row runs its full length
    state, stats = loop.run(
        params,
        dparams,
        padded,
        lengths,
        jax.random.key(seed),
        SamplingParams.make(temperature),
        tokens,
    )
    hist, generated, drafted = stats.counters(state)
    m = metrics(hist, generated, drafted)
    rounds, hit = sum(hist), stats.cached_rounds() / (sum(hist) - len(ids))
    return {
        "fanout": list(loop.fanout),
        "saguaro_c": options.saguaro_c,
        "temperature": temperature,
        "rounds": rounds,
        "rows": len(ids),
        "hit_rate": hit,
        "hit_rate_se": float(np.sqrt(hit * (1 - hit) / (rounds - len(ids)))),
        "acceptance_rate": m["acceptance_rate"],
        "alpha": iid_acceptance(hist),
        "tokens_per_round": m["tokens_per_target_call"],
    }


def fit_beta(fanouts: list[int], hit_rates: list[float]) -> float:
    """β of the miss model 1 − p_hit = m·F^(−β), by least squares on the logs.

    >>> round(fit_beta([1, 2, 4], [0.5, 0.75, 0.875]), 3)
    1.0
    """
    miss = np.maximum(1 - np.asarray(hit_rates), 1e-9)
    slope = np.polyfit(np.log(fanouts), np.log(miss), 1)[0]
    return float(-slope)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="runs/ssd_hits.json")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args(argv)
    compile_cache.enable()  # as the CLI does: a second run loads its programs
    console = Console()
    bundle = Bundle.load(SHIPPED, ("target", "draft"))
    ids = [bundle.tok.encode_prompt(p) for p in workload_prompts("facts", args.prompts)]
    done: dict = {}

    def run(options, t):  # greedy rows are deterministic: one copy of each prompt is enough
        key = (options, t)
        if key not in done:
            done[key] = measure(
                bundle, ids * (1 if t == 0 else args.copies), options, t, args.tokens
            )
        return done[key]

    pct = lambda x: f"{100 * x['hit_rate']:.1f} ± {200 * x['hit_rate_se']:.1f}%"
    report: dict = {
        "gamma": GAMMA,
        "prompts": args.prompts,
        "copies_at_t1": args.copies,
        "tokens": args.tokens,
        "workload": "facts",
    }

    uniform = {t: [run(SSDOptions(str(f)), t) for f in (1, 2, 3, 4)] for t in TEMPERATURES}
    beta = {t: fit_beta([1, 2, 3, 4], [x["hit_rate"] for x in uniform[t]]) for t in TEMPERATURES}
    rate = {t: uniform[t][0]["acceptance_rate"] for t in TEMPERATURES}
    alpha = {t: uniform[t][0]["alpha"] for t in TEMPERATURES}  # what the geometric fan-out reads
    table(
        f"1. hit rate (± 2 s.e.) against the uniform fan-out (γ = {GAMMA}: (γ+1)·F branches)",
        ["F", "branches"] + [f"hit rate T = {t:g}" for t in TEMPERATURES],
        [
            [f, 5 * f] + [pct(uniform[t][i]) for t in TEMPERATURES]
            for i, f in enumerate((1, 2, 3, 4))
        ],
    )
    console.print(
        "fitted miss model 1 − p_hit = m·F^(−β): "
        + ", ".join(f"β = {beta[t]:.2f} at T = {t:g}" for t in TEMPERATURES)
        + "; F = 1: α̂ (i.i.d. model) "
        + ", ".join(f"{alpha[t]:.3f} at T = {t:g}" for t in TEMPERATURES)
        + " (acceptance rate "
        + ", ".join(f"{rate[t]:.3f}" for t in TEMPERATURES)
        + ")"
    )

    rows, geometric = [], []
    for budget in (5, 10, 15):
        for t in TEMPERATURES:
            f = geometric_fanout(budget, alpha[t], beta[t], GAMMA)
            g = run(SSDOptions(",".join(map(str, f))), t)
            u = uniform[t][budget // 5 - 1]
            geometric.append(g)
            rows.append([budget, f"{t:g}", pct(u), str(tuple(f)), pct(g)])
    table(
        "2. geometric against uniform fan-out at equal budgets",
        ["budget", "T", "uniform hit", "geometric F_k", "geometric hit"],
        rows,
    )

    saguaro = [run(SSDOptions("2", c), 1.0) for c in (1.0, 0.8, 0.6, 0.4)]
    table(
        "3. Saguaro's C (F = 2, T = 1): more hits, fewer accepted drafts",
        ["C", "hit rate", "acceptance rate", "tokens per round"],
        [
            [x["saguaro_c"], pct(x), f"{x['acceptance_rate']:.3f}", f"{x['tokens_per_round']:.2f}"]
            for x in saguaro
        ],
    )

    report.update(
        uniform={f"T{t:g}": uniform[t] for t in TEMPERATURES},
        fitted_beta={f"T{t:g}": beta[t] for t in TEMPERATURES},
        acceptance_rate={f"T{t:g}": rate[t] for t in TEMPERATURES},
        alpha={f"T{t:g}": alpha[t] for t in TEMPERATURES},
        geometric=geometric,
        saguaro=saguaro,
    )
    atomic_write(args.json, json.dumps(report, indent=1))
    console.print(f"written: {args.json}")
    return report


if __name__ == "__main__":
    main()
