"""The peer, side by side: llama.cpp and nanospec on the same weights, the same prompts.

    python -m nanospec.measure.peer [--llama-cpp DIR] [--work runs/peer] [--rounds 7]
                                    [--tokens 128] [--gamma 7] [--threads 2] [--json FILE]

It gets llama.cpp (measure/peer_setup.py: `--llama-cpp DIR`, or the llama-cpp-python sdist
fetched by pip, the one network step), builds its tools, exports the shipped target and draft
(`export-hf`) and converts them to GGUF: float32 both, and the target in float16 for one
extra row. A second run finds all of that in the work folder and goes straight to measuring
(delete work/gguf/ when the shipped weights change: files there are not checked against them).

Then, on the benchmark's facts prompts (measure/workloads.py), greedy, `tokens` new tokens:

    llama.cpp  autoregressive   llama-completion, float32 and float16
               speculative      llama-speculative, the draft model, γ drafts a round
    nanospec   autoregressive   the loops `nanospec bench` times (bench.program_for),
               speculative      compiled once and warmed up, in this process

One warm-up pass runs everything once (llama.cpp's files into the page cache, nanospec's
programs run once, and the texts and counters read), then `rounds` timed passes, each running
every engine on every prompt before the next prompt, so a busy neighbour slows all alike.

What is compared, and how the counts are made comparable:

    tokens/s    tokens generated / (prompt processing + generation) in one run (one prompt);
                the median over every timed run, and the range. No run stops at
                <|endoftext|>: nanospec's loops have EOS off (bench's programs), llama.cpp
                gets --ignore-eos. Every run makes `tokens` tokens but llama-speculative, which
                ends the round that passes `tokens` (up to γ more); each engine is divided by
                its own count. llama.cpp's seconds are its own timings (model loading and its
                warm-up excluded); nanospec's the wall clock around its compiled loop.
    × nanospec  a run's tokens/s over nanospec's for the same kind of run on the same prompt in
                the same pass (seconds apart), then the median over runs.
                Medians of runs, not of pass totals: llama.cpp's threads spin while they wait
                for each other at every step, so a run whose cores another process takes runs
                5 to over 100 times slower (2 threads on 2 cores, the test suite beside it), in
                bursts; a pass's total would be its burst's. The JSON keeps pass totals too, and
                each mode's runs over SLOW times their prompt's median (printed under the table).
    acceptance  accepted / drafted over every round of every prompt: llama-speculative's
                n_accept / n_drafted, nanospec's loop counters, counted the same way.
    greedy text token for token against nanospec's autoregressive text, up to the first
                <|endoftext|> that text holds: there the engines part by design (llama.cpp's
                --ignore-eos bans the token and takes the runner-up, nanospec's EOS-off loop
                emits it and writes on). Checked in every pass; the first difference is named.
    prompts     llama-tokenize's ids for each prompt against nanospec's (start token included).

Threads: llama.cpp gets `--threads` for everything (`--threads 1` does not stall on a busy
machine); nanospec runs as its commands do, on XLA's own threads (the machine's cores are in
the JSON).

What this file deliberately leaves out: sampling at T > 0 (greedy texts can be compared),
quantized weights, batches, and any check in the test suite that builds llama.cpp (the suite
tests the parsers on recorded output and the refusals).
"""

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from nanospec import SHIPPED
from nanospec.errors import UserError
from nanospec.fileio import atomic_write, check_output
from nanospec.measure import peer_llama, peer_setup
from nanospec.measure.peer_report import MODES, NANO_AR, NANO_SPEC, Record, Sample, show, summarize

# -- the two engines ---------------------------------------------------------------------------


def llama_runners(llama, gguf: dict, prompts: list[str], args, n_ctx: int) -> dict:
    """{mode: fn(prompt index) -> Sample} for the three llama.cpp modes."""

    def sample(run) -> Sample:
        return Sample(run.tokens, run.seconds, run.text, run.drafted, run.accepted)

    def ar(weights):
        model = gguf[f"target-{weights}"]
        return lambda i: sample(
            peer_llama.completion(llama, model, prompts[i], args.tokens, args.threads, n_ctx)
        )

    def spec(i):
        target, draft = gguf["target-f32"], gguf["draft-f32"]
        t, g, n = args.tokens, args.gamma, args.threads
        return sample(peer_llama.speculative(llama, target, draft, prompts[i], t, g, n, n_ctx))

    return {MODES[0]: ar("f32"), MODES[1]: spec, MODES[2]: ar("f16")}


def nanospec_runners(bundle, workload: str, n_prompts: int, tokens: int, gamma: int) -> dict:
    """{mode: fn(prompt index) -> Sample}: `nanospec bench`'s compiled loops (EOS off, every
    prompt padded to one bucket, so each loop compiles once), timed around the call."""
    import jax
    import numpy as np

    from nanospec.measure.bench import bench_prompts, program_for
    from nanospec.rounds import generated
    from nanospec.sampling import SamplingParams

    sp = SamplingParams.make(0.0)
    padded = bench_prompts(bundle, workload, n_prompts)  # workload_prompts', tokenized

    def runner(program):
        def run(i: int) -> Sample:
            tk, ln = padded[i]
            t0 = time.perf_counter()
            state, stats = jax.block_until_ready(program(tk, ln, jax.random.key(i)))
            seconds = time.perf_counter() - t0
            ids = generated(state, ln)[0]
            hist = np.asarray(stats.hist).sum(0)
            return Sample(
                len(ids),
                seconds,
                b"".join(bundle.tok.token_bytes(t) for t in ids),
                int(np.asarray(stats.drafted).sum()),
                int(sum(k * h for k, h in enumerate(hist))),
                ids,
            )

        return run

    return {
        NANO_AR: runner(program_for(bundle, "ar", sp, tokens, prompt=padded[0])),
        NANO_SPEC: runner(program_for(bundle, "draft", sp, tokens, gamma=gamma, prompt=padded[0])),
    }


def prompt_check(llama, gguf: dict, tok, prompts: list[str]) -> list[dict]:
    """Each prompt's ids as llama.cpp and nanospec make them: the texts compare only if equal."""
    rows = []
    for p in prompts:
        ours, theirs = tok.encode_prompt(p), peer_llama.tokenize(llama, gguf["target-f32"], p)
        rows.append(
            {"prompt": p, "same_ids": ours == theirs, "nanospec": ours, "llama.cpp": theirs}
        )
    return rows


# -- measuring ---------------------------------------------------------------------------------


def measure(runners: dict, n_prompts: int, rounds: int, console) -> dict:
    """{mode: Record}: a warm-up pass, then `rounds` passes; within a pass every mode runs a
    prompt before any mode runs the next one."""
    records = {mode: Record() for mode in runners}
    for r in range(rounds + 1):
        label = "warming up" if r == 0 else f"pass {r} of {rounds}"
        with console.status(f"{label}…"):
            for rec in records.values():
                rec.samples.append([])
            for i in range(n_prompts):
                for mode, fn in runners.items():
                    records[mode].samples[-1].append(fn(i))
    return records


def run(args, console) -> dict:
    from nanospec.decode import Bundle
    from nanospec.machine import described
    from nanospec.measure.bench import bench_prompts, check_runnable
    from nanospec.measure.workloads import workload_prompts

    bundle = Bundle.load(args.checkpoints, ("target", "draft"))
    cfg = bundle.models["target"][0]
    # refused before anything is built: a run the context has no room for
    check_runnable(bundle, bench_prompts(bundle, args.workload, args.prompts), args.tokens,
                   [("draft", args.gamma)], [])  # fmt: skip
    work = Path(args.work).resolve()  # the venv's stamp names gguf-py by its full path
    work.mkdir(parents=True, exist_ok=True)
    with console.status("getting llama.cpp ready (a first build takes a while)…"):
        llama = peer_setup.prepare(args.llama_cpp, work)
    with console.status("exporting and converting the models to GGUF…"):
        gguf = peer_setup.gguf_files(llama, work, args.checkpoints)
    prompts = workload_prompts(args.workload, args.prompts)
    ids = prompt_check(llama, gguf, bundle.tok, prompts)
    with console.status("compiling nanospec's loops…"):
        runners = {
            **llama_runners(llama, gguf, prompts, args, cfg.n_ctx),
            **nanospec_runners(bundle, args.workload, args.prompts, args.tokens, args.gamma),
        }
    records = measure(runners, args.prompts, args.rounds, console)
    return {
        "benchmark": "peer",
        "command": " ".join(["python -m nanospec.measure.peer", *map(shlex.quote, args.argv)]),
        "workload": args.workload,
        "prompts": args.prompts,
        "tokens": args.tokens,
        "gamma": args.gamma,
        "threads": args.threads,
        "rounds": args.rounds,
        "llama_cpp": {"version": llama.version, "source": str(llama.source), "bin": str(llama.bin)},
        "gguf": {name: str(path) for name, path in gguf.items()},
        "machine": described(),
        "prompt_ids": ids,
        "rows": summarize(records, bundle.tok),
    }


def main(argv=None) -> dict:
    from nanospec.measure.workloads import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", metavar="DIR", default=None,
                    help="a llama.cpp source tree, llama-cpp-python sdist or cmake build folder "
                    "(default: pip downloads the llama-cpp-python sdist into --work)")  # fmt: skip
    ap.add_argument("--work", default="runs/peer", help="where the build, GGUFs and venv stay")
    ap.add_argument("--rounds", type=int, default=7, help="timed passes over every prompt")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--gamma", type=int, default=7, help="drafts per speculative round")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp's --threads")
    ap.add_argument("--prompts", type=int, default=8, help="how many of the workload's prompts")
    ap.add_argument("--workload", default="facts", choices=list(WORKLOADS))
    ap.add_argument("--checkpoints", default=str(SHIPPED), help="folder of shipped weights")
    ap.add_argument("--json", default=None, help="the report (default: WORK/peer.json)")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for name, low, high in (("rounds", 1, 100), ("tokens", 2, 4096), ("gamma", 1, 32),
                            ("threads", 1, 1024), ("prompts", 1, 64)):  # fmt: skip
        if not low <= getattr(args, name) <= high:
            ap.error(f"--{name} takes a whole number from {low} to {high}")
    try:  # a bad --json path fails now, not after the build
        if args.json:
            check_output(args.json, ".json", "--json")
    except UserError as e:
        ap.error(str(e))
    args.json = args.json or str(Path(args.work) / "peer.json")
    from nanospec import compile_cache
    from nanospec.measure.tables import console_for

    compile_cache.enable()  # as the CLI does: a second run loads its programs
    console = console_for()
    try:
        report = run(args, console)
    except UserError as e:
        print(f"peer: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    show(console, report)
    atomic_write(args.json, json.dumps(report, indent=2))
    console.print(f"written: {args.json}")
    return report


if __name__ == "__main__":
    main()
