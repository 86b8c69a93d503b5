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

    tokens/s    tokens generated / (prompt processing + generation), summed over the prompts
                of one pass; the median over passes, and the range. No run stops at
                <|endoftext|>: nanospec's loops have EOS off (bench's programs), llama.cpp
                gets --ignore-eos. Every run makes `tokens` tokens but llama-speculative, which
                ends the round that passes `tokens` (up to γ more); each engine is divided by
                its own count. llama.cpp's seconds are its own timings (model loading and its
                warm-up excluded); nanospec's the wall clock around its compiled loop.
    × nanospec  tokens/s over nanospec's for the same kind of run, pass by pass, then the
                median: the ratio of two engines measured side by side.
    acceptance  accepted / drafted over every round of every prompt: llama-speculative's
                n_accept / n_drafted, nanospec's loop counters, counted the same way.
    greedy text token for token against nanospec's autoregressive text, up to the first
                <|endoftext|> that text holds: there the engines part by design (llama.cpp's
                --ignore-eos bans the token and takes the runner-up, nanospec's EOS-off loop
                emits it and writes on). Checked in every pass; the first difference is named.
    prompts     llama-tokenize's ids for each prompt against nanospec's (start token included).

Threads: llama.cpp gets `--threads` for everything; nanospec runs XLA's CPU thread pool, one
thread per core (the machine's cores are in the JSON).

What this file deliberately leaves out: sampling at T > 0 (greedy texts can be compared),
quantized weights, batches, and any check in the test suite that builds llama.cpp (the suite
tests the parsers on recorded output and the refusals).
"""

import argparse
import json
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nanospec import SHIPPED
from nanospec.errors import UserError
from nanospec.fileio import atomic_write, check_output
from nanospec.measure import peer_llama, peer_setup


@dataclass(frozen=True)
class Mode:
    """One kind of run: an engine doing one thing with one set of weights."""

    engine: str  # "llama.cpp" or "nanospec"
    run: str  # "autoregressive" or "speculative"
    weights: str  # "float32" or "float16" (nanospec computes in float32)


NANO_AR = Mode("nanospec", "autoregressive", "float32")
NANO_SPEC = Mode("nanospec", "speculative", "float32")
MODES = (
    Mode("llama.cpp", "autoregressive", "float32"),
    Mode("llama.cpp", "speculative", "float32"),
    Mode("llama.cpp", "autoregressive", "float16"),
    NANO_AR,
    NANO_SPEC,
)


@dataclass
class Sample:
    """One run of one prompt."""

    tokens: int
    seconds: float
    text: bytes  # the generated part
    drafted: int = 0
    accepted: int = 0
    ids: list | None = None  # the generated ids, where the engine gives them (nanospec)


@dataclass
class Record:
    """Every run of one mode: samples[pass][prompt]; pass 0 is the warm-up."""

    samples: list = field(default_factory=list)

    def rates(self) -> list[float]:
        """Tokens/s of each timed pass (the warm-up left out)."""
        return [sum(s.tokens for s in p) / sum(s.seconds for s in p) for p in self.samples[1:]]


def agreement(reference: list[bytes], text: bytes, span: int) -> int | None:
    """The first of the `span` reference tokens (their bytes) that `text` does not continue
    with, or None when `text` begins with all `span` of them.

    >>> agreement([b"Par", b"is", b"."], b"Paris, France", 2), agreement([b"a", b"b"], b"ac", 2)
    (None, 1)
    """
    at = 0
    for i, piece in enumerate(reference[:span]):
        if text[at : at + len(piece)] != piece:
            return i
        at += len(piece)
    return None


def compared_span(ids: list[int], eos_id: int) -> int:
    """How many of nanospec's autoregressive tokens the texts are compared on: those before
    its first <|endoftext|> (all of them if none).

    >>> compared_span([5, 6, 256, 7], 256), compared_span([5, 6], 256)
    (2, 2)
    """
    return ids.index(eos_id) if eos_id in ids else len(ids)


def median_range(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


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


# -- measuring and reporting -------------------------------------------------------------------


def measure(runners: dict, n_prompts: int, rounds: int, console) -> dict:
    """{mode: Record}: a warm-up pass, then `rounds` passes; within a pass every mode runs a
    prompt before any mode runs the next one."""
    records = {mode: Record() for mode in runners}
    for r in range(rounds + 1):
        label = "warming up (compiling, loading)" if r == 0 else f"pass {r} of {rounds}"
        with console.status(f"{label}…"):
            for rec in records.values():
                rec.samples.append([])
            for i in range(n_prompts):
                for mode, fn in runners.items():
                    records[mode].samples[-1].append(fn(i))
    return records


def summarize(records: dict, tok) -> list[dict]:
    """One row per mode: tokens/s, × nanospec, acceptance, and whether the greedy texts agree."""
    reference = records[NANO_AR].samples[0]
    pieces = [[tok.token_bytes(t) for t in s.ids] for s in reference]
    spans = [compared_span(s.ids, tok.eos_id) for s in reference]
    rows = []
    for mode, rec in records.items():
        rates = rec.rates()
        base = records[NANO_SPEC if mode.run == "speculative" else NANO_AR].rates()
        ratios = [a / b for a, b in zip(rates, base)]
        first = next(
            (
                {"pass": p, "prompt": i, "token": at}
                for p, samples in enumerate(rec.samples)
                for i, s in enumerate(samples)
                if (at := agreement(pieces[i], s.text, spans[i])) is not None
            ),
            None,
        )
        runs = [s for samples in rec.samples for s in samples]
        drafted, accepted = sum(s.drafted for s in runs), sum(s.accepted for s in runs)
        rows.append(
            {
                "engine": mode.engine,
                "run": mode.run,
                "weights": mode.weights,
                "tokens_per_second": median_range(rates),
                "tokens_per_second_per_pass": rates,
                "over_nanospec": median_range(ratios),
                "over_nanospec_per_pass": ratios,
                "tokens_per_prompt": [s.tokens for s in rec.samples[0]],
                "acceptance_rate": accepted / drafted if drafted else None,
                "drafted": drafted,
                "accepted": accepted,
                "text_agrees": first is None,
                "first_difference": first,  # pass 0 is the warm-up
                "compared_tokens_per_prompt": spans,
                "texts": [s.text.decode("utf-8", "replace") for s in rec.samples[0]],
            }
        )
    return rows


def _text_cell(row: dict) -> str:
    if row["text_agrees"]:
        return f"agrees ({sum(row['compared_tokens_per_prompt'])} tokens)"
    d = row["first_difference"]
    return f"differs: prompt {d['prompt'] + 1}, token {d['token'] + 1}"


COLUMNS = ["engine, run", "weights", "tokens/s", "range", "× nanospec", "acceptance", "greedy text"]


def _cells(r: dict, gamma: int) -> list[str]:
    """One table row: the × nanospec and acceptance cells are empty where they mean nothing."""
    tps, x, acc = r["tokens_per_second"], r["over_nanospec"], r["acceptance_rate"]
    ratio = f"{x['median']:.2f}× ({x['min']:.2f}–{x['max']:.2f})"
    return [
        f"{r['engine']} {r['run']}" + (f" γ={gamma}" if r["run"] == "speculative" else ""),
        r["weights"],
        f"{tps['median']:,.0f}",
        f"{tps['min']:,.0f}–{tps['max']:,.0f}",
        "" if r["engine"] == "nanospec" else ratio,
        "" if acc is None else f"{acc:.1%}",
        _text_cell(r),
    ]


def show(console, report: dict) -> None:
    from nanospec.measure.tables import table

    title = (
        f"{report['workload']} prompts × {report['prompts']}, greedy, {report['tokens']} tokens, "
        f"{report['rounds']} passes, llama.cpp --threads {report['threads']}"
    )
    table(title, COLUMNS, [_cells(r, report["gamma"]) for r in report["rows"]], console)
    ids = report["prompt_ids"]
    same = sum(p["same_ids"] for p in ids)
    console.print(f"prompt ids: llama.cpp's equal nanospec's on {same} of {len(ids)}")
    console.print(f"{report['llama_cpp']['version']}; {report['machine']['cpu']}")


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
