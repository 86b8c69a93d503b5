"""Compiled quickly or compiled well: what the test suite's compiler settings cost and save.

    python -m nanospec.measure.quick_compile [--programs test,law,ar,draft] [--repeats 7]
                                             [--compile-repeats 3] [--json FILE]

The test suite compiles most programs with XLA's backend optimizations off (JAX's
`jax_disable_most_optimizations`) and XLA:CPU's fusion emitters off (`XLA_FLAGS=
--xla_cpu_use_fusion_emitters=false`), because most tests compile a program to run it once
or twice (tests/conftest.py). Every command compiles with XLA's defaults. This script sets the
two side by side, per program, in one process (as `compile(compiler_options=...)`, the same
settings that switch and flag make):

    compile   seconds of CPU (every thread of this process) and of wall clock to compile the
              program, the disk cache off, the median of `compile_repeats` compiles; and the
              fusions in XLA's optimized program (the JSON's `fusions`)
    run       ms per run of the compiled program, both settings' programs timed round-robin
              over `repeats` runs (probes.interleaved_samples), medians

Programs (`--programs`): `test`, the speculative loop (draft model, γ = 3, top-p) on the
suite's tiny models for 2 rows, as a test compiles it; `law`, the same for 2,000 rows, as a
large-N law test runs it; `ar` and `draft`, the shipped target's autoregressive loop and its
draft model at γ = 7, 128 greedy tokens, as `nanospec generate` runs them.

What this file deliberately leaves out: the XLA option space (one setting against the
defaults: docs/results.md records what else was tried), and GPU backends.
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec import SHIPPED
from nanospec.decode import Bundle, make_loop
from nanospec.drafters import DraftModel
from nanospec.errors import UserError
from nanospec.fileio import check_output
from nanospec.generate import pad_prompts
from nanospec.machine import described
from nanospec.measure.probes import interleaved_samples
from nanospec.measure.tables import console_for, sign_off, table
from nanospec.model import GPT, ModelConfig
from nanospec.rounds import fused_program
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator

# What the suite's two switches set, as compile options (jax/_src/compiler.py applies the
# first two for jax_disable_most_optimizations), and XLA's defaults for the same three, stated
# so that the comparison holds whatever the environment sets (the test suite's switches too).
SETTINGS = {
    "defaults": {
        "xla_backend_optimization_level": 3,
        "xla_llvm_disable_expensive_passes": False,
        "xla_cpu_use_fusion_emitters": True,
    },
    "quick": {
        "xla_backend_optimization_level": 0,
        "xla_llvm_disable_expensive_passes": True,
        "xla_cpu_use_fusion_emitters": False,
    },
}


def cpu_seconds() -> float:
    """CPU seconds this process has used so far, every thread (XLA compiles on a pool): user
    and system time, as getrusage gives them, but on Windows too (it has no `resource`)."""
    return time.process_time()


def tiny_loop(rows: int):
    """(loop, its arguments): the suite's tiny target and draft, γ = 3, top-p 0.95."""
    cfg = ModelConfig.tiny(vocab_size=40, n_ctx=48)
    g, p = nnx.split(GPT(cfg, nnx.Rngs(0)))
    dcfg = ModelConfig(name="tiny-draft", vocab_size=40, n_ctx=48, n_layer=1, n_head=2, d_model=16)
    dg, dp = nnx.split(GPT(dcfg, nnx.Rngs(1)))
    tokens, lengths = pad_prompts([[1, 2, 3]] * rows, cfg.n_ctx)
    loop = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=3, eos_id=-1)
    sp = SamplingParams.make(0.9, 0, 0.95)
    return loop, (p, dp, tokens, lengths, jax.random.key(0), sp, jnp.int32(12))


def shipped_loop(bundle: Bundle, method: str, gamma: int):
    """(loop, its arguments): a shipped loop, 128 greedy tokens from a short prompt."""
    loop, dparams = make_loop(bundle, method, gamma=gamma)
    cfg, _, params = bundle.models["target"]
    tokens, lengths = pad_prompts([bundle.tok.encode("The capital of France is")], cfg.n_ctx)
    return loop, (
        params,
        dparams,
        tokens,
        lengths,
        jax.random.key(0),
        GREEDY,
        jnp.int32(128),
    )


# --programs: name -> (its row in the table, a function of the shipped bundle making it)
PROGRAMS = {
    "test": ("tiny loop, 2 rows (a test)", lambda bundle: tiny_loop(2)),
    "law": ("tiny loop, 2,000 rows (a law test)", lambda bundle: tiny_loop(2000)),
    "ar": (
        "shipped target, autoregressive",
        lambda bundle: shipped_loop(bundle, "ar", 1),
    ),
    "draft": (
        "shipped draft model, γ = 7",
        lambda bundle: shipped_loop(bundle, "draft", 7),
    ),
}


def measure(programs: dict, repeats: int, compile_repeats: int) -> dict:
    """{program: {setting: {compile_cpu_s, compile_wall_s, run_ms}}}."""
    compiled, out = {}, {}
    for name, (loop, args) in programs.items():
        lowered = fused_program.lower(loop, *args)
        for setting, options in SETTINGS.items():
            cpu, wall = [], []
            for _ in range(compile_repeats):
                jax.clear_caches()  # else JAX hands back the program it compiled a moment ago
                c0, t0 = cpu_seconds(), time.perf_counter()
                program = lowered.compile(compiler_options=options)
                wall.append(time.perf_counter() - t0)
                cpu.append(cpu_seconds() - c0)
            compiled[name, setting] = lambda p=program, a=args: p(*a)
            out.setdefault(name, {})[setting] = {
                "compile_cpu_s": statistics.median(cpu),
                "compile_wall_s": statistics.median(wall),
                "fusions": program.as_text().count(" fusion("),  # XLA's kernels, roughly
            }
    samples = interleaved_samples(compiled, repeats)
    for (name, setting), seconds in samples.items():
        out[name][setting]["run_ms"] = 1000 * statistics.median(seconds)
    return out


def show(console, records: dict) -> None:
    rows = []
    for name, r in records.items():
        d, q = r["defaults"], r["quick"]
        rows.append(
            [
                name,
                f"{d['compile_cpu_s']:.2f} → {q['compile_cpu_s']:.2f}",
                f"{q['compile_cpu_s'] / d['compile_cpu_s']:.2f}",
                f"{d['run_ms']:.1f} → {q['run_ms']:.1f}",
                f"{q['run_ms'] / d['run_ms']:.2f}",
            ]
        )
    table(
        "XLA's defaults → the suite's quick settings (compile: CPU seconds; run: ms, medians)",
        ["program", "compile", "× ", "run", "×"],
        rows,
        console,
    )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default=",".join(PROGRAMS), help="which programs (see above)")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs of each program")
    ap.add_argument("--compile-repeats", type=int, default=3, help="compiles of each program")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    args = ap.parse_args(argv)
    chosen = [x.strip() for x in args.programs.split(",") if x.strip()]
    if not chosen or any(x not in PROGRAMS for x in chosen):
        ap.error(f"--programs takes a comma-separated list of {', '.join(PROGRAMS)}")
    if min(args.repeats, args.compile_repeats) < 1:
        ap.error("--repeats and --compile-repeats take a whole number of at least 1")
    try:  # a bad --json path fails now, not after minutes of compiling
        if args.json:
            check_output(args.json, ".json", "--json")
    except UserError as e:
        ap.error(str(e))
    jax.config.update("jax_enable_compilation_cache", False)  # compile, never load from disk
    console = console_for()
    bundle = Bundle.load(SHIPPED) if {"ar", "draft"} & set(chosen) else None
    programs = {PROGRAMS[name][0]: PROGRAMS[name][1](bundle) for name in chosen}
    with console.status("compiling each program both ways, then timing them…"):
        records = measure(programs, args.repeats, args.compile_repeats)
    show(console, records)
    report = {
        "settings": SETTINGS,
        "repeats": args.repeats,
        "compile_repeats": args.compile_repeats,
        "machine": described(),
        "programs": records,
    }
    sign_off(console, report, args.json)
    return report


if __name__ == "__main__":
    main()
