"""`nanospec bench`: speculative speedup, measured and predicted, side by side in one run.

For every γ it reports (the performance model: docs/design.md §6):

    α      per-draft acceptance probability on the workload (i.i.d. estimate from the loop's
           own counters; the draft acceptance rate, accepted / drafted, is reported beside it)
    c      T_draft / T_ar: per-drafted-token cost of the drafter over a target decode step,
           from its whole round (propose + commit) timed in place, back to back with the bare
           target pass it contains (round_probe), divided by γ: the median of 3 × repeats pairs
    r      T_verify(γ+1) / T_ar: one target pass over γ+1 tokens, over a one-token pass
    E      expected tokens per round, (1 − α^{γ+1}) / (1 − α) (with a fraction f of rounds that
           had no drafts — prompt lookup without a match — (1 − f)·E + f, and those rounds
           cost one target step: the decode-phase cost is (1 − f)(γ·c + r) + f)
    pred decode   E / (γ·c + r): the speedup of the decode phase alone
    predicted     the same model end to end: autoregressive time / (prefill + draft prefill +
                  rounds · (γ·T_draft + r·T_ar)), rounds = tokens / E — the measured runs
                  include each prompt's prefill, so the prediction must too
    measured      autoregressive time / speculative time for the same prompts and tokens,
                  taken pass by pass (both timed in the same pass), then the median ratio
    meas/pred     the loop's efficiency (overheads, host syncs, recompiles would show here)
    TTFT          time to first token per prompt (prefill, the drafter's too, and one round)
    TPOT ×        time per output token after the first, autoregressive over speculative: the
                  decode-phase speedup, measured (end to end also pays the prefill); paired
                  like `measured`, and flagged where it is out of line with it (latency_flags)
    τ/cost        mean acceptance length per unit of draft cost, τ / (γ·c): tokens a round
                  yields per target-step's worth of drafting (the draft's bang for its buck)
    extra         what the method adds beside the target: parameters (not the target's
                  embedding and output layer, which heads reuse) and memory (those in float32,
                  what a head derives from them at load, the drafter's per-row state)

Method: every program is compiled and warmed up first; then `repeats` passes time every method
on every workload prompt (batch 1, EOS disabled so each run decodes exactly `tokens` tokens,
every prompt padded to the workload's one bucket so each program compiles once), round-robin
so a noisy neighbour slows all methods alike. Times are medians; speedups are medians of ratios
taken within one pass, never ratios of separate medians. Per-token costs are differences of two
runs of one compiled loop ((T(N) − T(1)) / (N − 1)), so prefill and dispatch cancel out. All are
ratios from one run on one machine — never compare absolute times across runs. The decode step
is timed twice (decode probe, autoregressive TPOT): apart by over 10%, the report calls the run
noisy. A γ a method cannot run (Medusa and MTP draft one token per head) is skipped and said
so; a method left with none is refused.

What this file deliberately leaves out: asserting anything about time (tests never do).
"""

import json
import platform
import statistics

import jax
import jax.numpy as jnp
from rich.console import Console

from nanospec.errors import UserError
from nanospec.fileio import atomic_write
from nanospec.generate import _generate, pad_prompts
from nanospec.model import ModelConfig
from nanospec.measure.probes import (FORWARD_CALLS, decode_probe, extra_cost, forward_probe,
                             interleaved_samples, paired_latency, paired_median_differences,
                             round_probe)
from nanospec.sampling import SamplingParams
from nanospec.speculative import _fused, check_room
from nanospec.measure.tables import print_bench
from nanospec.trees.loop import _fused_tree, check_tree
from nanospec.trace import metrics
from nanospec.measure.workloads import workload_prompts


PAIRED_REPEATS = 3  # c's pairs are timed this many times as often as everything else
# A TPOT speedup above TPOT_SLOPE × end to end + TPOT_MARGIN, or a run that spent under
# MIN_DECODE_SHARE of its time after the first token, is flagged (see latency_flags).
TPOT_SLOPE, TPOT_MARGIN, MIN_DECODE_SHARE = 1.5, 0.5, 0.10


def iid_acceptance(hist: list[int], rejections: int | None = None) -> float:
    """The per-draft acceptance probability α of the i.i.d. model behind E[tokens per round].

    Each round is a run of accepts ended by one rejection (or by reaching γ), so the maximum
    likelihood estimate is accepted / (accepted + rejections). The reported "draft acceptance
    rate" (accepted / drafted) is lower: it also counts the drafts discarded after a rejection.
    `rejections` defaults to the rounds that did not accept all γ; a drafter that proposes
    fewer (prompt lookup with no match: none) passes the loop's own count.

    >>> iid_acceptance([1, 0, 1])   # γ = 2: one round rejected at once, one accepted both
    0.6666666666666666
    """
    gamma = len(hist) - 1
    accepted = sum(k * h for k, h in enumerate(hist))
    rejections = sum(hist) - hist[gamma] if rejections is None else rejections
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def expected_tokens(alpha: float, gamma: int) -> float:
    """E[tokens per round] = 1 + α + α² + … + α^γ."""
    return float(sum(alpha ** i for i in range(gamma + 1)))


def plan_runs(bundle, methods, gammas, trees: dict | None = None) -> tuple[list, list, list]:
    """(runs, tree_runs, skipped): the (method, γ) and (method, tree label) pairs to time, and
    what was left out and why — heads draft at most one token per head, prompt lookup grows no
    trees. A method left with none of the γ values is refused: silently dropping it would
    leave a table that looks complete."""
    runs, skipped = [], []
    drafters = {m: bundle.drafter(m)[0] for m in methods if m != "ar"}
    for m, drafter in drafters.items():
        most = getattr(drafter, "max_gamma", None)
        fit = [gm for gm in gammas if most is None or gm <= most]
        if not fit:
            raise UserError(f"{m} has {most} heads, so it drafts at most γ = {most} tokens per "
                            f"round; --gamma {','.join(map(str, gammas))} leaves it nothing to run.")
        if len(fit) < len(gammas):
            skipped.append({"method": m, "gammas": [gm for gm in gammas if gm not in fit],
                            "reason": f"{m} has {most} heads, so γ can be at most {most}"})
        runs += [(m, gm) for gm in fit]
    tree_runs = []
    for label, tree in (trees or {}).items():
        for m, drafter in drafters.items():
            most = getattr(drafter, "max_gamma", None)
            if not hasattr(drafter, "propose_tree"):
                skipped.append({"method": m, "tree": label,
                                "reason": f"{m} proposes a single continuation"})
            elif most is not None and tree.max_depth > most:
                skipped.append({"method": m, "tree": label, "reason": f"{m} has {most} heads, "
                                f"so a tree can be at most {most} deep"})
            else:
                tree_runs.append((m, label))
    return runs, tree_runs, skipped


def latency_flags(measured: float, tpot_speedup: float | None, decode_share: float) -> list[str]:
    """Why a row's TPOT speedup cannot be trusted beside its end-to-end one (none: []).

    TPOT × = end to end × (AR's share of time after the first token) / (speculation's share),
    so it may exceed the end-to-end speedup — speculation pays its draft's prefill up front —
    but not by much. Far above it, or with nearly all the run spent before the first token,
    TPOT rests on a small difference of two larger times, and timing noise decides it.

    >>> latency_flags(2.04, 54.45, 0.5), latency_flags(2.0, 2.6, 0.6), latency_flags(1.2, None, 0.0)
    (['tpot_inconsistent'], [], ['tpot_unmeasured', 'ttft_dominates'])
    """
    flags = []
    if tpot_speedup is None or tpot_speedup <= 0:
        flags.append("tpot_unmeasured")
    elif tpot_speedup > TPOT_SLOPE * measured + TPOT_MARGIN:
        flags.append("tpot_inconsistent")
    if decode_share < MIN_DECODE_SHARE:
        flags.append("ttft_dominates")
    return flags


def run_bench(bundle, methods=("ar", "draft"), gammas=(1, 2, 4, 6, 8), temperature: float = 0.0,
              workload: str = "facts", tokens: int = 64, repeats: int = 3, n_prompts: int = 8,
              seed: int = 0, json_path: str | None = None, console: Console | None = None,
              trees: dict | None = None, wide: bool | None = None) -> dict:
    """`trees` ({label: Tree}) adds a token-tree run (top-k siblings) for every method that
    grows trees; those rows report acceptance and measured speedup (no cost model). `wide`:
    print the single wide table (None: whenever it fits the console; see measure/tables.py)."""
    console = console or Console()
    tok = bundle.tok
    target = bundle.models["target"]
    cfg, g, p = target
    sp = SamplingParams.make(temperature)
    runs, tree_runs, skipped = plan_runs(bundle, methods, gammas, trees)
    # Every prompt is padded to the workload's one bucket, so each method compiles once (with a
    # bucket per prompt length, XLA's per-program memory maps overran Linux's limit: jax#27201).
    tokens_all, lengths_all = pad_prompts([tok.encode_prompt(t) for t in workload_prompts(workload, n_prompts)],
                                          cfg.n_ctx)
    prompts = [(tokens_all[i:i + 1], lengths_all[i:i + 1]) for i in range(len(lengths_all))]
    for _, gm in runs:
        for _, lengths in prompts:
            check_room(cfg, lengths, tokens, gm)
    for m, label in tree_runs:
        for _, lengths in prompts:
            check_tree(cfg, bundle.drafter(m)[0], lengths, tokens, trees[label])

    # Each program takes the number of tokens to generate (traced: 1 and `tokens` share one
    # compiled loop): with 1 it times the first token, prefill included.
    def ar_run(tokens_, lengths, key, n=tokens):
        return _generate(g, p, cfg, tokens_, lengths, key, sp, jnp.int32(n), -1)

    def spec_run(method, gamma):
        drafter, dparams = bundle.drafter(method)
        return lambda tk, ln, key, n=tokens: _fused(g, p, cfg, drafter, dparams, tk, ln, key, sp,
                                                    jnp.int32(n), -1, gamma)

    def tree_run(method, label):
        drafter, dparams = bundle.drafter(method)
        return lambda tk, ln, key, n=tokens: _fused_tree(g, p, cfg, drafter, dparams, tk, ln, key,
                                                         sp, jnp.int32(n), -1, trees[label], True)

    programs = {("ar", 0): ar_run}
    programs.update({run: spec_run(*run) for run in runs})
    programs.update({run: tree_run(*run) for run in tree_runs})
    hists: dict = {}
    counts: dict = {}  # (drafted, rejected rounds) per run
    with console.status("compiling, warming up, counting acceptances…"):
        for (m, gm), fn in programs.items():
            for i, (tk, ln) in enumerate(prompts):
                state = jax.block_until_ready(fn(tk, ln, jax.random.key(seed + i)))
                if m != "ar":
                    h = state.hist.sum(0).tolist()
                    hists[(m, gm)] = [a + b for a, b in zip(hists.get((m, gm), [0] * len(h)), h)]
                    d, r = counts.get((m, gm), (0, 0))
                    counts[(m, gm)] = (d + int(state.drafted.sum()), r + int(state.rejected.sum()))
    # Everything that is timed goes into one round-robin pool: the workload runs, the decode
    # loops behind T_ar (and the draft model's prefill), the drafting rounds behind c, and the
    # forward passes behind r.
    probes = {k: (lambda fn=fn: [fn(tk, ln, jax.random.key(seed + i)) for i, (tk, ln) in enumerate(prompts)])
              for k, fn in programs.items()}
    probes.update({("first", *k): (lambda fn=fn: [fn(tk, ln, jax.random.key(seed + i), 1)
                                                  for i, (tk, ln) in enumerate(prompts)])
                   for k, fn in programs.items()})
    probe_prompt = tok.encode_prompt(workload_prompts(workload, 1)[0])
    models = {name: m for name, m in bundle.models.items() if isinstance(m[0], ModelConfig)}
    for name, model in models.items():
        for n in (1, tokens):
            probes[("decode", name, n)] = decode_probe(model, probe_prompt, n)
    forwards = {block: forward_probe(target, block) for block in {1} | {gm + 1 for _, gm in runs}}
    probes.update({("forward", block): fn for block, fn in forwards.items()})
    # c is a small difference of two larger times: each drafting round is timed right beside
    # the bare target pass it contains, and (being cheap) more often than the runs.
    pairs = {run: (round_probe(target, *bundle.drafter(run[0]), probe_prompt, run[1], sp),
                   forwards[run[1] + 1]) for run in runs}
    with console.status("timing…"):
        samples = interleaved_samples(probes, repeats)
        drafting = paired_median_differences(pairs, PAIRED_REPEATS * repeats)
    med = {k: statistics.median(v) for k, v in samples.items()}
    step = {name: max(med[("decode", name, tokens)] - med[("decode", name, 1)], 1e-9) / (tokens - 1)
            for name in models}  # seconds per decode step: prefill cancels out
    t_ar = step["target"]
    fwd1 = med[("forward", 1)]
    times = {k: med[k] for k in programs}
    n_total = tokens * len(prompts)

    def latency(k) -> dict:  # paired with the autoregressive runs of the same passes
        return paired_latency(samples[k], samples[("first", *k)], samples[("ar", 0)],
                              samples[("first", "ar", 0)], len(prompts), n_total - len(prompts))

    def timed(k) -> dict:
        lat = latency(k)
        return {"seconds": times[k], **lat,
                "flags": latency_flags(lat["measured_speedup"], lat["tpot_speedup"], lat["decode_share"])}

    ar_time = times[("ar", 0)]
    ar_latency = {key: latency(("ar", 0))[key] for key in ("ttft_ms", "tpot_ms")}
    # What the autoregressive runs spent outside decode steps (prefill, dispatch): speculation
    # pays it too, plus the draft model's own prefill, so an end-to-end prediction must include it.
    prefill_s = max(ar_time - n_total * t_ar, 0.0)
    draft_prefill = {name: len(prompts) * max(med[("decode", name, 1)] - step[name], 0.0)
                     for name in models if name != "target"}
    rows = []
    for m, gm in runs:
        mt = metrics(hists[(m, gm)], generated=n_total, drafted=counts[(m, gm)][0])
        alpha = iid_acceptance(hists[(m, gm)], counts[(m, gm)][1])
        # seconds of drafting per round: rounds with the target pass, minus the pass alone
        draft_round = max(drafting[(m, gm)], 0.0) / FORWARD_CALLS
        c = draft_round / (gm * t_ar)
        r = med[("forward", gm + 1)] / fwd1
        # Rounds without drafts (prompt lookup found no match) are one-token decode steps: one
        # token for one T_ar. Its drafts come all or nothing, so drafted / γ rounds had them.
        empty = 1.0 - counts[(m, gm)][0] / gm / max(mt["rounds"], 1)  # fraction of rounds
        e = (1 - empty) * expected_tokens(alpha, gm) + empty
        round_cost = (1 - empty) * (gm * c + r) + empty  # in target steps
        predicted_time = prefill_s + draft_prefill.get(m, 0.0) + n_total / e * round_cost * t_ar
        pred = ar_time / predicted_time
        row = timed((m, gm))
        rows.append({"method": m, "gamma": gm, "alpha": alpha,
                     "acceptance_rate": mt["acceptance_rate"],
                     "mean_acceptance_length": mt["mean_acceptance_length"], "c": c,
                     # None when drafting costs less than the timing noise (prompt lookup)
                     "tau_per_draft_cost": mt["mean_acceptance_length"] / (gm * c) if c > 0 else None,
                     "verify_over_ar": r, "expected_tokens_per_round": e,
                     "rounds_without_drafts": empty, "predicted_decode_speedup": e / round_cost,
                     "predicted_speedup": pred, **row, "efficiency": row["measured_speedup"] / pred,
                     **extra_cost(bundle, m, gm)})
    for m, label in tree_runs:
        mt = metrics(hists[(m, label)], generated=n_total)
        rows.append({"method": m, "gamma": f"tree {label}", "tree_nodes": trees[label].size,
                     "alpha": iid_acceptance(hists[(m, label)]),
                     "acceptance_rate": mt["acceptance_rate"],
                     "mean_acceptance_length": mt["mean_acceptance_length"], **timed((m, label)),
                     **extra_cost(bundle, m, trees[label].max_depth)})
    best = max(rows, key=lambda x: x["measured_speedup"]) if rows else None
    report = {"benchmark": "speculative", "workload": workload, "prompts": len(prompts),
              "tokens_per_prompt": tokens, "temperature": temperature, "repeats": repeats,
              "ar": {"seconds": ar_time, "tokens_per_second": n_total / ar_time,
                     "decode_ms_per_token": t_ar * 1e3, "prefill_seconds": prefill_s, **ar_latency,
                     # one decode step, timed twice (the probe, and the real runs' TPOT): apart
                     # by more than tables.NOISY, the machine's speed changed during the run
                     "tpot_over_decode_probe": ar_latency["tpot_ms"] / (t_ar * 1e3)},
              "draft_model_decode_ms_per_token": {name: step[name] * 1e3 for name in draft_prefill},
              "rows": rows, "best": best, "skipped": skipped,
              "machine": {"platform": jax.devices()[0].platform, "cpu": platform.processor() or
                          platform.machine(), "jax": jax.__version__}}
    print_bench(console, report, wide)
    if json_path:
        atomic_write(json_path, json.dumps(report, indent=2))
    # subtle: drop every program this run compiled. XLA:CPU maps memory for each one, and a
    # process benchmarking several workloads (--workload all) otherwise hits Linux's limit on
    # mappings and crashes inside the compiler (jax-ml/jax#27201; see tests/conftest.py).
    jax.clear_caches()
    return report
