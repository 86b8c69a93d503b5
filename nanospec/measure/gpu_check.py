"""The check prepared for the day a GPU is lent: exactness and the bench table, in one JSON.

    python -m nanospec.measure.gpu_check --json gpu-check.json [--parts identity,law,bench]
        [--prompts 32] [--max-new 64] [--gamma 4] [--methods ar,draft,...]
        [--law-n 100000] [--law-seed 3] [--bench-methods ar,draft] [--bench-gammas 1,2,4,6,8]
        [--bench-tokens 64] [--bench-repeats 3] [--bench-prompts 8] [--checkpoints DIR]

It prints the JAX backend and its devices, then runs three parts on the default device (a GPU
where JAX's CUDA build is installed, else the CPU) and records each in one JSON, rewritten
whole after every part, so that a run cut short keeps what it finished:

    identity  at T = 0 every drafting method in the table (methods.py) writes the target's
              autoregressive greedy text token for token, on `prompts` prompts ("The capital
              of France is", then the bench workloads' prompts in turn) for `max_new` tokens
              at γ = `gamma` (heads: at most one draft per head). The one divergence allowed
              is a near-tie, where the target's top two logits are within NEAR_TIE (1e-3) and
              passes of different widths may pick either; each is recorded, as in
              tests/statistical/test_greedy_identity.py. No randomness: it never fails by chance.
    law       the draft model's speculative loop (γ = 3, T = 1, 4 new tokens) on the tiny pair
              of measure/exact_law.py, run `law_n` times, against the target's exact law by
              enumeration (625 sequences): Pearson's chi-square, passing at p > 1e-4, so a
              correct loop fails with probability 1e-4. N = 100,000, the threshold and the seed
              are tests/statistical/test_joint_law.py's (its T1-gamma3 case).
    bench     `nanospec bench`'s table (measure/bench.py's `run_bench`) at T = 0 on the facts
              workload, its own defaults unless flags set smaller ones; it judges nothing.

Exit status 0 when every part that ran passed; 1 when the identity or the law failed (one
sentence on stderr, the details in the JSON); 2 for a mistake in the flags or a run that
cannot be made (a prompt too long for the context), in one sentence.

The defaults are sized for a GPU (docs/install.md, "On a GPU", says how to install JAX's CUDA
build and how long this takes); the test suite runs the same code on the CPU with small sizes
(tests/test_gpu_check.py).

What this file deliberately leaves out: any judgement of time (bench measures, nothing here
asserts a speed); several devices (it uses the default one); the suite's other laws (trees,
heads, SSD, the engine), which `make test` runs on a GPU machine as on any other.
"""

import argparse
import importlib.metadata
import itertools
import json
import platform
import sys
import time
from dataclasses import replace

import jax
import numpy as np

from nanospec import SHIPPED, compile_cache
from nanospec.decode import METHODS, Bundle, make_loop, needs
from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.fileio import atomic_write, check_output
from nanospec.generate import pad_prompts
from nanospec.machine import described
from nanospec.measure.bench import run_bench
from nanospec.measure.exact_law import (
    PROMPT,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_pair,
)
from nanospec.measure.positions import NEAR_TIE, text_features
from nanospec.measure.tables import console_for
from nanospec.measure.workloads import WORKLOADS, workload_prompts
from nanospec.methods import DRAFTING
from nanospec.rounds import generated
from nanospec.sampling import GREEDY, SamplingParams

PARTS = ("identity", "law", "bench")
MAX_GAMMA = 32  # the loops' own limit (speculative.check)
FIRST_PROMPT = "The capital of France is"
# The law test: tests/statistical/test_joint_law.py's T1-gamma3 case, at its N and threshold
# (tests/test_gpu_check.py holds these equal to the suite's).
LAW_N, LAW_THRESHOLD, LAW_SEED = 100_000, 1e-4, 3
LAW_GAMMA, LAW_NEW, LAW_T = 3, 4, 1.0
# The bench part's defaults: run_bench's own, as `nanospec bench` runs it.
BENCH_METHODS, BENCH_GAMMAS = ("ar", "draft"), (1, 2, 4, 6, 8)
# What the JSON names as versions: these, and every CUDA wheel installed (jax-cuda12-plugin,
# nvidia-cudnn-cu12, …: constraints.txt pins jax, and pip picks CUDA's libraries to fit it).
PACKAGES = ("jax", "jaxlib", "flax", "numpy", "scipy", "ml_dtypes")
CUDA_WHEELS = ("jax-cuda", "nvidia-")  # names as pip writes them: lower case, "-"


def identity_prompts(n: int) -> list[str]:
    """`n` prompts: FIRST_PROMPT, then the bench workloads' prompts in turn (facts,
    repetitive, code, facts, …), so every size mixes prose, repeats and code."""
    pools = {w: iter(workload_prompts(w, n)) for w in WORKLOADS}
    turns = itertools.islice(itertools.cycle(WORKLOADS), n - 1)
    return [FIRST_PROMPT, *(next(pools[w]) for w in turns)][:n]


def greedy_loop(bundle, method: str, gamma: int):
    """(method's loop, its drafter's params, its γ) at `gamma`, or at as many drafts as its
    heads allow, with EOS off so that every row writes exactly max_new tokens."""
    if METHODS[method].drafter:
        most = bundle.drafter(method)[0].max_gamma
        gamma = gamma if most is None else min(gamma, most)
    loop, dparams = make_loop(bundle, method, gamma)
    return replace(loop, eos_id=-1), dparams, gamma if METHODS[method].drafter else None


def check_identity(bundle, methods, prompts: list[str], max_new: int, gamma: int) -> dict:
    """Every method's greedy tokens against the autoregressive ones ("ar" of the table): per
    method, the rows that part from them and the target's top-2 logit gap where they do."""
    cfg, graphdef, params = bundle.models["target"]
    ids = [bundle.tok.encode_prompt(t) for t in prompts]
    tokens, lengths = pad_prompts(ids, cfg.n_ctx)
    loops = {m: greedy_loop(bundle, m, gamma) for m in ("ar", *methods)}
    for loop, _, _ in loops.values():  # refuse a prompt too long before anything compiles
        loop.check(lengths, max_new)

    def run(m) -> list[list[int]]:
        loop, dparams, _ = loops[m]
        state, _ = loop.run(params, dparams, tokens, lengths, jax.random.key(0), GREEDY, max_new)
        return generated(state, lengths)

    reference, text, rows = run("ar"), None, []
    for m in methods:
        start = time.perf_counter()
        out = run(m)
        parted = []
        if out != reference:  # read the target's gaps only when some row parted
            if text is None:
                text = text_features(graphdef, params, ids, reference)
            parted = [
                {"row": b, "token": t, "gap": None if np.isinf(gap) else gap}
                for b, t, gap in text.parted(out)
            ]
        # A row cut short (gap None) is no near-tie: every row must write max_new tokens.
        failures = [d for d in parted if d["gap"] is None or d["gap"] >= NEAR_TIE]
        rows.append(
            {
                "method": m,
                "gamma": loops[m][2],
                "identical_rows": len(ids) - len(parted),
                "near_ties": [d for d in parted if d not in failures],
                "failures": failures,
                "passed": not failures,
                "seconds": time.perf_counter() - start,  # compiling included
            }
        )
    return {
        "passed": all(r["passed"] for r in rows),
        "reference": "ar",
        "gamma": gamma,
        "prompts": len(ids),
        "max_new": max_new,
        "near_tie": NEAR_TIE,
        "methods": rows,
    }


def identity_failure(part: dict) -> str:
    """The first failing method's first parted row, as a clause of the failure sentence."""
    r = next(r for r in part["methods"] if not r["passed"])
    f = r["failures"][0]
    where = f"prompt {f['row']}, token {f['token']}"
    gap = "a row cut short" if f["gap"] is None else f"the target's top-2 gap {f['gap']:.3g}"
    return (
        f"{r['method']} (γ = {r['gamma']}) parted from the autoregressive greedy text at "
        f"{where}, where {gap} is no near-tie (< {NEAR_TIE:g})"
    )


def check_law(n: int, seed: int) -> dict:
    """The draft model's loop, n runs on the tiny pair, against the exact law (chi-square)."""
    target, draft = tiny_pair()
    sp = SamplingParams.make(LAW_T)
    drafter = DraftModel(draft[1], draft[0])
    start = time.perf_counter()
    out = run_speculative(target, drafter, draft[2], [PROMPT] * n, LAW_NEW, sp, LAW_GAMMA, seed)
    seconds = time.perf_counter() - start
    cells, law = encode(out[tuple(PROMPT)]), exact_law(target, PROMPT, LAW_NEW, sp)
    pvalue = chi_square_pvalue(cells, law)
    seen = np.bincount(cells, minlength=len(law)) / len(cells)
    return {
        "passed": pvalue > LAW_THRESHOLD,
        "n": n,
        "pvalue": pvalue,
        "threshold": LAW_THRESHOLD,
        "false_failure_probability": LAW_THRESHOLD,
        "total_variation": 0.5 * float(np.abs(seen - law).sum()),  # the sample's from the law
        "gamma": LAW_GAMMA,
        "new_tokens": LAW_NEW,
        "temperature": LAW_T,
        "seed": seed,
        "seconds": seconds,  # compiling included
    }


def device() -> dict:
    """The backend, every device JAX sees, and the machine around them."""
    devices = jax.devices()
    memory = devices[0].memory_stats() or {}  # None on the CPU
    return {
        **described(),
        "backend": jax.default_backend(),
        "devices": [repr(d) for d in devices],
        "memory_gib": memory["bytes_limit"] / 2**30 if "bytes_limit" in memory else None,
    }


def versions() -> dict:
    """Python's, PACKAGES' and every CUDA wheel's versions, as installed here."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    every = {
        d.metadata["Name"].lower().replace("_", "-"): d.version
        for d in importlib.metadata.distributions()
    }
    return out | {n: v for n, v in sorted(every.items()) if n.startswith(CUDA_WHEELS)}


def parse_list(text: str, flag: str, known=None, cast=str) -> list:
    """ "a,b" -> ["a", "b"] (cast each), every one in `known` if given; else a UserError."""
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        items = []
    if not items or (known is not None and any(x not in known for x in items)):
        what = ", ".join(map(str, known)) if known is not None else "whole numbers"
        raise UserError(f"{flag} takes a comma-separated list of {what}; got {text!r}.")
    return items


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = ap.add_argument
    add("--json", default="gpu-check.json", help="the report (default: gpu-check.json)")
    add("--parts", default=",".join(PARTS), help="which parts: " + ", ".join(PARTS))
    add("--checkpoints", default=str(SHIPPED), help="folder of weights (default: shipped)")
    add("--methods", default=",".join(METHODS), help="identity: the methods checked")
    add("--prompts", type=int, default=32, help="identity: how many prompts")
    add("--max-new", type=int, default=64, help="identity: tokens written per prompt")
    add("--gamma", type=int, default=4, help="identity: drafts per round")
    add("--law-n", type=int, default=LAW_N, help="law: runs of the loop (the suite's N)")
    add("--law-seed", type=int, default=LAW_SEED, help="law: the seed (the suite's)")
    add("--bench-methods", default=",".join(BENCH_METHODS), help="bench: methods")
    add("--bench-gammas", default=",".join(map(str, BENCH_GAMMAS)), help="bench: γ values")
    add("--bench-tokens", type=int, default=64, help="bench: tokens per prompt")
    add("--bench-repeats", type=int, default=3, help="bench: timed passes")
    add("--bench-prompts", type=int, default=8, help="bench: prompts")
    return ap


def settings(args) -> dict:
    """The flags checked and read, or a UserError that says which one is wrong."""
    small = {
        "--prompts": args.prompts,
        "--max-new": args.max_new,
        "--gamma": args.gamma,
        "--law-n": args.law_n,
        "--bench-tokens": args.bench_tokens,
        "--bench-repeats": args.bench_repeats,
        "--bench-prompts": args.bench_prompts,
    }
    for flag, value in small.items():
        if value < 1:
            raise UserError(f"{flag} takes a whole number of at least 1; got {value}.")
    gammas = parse_list(args.bench_gammas, "--bench-gammas", cast=int)
    if not all(1 <= g <= MAX_GAMMA for g in [args.gamma, *gammas]):
        raise UserError(f"--gamma and --bench-gammas take γ from 1 to {MAX_GAMMA}.")
    check_output(args.json, ".json", "--json")  # a bad path fails now, not after the runs
    methods = [m for m in parse_list(args.methods, "--methods", METHODS) if m != "ar"]
    if not methods:  # ar is the reference: with nothing else there is nothing to compare
        raise UserError(f"--methods must name a drafting method: {', '.join(DRAFTING)}.")
    return {
        "parts": parse_list(args.parts, "--parts", PARTS),
        "methods": methods,
        "bench_methods": parse_list(args.bench_methods, "--bench-methods", METHODS),
        "bench_gammas": gammas,
    }


def identity_part(bundle, args, chosen: dict, console) -> tuple[dict, str | None]:
    """The identity part, printed a line per method: (its record, the failure's clause)."""
    prompts = identity_prompts(args.prompts)
    part = check_identity(bundle, chosen["methods"], prompts, args.max_new, args.gamma)
    console.print(f"identity  reference: ar, {part['prompts']} prompts × {part['max_new']} tokens")
    for r in part["methods"]:
        ties = f", {len(r['near_ties'])} near-ties" if r["near_ties"] else ""
        verdict = "identical" if r["passed"] else "PARTED"
        console.print(
            f"identity  {r['method']:<7} γ = {r['gamma']}: {verdict}{ties} ({r['seconds']:.1f} s)"
        )
    return part, None if part["passed"] else identity_failure(part)


def law_part(args, console) -> tuple[dict, str | None]:
    """The law part, printed in a line: (its record, the failure's clause)."""
    part = check_law(args.law_n, args.law_seed)
    verdict = "passed" if part["passed"] else "FAILED"
    console.print(
        f"law       {part['n']:,} runs: p = {part['pvalue']:.3g}, {verdict} (p > "
        f"{LAW_THRESHOLD:g} passes; a correct loop fails with probability {LAW_THRESHOLD:g}) "
        f"({part['seconds']:.1f} s)"
    )
    failure = (
        f"the law test's p-value {part['pvalue']:.3g} over {part['n']:,} runs is not above "
        f"{LAW_THRESHOLD:g}"
    )
    return part, None if part["passed"] else failure


def bench_part(bundle, args, chosen: dict, console) -> dict:
    """`nanospec bench`'s run at the flags' sizes: its report (it prints its own table)."""
    return run_bench(
        bundle,
        chosen["bench_methods"],
        chosen["bench_gammas"],
        tokens=args.bench_tokens,
        repeats=args.bench_repeats,
        n_prompts=args.bench_prompts,
        console=console,
    )


def run_parts(args, chosen: dict, record: dict, save) -> list[str]:
    """Run the chosen parts into record["parts"], saving after each; the failures' clauses."""
    console = console_for()
    parts = chosen["parts"]
    names = {n for m in chosen["methods"] for n in needs(m)} if "identity" in parts else set()
    if "bench" in parts:
        names |= {n for m in chosen["bench_methods"] for n in needs(m)}
    bundle = Bundle.load(args.checkpoints, sorted(names)) if names else None
    failed = []
    for name in parts:
        if name == "identity":
            part, failure = identity_part(bundle, args, chosen, console)
        elif name == "law":
            part, failure = law_part(args, console)
        else:  # bench measures; it has nothing to fail
            part, failure = bench_part(bundle, args, chosen, console), None
        record["parts"][name] = part
        save()
        failed += [failure] if failure else []
    return failed


def main(argv=None) -> int:
    """Run the check; the exit status (0 passed, 1 identity or law failed, 2 a mistake)."""
    args = parser().parse_args(argv)
    start = time.perf_counter()
    try:
        chosen = settings(args)
        compile_cache.enable()  # a second run on the machine loads its programs
        record = {
            "check": "gpu_check",
            "argv": sys.argv[1:] if argv is None else list(argv),
            "device": device(),
            "versions": versions(),
            "parts": {},
            "complete": False,
        }
        save = lambda: atomic_write(args.json, json.dumps(record, indent=2))
        print(f"JAX backend: {record['device']['backend']}; devices: {jax.devices()}")
        save()
        failed = run_parts(args, chosen, record, save)
    except UserError as e:
        print(f"gpu_check: error: {e}", file=sys.stderr)
        return 2
    record.update(complete=True, passed=not failed, seconds=time.perf_counter() - start)
    save()
    if failed:
        print(
            f"gpu_check: failed: {'; and '.join(failed)} (details: {args.json}).", file=sys.stderr
        )
        return 1
    print(f"gpu_check: every part passed; written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
