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

Then the roofline (measure/roofline.py), timed in the same pool, and last, one paragraph that
explains the fastest chain's speedup from this run's numbers (measure/explain.py).

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

This file plans the runs, holds the performance model and assembles the report; measure/timing.py
runs and times the programs, measure/tables.py prints the report.

What this file deliberately leaves out: asserting anything about time (tests never do).
"""

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
from rich.console import Console

from nanospec.errors import UserError
from nanospec.fileio import atomic_write
from nanospec.generate import pad_prompts
from nanospec.machine import described
from nanospec.measure.explain import explain
from nanospec.measure.probes import FORWARD_CALLS, extra_cost
from nanospec.measure.roofline import BANDWIDTH_MB
from nanospec.measure.tables import print_bench
from nanospec.measure.timing import Costs, full_models, probe_pool, time_pool, warm_up
from nanospec.measure.workloads import workload_prompts
from nanospec.methods import METHODS
from nanospec.sampling import SamplingParams
from nanospec.trace import metrics
from nanospec.trees.grow import grows_trees

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
    return float(sum(alpha**i for i in range(gamma + 1)))


def plan_runs(bundle, methods, gammas, trees: dict | None = None) -> tuple[list, list, list]:
    """(runs, tree_runs, skipped): the (method, γ) and (method, tree label) pairs to time, and
    what was left out and why — heads draft at most one token per head, prompt lookup and SSD
    grow no trees. A method left with none of the γ values is refused: silently dropping it would
    leave a table that looks complete."""
    runs, skipped = [], []
    drafters = {m: bundle.drafter(m)[0] for m in methods if METHODS[m].drafter}
    for m, drafter in drafters.items():
        most, _ = drafter_limits(drafter)
        fit = [gm for gm in gammas if most is None or gm <= most]
        if not fit:
            raise UserError(
                f"{m} has {most} heads, so it drafts at most γ = {most} tokens per "
                f"round; --gamma {','.join(map(str, gammas))} leaves it nothing to run."
            )
        if len(fit) < len(gammas):
            skipped.append(
                {
                    "method": m,
                    "gammas": [gm for gm in gammas if gm not in fit],
                    "reason": f"{m} has {most} heads, so γ can be at most {most}",
                }
            )
        runs += [(m, gm) for gm in fit]
    tree_runs = []
    for label, tree in (trees or {}).items():
        for m, drafter in drafters.items():
            most, grows_trees = drafter_limits(drafter)
            if METHODS[m].refuses_tree:
                skipped.append({"method": m, "tree": label, "reason": METHODS[m].refuses_tree})
            elif not grows_trees:
                skipped.append(
                    {"method": m, "tree": label, "reason": f"{m} proposes a single continuation"}
                )
            elif most is not None and tree.max_depth > most:
                skipped.append(
                    {
                        "method": m,
                        "tree": label,
                        "reason": f"{m} has {most} heads, so a tree can be at most {most} deep",
                    }
                )
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


def run_bench(
    bundle,
    methods=("ar", "draft"),
    gammas=(1, 2, 4, 6, 8),
    temperature: float = 0.0,
    workload: str = "facts",
    tokens: int = 64,
    repeats: int = 3,
    n_prompts: int = 8,
    seed: int = 0,
    json_path: str | None = None,
    console: Console | None = None,
    trees: dict | None = None,
    wide: bool | None = None,
    roofline_mb: float = BANDWIDTH_MB,
) -> dict:
    """`trees` ({label: Tree}) adds a token-tree run (top-k siblings) for every method that
    grows trees; those rows report acceptance and measured speedup (no cost model). `wide`:
    print the single wide table (None: whenever it fits the console; see measure/tables.py).
    `roofline_mb`: the roofline's large buffer in MiB (measure/roofline.py)."""
    console = console or Console()
    sp = SamplingParams.make(temperature)
    runs, tree_runs, skipped = plan_runs(bundle, methods, gammas, trees)
    prompts = bench_prompts(bundle, workload, n_prompts)
    check_runnable(bundle, prompts, tokens, runs, [(m, trees[label]) for m, label in tree_runs])
    with console.status("compiling…"):
        programs = {("ar", 0): program_for(bundle, "ar", sp, tokens, prompt=prompts[0])}
        programs.update(
            {
                (m, gm): program_for(bundle, m, sp, tokens, gamma=gm, prompt=prompts[0])
                for m, gm in runs
            }
        )
        programs.update(
            {
                (m, label): program_for(bundle, m, sp, tokens, tree=trees[label], prompt=prompts[0])
                for m, label in tree_runs
            }
        )
    hists, counts = warm_up(programs, prompts, seed, console)
    probes, pairs, work = probe_pool(
        bundle, programs, prompts, runs, sp, tokens, workload, seed, roofline_mb
    )
    samples, drafting = time_pool(probes, pairs, repeats, console)
    costs = Costs.from_samples(samples, drafting, list(full_models(bundle)), tokens, len(prompts))
    roof = costs.roofline(bundle.models["target"][0], work, roofline_mb)
    rows = [gamma_row(bundle, costs, run, hists[run], counts[run]) for run in runs]
    rows += [
        tree_row(bundle, costs, (m, label), trees[label], hists[(m, label)])
        for m, label in tree_runs
    ]
    report = assemble_report(
        costs,
        rows,
        skipped,
        workload=workload,
        tokens=tokens,
        temperature=temperature,
        repeats=repeats,
        roofline=roof,
    )
    print_bench(console, report, wide)
    if json_path:
        atomic_write(json_path, json.dumps(report, indent=2))
    # subtle: drop every program this run compiled. XLA:CPU maps memory for each one, and a
    # process benchmarking several workloads (--workload all) otherwise hits Linux's limit on
    # mappings and crashes inside the compiler (jax-ml/jax#27201; see tests/conftest.py).
    jax.clear_caches()
    return report


def bench_prompts(bundle, workload: str, n_prompts: int) -> list[tuple]:
    """The workload's prompts as (tokens, lengths) batches of one, all padded to one bucket."""
    # Every prompt is padded to the workload's one bucket, so each method compiles once (with a
    # bucket per prompt length, XLA's per-program memory maps overran Linux's limit: jax#27201).
    tokens_all, lengths_all = pad_prompts(
        [bundle.tok.encode_prompt(t) for t in workload_prompts(workload, n_prompts)],
        bundle.models["target"][0].n_ctx,
    )
    return [(tokens_all[i : i + 1], lengths_all[i : i + 1]) for i in range(len(lengths_all))]


# The decoding loops' API, as bench uses it: every call into the loops and every question put
# to a drafter is in the three functions below.


def drafter_limits(drafter) -> tuple[int | None, bool]:
    """(the most tokens it drafts per round, None for no limit; whether it grows token trees)."""
    return drafter.max_gamma, grows_trees(drafter)


def check_runnable(bundle, prompts: list, tokens: int, runs: list, tree_runs: list) -> None:
    """Refuse (UserError), before anything compiles, a run some prompt leaves no room for:
    `runs` are (method, γ), `tree_runs` (method, Tree)."""
    from nanospec.decode import make_loop

    loops = [make_loop(bundle, m, gamma=gm)[0] for m, gm in runs]
    loops += [make_loop(bundle, m, tree=tree)[0] for m, tree in tree_runs]
    for loop in loops:
        for _, lengths in prompts:
            loop.check(lengths, tokens)


def program_for(
    bundle, method: str, sp, tokens: int, gamma: int | None = None, tree=None, prompt=None
):
    """One run's compiled loop as fn(tokens, lengths, key, n=tokens) -> (state, stats): the
    autoregressive one for "ar", else speculative with `gamma` drafts or with `tree`, compiled
    for `prompt`'s shapes (tokens, lengths). EOS is off (-1); n is traced, so 1 (the first
    token, prefill included) and `tokens` share one program."""
    from nanospec.decode import make_loop

    loop, dparams = make_loop(bundle, method, gamma=gamma or 1, tree=tree)
    loop = replace(loop, eos_id=-1)
    params = bundle.models["target"][2]
    program, _ = loop.program(params, dparams, *prompt, jax.random.key(0), sp)
    return lambda tk, ln, key, n=tokens: program(
        params=params, dparams=dparams, tokens=tk, lengths=ln, key=key, sp=sp, max_new=jnp.int32(n)
    )


def timed(costs: Costs, k) -> dict:
    """Run k's median seconds and latency beside the autoregressive runs, and why not to trust them."""
    lat = costs.latency(k)
    return {
        "seconds": costs.med[k],
        **lat,
        "flags": latency_flags(lat["measured_speedup"], lat["tpot_speedup"], lat["decode_share"]),
    }


def gamma_row(bundle, costs: Costs, run: tuple, hist: list, count: tuple) -> dict:
    """One (method, γ) row: acceptance, the performance model's terms and prediction, the
    measured speedup. `count` is the run's (drafted, rejected rounds)."""
    m, gm = run
    mt = metrics(hist, generated=costs.n_total, drafted=count[0])
    alpha = iid_acceptance(hist, count[1])
    # seconds of drafting per round: rounds with the target pass, minus the pass alone
    draft_round = max(costs.drafting[run], 0.0) / FORWARD_CALLS
    c = draft_round / (gm * costs.t_ar)
    r = costs.med[("forward", gm + 1)] / costs.med[("forward", 1)]
    # Rounds without drafts (prompt lookup found no match) are one-token decode steps: one
    # token for one T_ar. Its drafts come all or nothing, so drafted / γ rounds had them.
    empty = 1.0 - count[0] / gm / max(mt["rounds"], 1)  # fraction of rounds
    e = (1 - empty) * expected_tokens(alpha, gm) + empty
    round_cost = (1 - empty) * (gm * c + r) + empty  # in target steps
    predicted_time = (
        costs.prefill_s
        + costs.draft_prefill.get(m, 0.0)
        + costs.n_total / e * round_cost * costs.t_ar
    )
    pred = costs.ar_time / predicted_time
    row = timed(costs, run)
    return {
        "method": m,
        "gamma": gm,
        "alpha": alpha,
        "acceptance_rate": mt["acceptance_rate"],
        "mean_acceptance_length": mt["mean_acceptance_length"],
        "c": c,
        # None when drafting costs less than the timing noise (prompt lookup)
        "tau_per_draft_cost": mt["mean_acceptance_length"] / (gm * c) if c > 0 else None,
        "verify_over_ar": r,
        "expected_tokens_per_round": e,
        "rounds_without_drafts": empty,
        "predicted_decode_speedup": e / round_cost,
        "predicted_speedup": pred,
        **row,
        "efficiency": row["measured_speedup"] / pred,
        **extra_cost(bundle, m, gm),
    }


def tree_row(bundle, costs: Costs, run: tuple, tree, hist: list) -> dict:
    """One (method, tree) row: acceptance and the measured speedup (no cost model for trees)."""
    m, label = run
    mt = metrics(hist, generated=costs.n_total)
    return {
        "method": m,
        "gamma": f"tree {label}",
        "tree_nodes": tree.size,
        "alpha": iid_acceptance(hist),
        "acceptance_rate": mt["acceptance_rate"],
        "mean_acceptance_length": mt["mean_acceptance_length"],
        **timed(costs, run),
        **extra_cost(bundle, m, tree.max_depth),
    }


def assemble_report(
    costs: Costs,
    rows: list,
    skipped: list,
    *,
    workload: str,
    tokens: int,
    temperature: float,
    repeats: int,
    roofline: dict | None = None,
) -> dict:
    """The JSON report: the settings, the autoregressive baseline, every row, the best one,
    the machine and its roofline, and the paragraph that explains the best speedup."""
    ar_latency = {key: costs.latency(("ar", 0))[key] for key in ("ttft_ms", "tpot_ms")}
    best = max(rows, key=lambda x: x["measured_speedup"]) if rows else None
    n_total, t_ar, ar_time = costs.n_total, costs.t_ar, costs.ar_time
    report = {
        "benchmark": "speculative",
        "workload": workload,
        "prompts": costs.n_prompts,
        "tokens_per_prompt": tokens,
        "temperature": temperature,
        "repeats": repeats,
        "ar": {
            "seconds": ar_time,
            "tokens_per_second": n_total / ar_time,
            "decode_ms_per_token": t_ar * 1e3,
            "prefill_seconds": costs.prefill_s,
            **ar_latency,
            # one decode step, timed twice (the probe, and the real runs' TPOT): apart
            # by more than tables.NOISY, the machine's speed changed during the run
            "tpot_over_decode_probe": ar_latency["tpot_ms"] / (t_ar * 1e3),
        },
        "draft_model_decode_ms_per_token": {
            name: costs.step[name] * 1e3 for name in costs.draft_prefill
        },
        "rows": rows,
        "best": best,
        "skipped": skipped,
        "machine": described(),
        "roofline": roofline,
    }
    return {**report, "explanation": explain(report)}
