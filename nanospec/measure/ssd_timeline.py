"""What SSD's overlap is worth: its time per token, predicted and measured. A script.

It measures SSD's costs, predicts its time per token for separate hardware, and measures
AR / SD / SSD side by side with two JAX devices.

    python -m nanospec.measure.ssd_timeline [--json runs/ssd_timeline.json] [--prompts 4]
                                            [--tokens 64] [--repeats 3] [--fanouts 1,2]

It sets `XLA_FLAGS=--xla_force_host_platform_device_count=2` before JAX starts, so on a CPU
machine there are two devices; on two GPUs it uses them as they are. For the facts workload,
γ = 4 and 8, batch 1 (latency), at T = 0 and T = 1:

1. **Costs**, each step of a round run PROBE_CALLS times inside one compiled loop (`probe`:
   no host round trip, each call's input made to depend on the last so nothing is hoisted):
   the target's verify and commit T_v, the cache build T_c (B·ΣF branches), the draft step
   on a hit (a lookup, T_h) and on a miss (the neural backup: γ draft-model steps, T_b —
   exactly ordinary speculation's drafting); an AR step T_ar from the fused AR run. From timed
   SSD runs (`run_two_devices(..., timed=True)`) the hit rate p and the tokens per round
   after a hit (E_hit) and after a miss (E_miss).
2. **The timeline model** (the paper's Theorem 7, in seconds): on hardware of its own the
   cache build runs during the verify, so

       SSD  s/token = [p·(T_h + max(T_v, T_c)) + (1 − p)·(T_b + max(T_v, T_c))]
                      / [p·E_hit + (1 − p)·E_miss]
       SD   s/token = (T_b + T_v) / E_SD          AR  s/token = T_ar

   (Theorem 7 divides by T_v and writes a hit as max(1, T_p) and a miss as 1 + T_b: the same
   when the lookup is free and the build fits in the verify.) With no overlap — one device —
   the same costs predict SSD sequential: (T_draft + T_v + T_c) per round; that one can be
   checked here. Two bounds read off the costs: SSD can beat SD by at most (T_v + T_b)/T_v
   (every round a hit, the build hidden), and on a CPU the build's B·ΣF branches cost about
   ΣF times one branch, where on an accelerator a small batch costs about what one row does
   — so the table adds SSD predicted with a build that costs one draft round (T_c = T_b).
3. **Measured**, every run timed round-robin with the others (the machine is shared: ratios
   are taken within a repeat), whole generations (prefill included): AR and SD fused
   (`Loop.run`), SSD fused on one device, and SSD's two-device driver (ssd/devices.py) with
   the target on device 0 and the drafter on device 1 — and on device 0 alone, to separate
   the driver's own cost (a host round trip per round) from the overlap.

On a machine with few cores, two CPU "devices" share the same cores, so the build cannot run
*beside* the verify for free: the measured two-device time says how much overlap the cores
allow, the prediction what separate hardware would give.
"""

import os

if __name__ == "__main__":  # before JAX starts: two CPU devices (a no-op on GPUs)
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()

import argparse
import json
import statistics
import time
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
from rich.console import Console

from nanospec import SHIPPED, compile_cache
from nanospec.cache import capacity, rollback
from nanospec.decode import Bundle, make_loop
from nanospec.fileio import atomic_write
from nanospec.generate import pad_prompts
from nanospec.measure.probes import interleaved_samples
from nanospec.measure.tables import table
from nanospec.measure.workloads import workload_prompts
from nanospec.sampling import SamplingParams
from nanospec.ssd.devices import run_two_devices
from nanospec.ssd.fanout import SSDOptions
from nanospec.ssd.loop import SSDSpeculator

TEMPERATURES = (0.0, 1.0)


def predict(c: dict) -> dict:
    """Seconds per token from measured costs `c` (the docstring's formulas).

    >>> c = dict(T_v=1.0, T_c=0.5, T_h=0.0, T_b=0.5, T_ar=0.5, p=1.0, E_hit=3.0, E_miss=3.0,
    ...          E_sd=3.0)
    >>> {k: round(v, 3) for k, v in predict(c).items()}  # doctest: +NORMALIZE_WHITESPACE
    {'ar': 0.5, 'sd': 0.5, 'ssd_parallel': 0.333, 'ssd_sequential': 0.5,
     'ssd_parallel_build_as_one_round': 0.333}
    """
    p, tokens = c["p"], c["p"] * c["E_hit"] + (1 - c["p"]) * c["E_miss"]
    draft = p * c["T_h"] + (1 - p) * c["T_b"]
    parallel = lambda build: (draft + max(c["T_v"], build)) / tokens
    return {
        "ar": c["T_ar"],
        "sd": (c["T_b"] + c["T_v"]) / c["E_sd"],
        "ssd_parallel": parallel(c["T_c"]),
        "ssd_sequential": (draft + c["T_v"] + c["T_c"]) / tokens,
        "ssd_parallel_build_as_one_round": parallel(c["T_b"]),
    }


PROBE_CALLS = 16


def probe(spec: SSDSpeculator, params, dparams, tokens, lengths, key, sp, max_new: int):
    """{"T_v", "T_c", "T_h", "T_b": zero-argument functions}, each running one step of an SSD
    round PROBE_CALLS times in one compiled loop, from the state after one real round (so the
    cache is full). Each call's drafts (for the draft step: the cache's keys on a hit, the last
    committed token on a miss) are shifted by the call's index: the inputs differ, so XLA
    cannot hoist the work out of the loop, and a pass costs the same whichever tokens it reads."""
    # Jitted, not run op by op: each operation would be a program of its own to compile.
    state = jax.jit(spec.prefill)(params, dparams, tokens, lengths, key)
    state = jax.jit(spec.step)(params, dparams, state, sp, max_new)[0]
    drafted, after = jax.jit(spec.draft)(dparams, state, sp)
    V, rows = spec.cfg.vocab_size, jnp.arange(tokens.shape[0])
    shifted = lambda x, i: (x + i) % V

    def repeat(step):
        """step(..., i) -> (a number, the target's cache, the draft's cache): both caches are
        carried, so each call writes in place as in the real loop (a cache left loop-invariant
        would be copied whole at every call)."""

        @jax.jit
        def loop(params, dparams, after, drafted, sp):
            def body(i, carry):
                acc, cache, dcache = carry
                s = after._replace(cache=cache, dstate=after.dstate._replace(draft=dcache))
                x, cache, dcache = step(params, dparams, s, drafted, sp, i)
                return acc + x, rollback(cache, after.cache.length), dcache

            carry = (jnp.float32(0), after.cache, after.dstate.draft)
            return jax.lax.fori_loop(0, PROBE_CALLS, body, carry)[0]

        return lambda: loop(params, dparams, after, drafted, sp)

    def verify(params, dparams, after, drafted, sp, i):
        d = drafted._replace(drafts=shifted(drafted.drafts, i))
        new, step = spec.judge_and_commit(params, dparams, after, d, sp, max_new)
        return jnp.sum(new.length) + jnp.sum(step.verdict.token), new.cache, after.dstate.draft

    def build(params, dparams, after, drafted, sp, i):
        d = drafted._replace(drafts=shifted(drafted.drafts, i))
        c = spec.proposer.build(dparams, after, d, sp)
        return jnp.sum(c.drafts), after.cache, c.draft

    def draft_step(hit: bool):
        def run(params, dparams, after, drafted, sp, i):
            c = state.dstate._replace(draft=after.dstate.draft)  # the cache before this round
            s = state
            if hit:  # the outcome is branch 0's key; every key shifted alike
                t = shifted(c.t, i)
                c = c._replace(t=t, outcome=jnp.stack([spec.branch_k[0] + 0 * t[:, 0], t[:, 0]], 1))
            else:  # no outcome is cached; the backup reads a shifted last token
                last = s.length - 1
                s = s._replace(seq=s.seq.at[rows, last].set(shifted(s.seq[rows, last], i)))
                c = c._replace(outcome=jnp.full_like(c.outcome, -1))
            d, out = spec.draft(dparams, s._replace(dstate=c), sp)
            return jnp.sum(d.drafts) + jnp.sum(d.q[..., 0]), after.cache, out.dstate.draft

        return run

    return {
        "T_v": repeat(verify),
        "T_c": repeat(build),
        "T_h": repeat(draft_step(True)),
        "T_b": repeat(draft_step(False)),
    }


def probe_costs(probes: dict, repeats: int) -> dict:
    """Seconds per call of each probe: the median over `repeats` round-robin passes."""
    samples = interleaved_samples(probes, repeats)
    return {k: statistics.median(v) / PROBE_CALLS for k, v in samples.items()}


def hits_from_rounds(clocks: list) -> dict:
    """The hit rate and tokens per round after a hit and after a miss, from timed SSD runs
    (ssd_devices.Timed, one per run); each run's first round (no cache yet) is left out."""
    pick = lambda f: [x for c in clocks for i, x in enumerate(f(c)) if i > 0]
    hit, tokens = pick(lambda c: c.all_hit), pick(lambda c: c.tokens)
    after = lambda h: [t for t, x in zip(tokens, hit) if x == h]
    return {
        "p": float(np.mean(hit)),
        "E_hit": float(np.mean(after(True) or [0])),
        "E_miss": float(np.mean(after(False) or [0])),
        "rounds": len(hit),
    }


def time_runs(once, names: list[str], n_prompts: int, repeats: int, tokens: int):
    """({run: median seconds per token}, SD's rounds per generation): every run on every
    prompt, round-robin, so each sees the machine as the others do; compiled first."""
    for name in names:
        once(name, 0, 0)
    seconds: dict = {name: [] for name in names}
    sd_rounds = []
    for rep in range(repeats):
        for i in range(n_prompts):
            for name in names:
                sec, (state, stats, *_) = once(name, i, 100 * rep + i)
                seconds[name].append(sec)
                if name == "sd":
                    sd_rounds.append(int(np.sum(stats.hist)))
    return {name: statistics.median(x) / tokens for name, x in seconds.items()}, sd_rounds


def measure_cell(
    bundle,
    ids: list,
    gamma: int,
    t: float,
    fanouts: list[int],
    tokens: int,
    repeats: int,
    pair,
    console: Console,
) -> list[dict]:
    """Every run and probe at one γ and temperature: one report cell per fan-out."""
    cfg, _, params = bundle.models["target"]
    padded, lengths = pad_prompts(ids, cfg.n_ctx)  # one bucket: one program per loop
    sp = SamplingParams.make(t)

    def fused(method, f=1):
        loop, dparams = make_loop(bundle, method, gamma, ssd=SSDOptions(str(f)))
        slots = capacity(cfg.n_ctx, padded.shape[1], tokens, loop.block)
        return replace(loop, eos_id=-1, capacity=slots), dparams  # every run is full length

    loops = {
        "ar": fused("ar"),
        "sd": fused("draft"),
        **{f"ssd{f}": fused("ssd", f) for f in fanouts},
    }
    runs = {"ar": None, "sd": None}  # name -> None (fused) or the driver's two devices
    for f in fanouts:
        runs.update(
            {
                f"ssd{f} fused": None,
                f"ssd{f} two devices": pair,
                f"ssd{f} driver, one device": (pair[0], pair[0]),
            }
        )

    def once(name, i, seed, timed=False):
        row = (padded[i : i + 1], lengths[i : i + 1], jax.random.key(seed))
        loop, dparams = loops[name.split()[0]]
        t0 = time.perf_counter()
        if runs[name] is None:
            out = jax.block_until_ready(loop.run(params, dparams, *row, sp, tokens))
        else:
            out = run_two_devices(loop, params, dparams, *row, sp, tokens, runs[name], timed)
            jax.block_until_ready(out[0].seq)
        return time.perf_counter() - t0, out

    with console.status(f"γ = {gamma}, T = {t:g}: timing AR, SD and SSD…"):
        per_token, sd_rounds = time_runs(once, list(runs), len(ids), repeats, tokens)
    cells = []
    for f in fanouts:
        loop, dparams = loops[f"ssd{f}"]
        with console.status(f"γ = {gamma}, T = {t:g}, F = {f}: timing each step of a round…"):
            clocks = [
                once(f"ssd{f} two devices", i, 100 * rep + i, timed=True)[1][2]
                for rep in range(repeats)
                for i in range(len(ids))
            ]
            c = probe_costs(
                probe(
                    loop, params, dparams, padded[:1], lengths[:1], jax.random.key(1), sp, tokens
                ),
                5 * repeats,
            )
        c.update(
            hits_from_rounds(clocks), T_ar=per_token["ar"], E_sd=tokens / float(np.mean(sd_rounds))
        )
        cells.append(
            {
                "gamma": gamma,
                "temperature": t,
                "fanout": f,
                "branches": (gamma + 1) * f,
                "costs": c,
                "predicted_s_per_token": predict(c),
                "measured_s_per_token": {
                    "ar": per_token["ar"],
                    "sd": per_token["sd"],
                    "ssd_fused": per_token[f"ssd{f} fused"],
                    "ssd_two_devices": per_token[f"ssd{f} two devices"],
                    "ssd_driver_one_device": per_token[f"ssd{f} driver, one device"],
                },
            }
        )
        show(console, cells[-1])
    return cells


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="runs/ssd_timeline.json")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gammas", default="4,8", help="draft lengths γ to run, e.g. 4,8")
    ap.add_argument("--fanouts", default="1,2", help="uniform fan-outs F to run, e.g. 1,2")
    args = ap.parse_args(argv)
    compile_cache.enable()  # as the CLI does: a second run loads its programs
    console = Console()
    devices = jax.devices()
    if len(devices) < 2:
        console.print("One JAX device only: the two-device rows run both sides on it.")
    pair = (devices[0], devices[min(1, len(devices) - 1)])
    bundle = Bundle.load(SHIPPED, ("target", "draft"))
    ids = [bundle.tok.encode_prompt(p) for p in workload_prompts("facts", args.prompts)]
    fanouts = [int(f) for f in args.fanouts.split(",")]
    report: dict = {
        "prompts": args.prompts,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "workload": "facts",
        "batch": 1,
        "devices": [str(d) for d in pair],
        "cells": [],
    }
    for gamma in [int(g) for g in args.gammas.split(",")]:
        for t in TEMPERATURES:
            report["cells"] += measure_cell(
                bundle, ids, gamma, t, fanouts, args.tokens, args.repeats, pair, console
            )
    atomic_write(args.json, json.dumps(report, indent=1))
    console.print(f"written: {args.json}")
    return report


def show(console: Console, cell: dict) -> None:
    c, pred, meas = cell["costs"], cell["predicted_s_per_token"], cell["measured_s_per_token"]
    f, t, g = cell["fanout"], cell["temperature"], cell["gamma"]
    ms = lambda s: f"{1e3 * s:.2f}"
    console.print(
        f"\nγ = {g}, T = {t:g}, F = {f} ({cell['branches']} branches): "
        f"T_v {ms(c['T_v'])} ms, "
        f"build T_c {ms(c['T_c'])} ms, hit draft T_h {ms(c['T_h'])} ms, miss "
        f"(backup) T_b {ms(c['T_b'])} ms; hit rate {100 * c['p']:.1f}% over "
        f"{c['rounds']} rounds; tokens/round E_hit {c['E_hit']:.2f}, E_miss "
        f"{c['E_miss']:.2f}, SD {c['E_sd']:.2f}"
    )
    ceiling = (c["T_v"] + c["T_b"]) / c["T_v"]
    console.print(f"SSD's ceiling over SD: (T_v + T_b)/T_v = {ceiling:.2f}×")
    sd_p, sd_m = pred["sd"], meas["sd"]
    x = lambda a, b: f"{b / a:.2f}×"
    table(
        f"time per token (ms) and speed-up over SD, γ = {g}, T = {t:g}, F = {f}",
        ["", "predicted", "× SD", "measured", "× SD"],
        [
            [
                "AR (its step time is an input)",
                ms(pred["ar"]),
                x(pred["ar"], sd_p),
                ms(meas["ar"]),
                x(meas["ar"], sd_m),
            ],
            ["SD", ms(sd_p), "1.00×", ms(sd_m), "1.00×"],
            [
                "SSD, one device (sequential)",
                ms(pred["ssd_sequential"]),
                x(pred["ssd_sequential"], sd_p),
                ms(meas["ssd_fused"]),
                x(meas["ssd_fused"], sd_m),
            ],
            [
                "SSD, driver on one device",
                "",
                "",
                ms(meas["ssd_driver_one_device"]),
                x(meas["ssd_driver_one_device"], sd_m),
            ],
            [
                "SSD, two devices",
                ms(pred["ssd_parallel"]),
                x(pred["ssd_parallel"], sd_p),
                ms(meas["ssd_two_devices"]),
                x(meas["ssd_two_devices"], sd_m),
            ],
            [
                "SSD, two devices, build = one round",
                ms(pred["ssd_parallel_build_as_one_round"]),
                x(pred["ssd_parallel_build_as_one_round"], sd_p),
                "",
                "",
            ],
        ],
    )


if __name__ == "__main__":
    main()
