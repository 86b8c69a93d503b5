"""What each `nanospec` subcommand does once its arguments are parsed.

cli/__init__.py builds the parser. Every function here takes argparse's namespace. JAX, the
models and the measurement code load inside the commands, so building the parser (which every
command, `demo` included, does first) stays cheap.
"""

import json
import shlex
import sys
from pathlib import Path

from rich.markup import escape

from nanospec.cli.args import (
    check_sampling,
    int_list,
    load_bundle,
    parse_tree,
    ssd_options,
    tree_from_widths,
)
from nanospec.errors import UserError


def cmd_generate(args) -> None:
    """`nanospec generate`: decode one prompt, print the text (or JSON, or the rounds) and stats."""
    from nanospec.decode import decode, needs
    from nanospec.fileio import check_output
    from nanospec.trace import write_jsonl

    check_sampling(args.temperature, args.top_k, args.top_p)
    if not args.prompt:
        raise UserError("The prompt is empty; give at least one token of text.")
    if args.json and args.show:
        raise UserError(
            "--json prints one JSON object and --show prints the rounds in colour; "
            "choose one (--trace FILE.jsonl keeps the rounds beside --json)."
        )
    if args.trace:
        check_output(args.trace, ".jsonl", "--trace")
    tree = parse_tree(args)
    ssd = ssd_options(args)
    bundle = load_bundle(args, needs(args.method))
    with _progress(args.num_samples) as progress:
        result = decode(
            bundle,
            args.prompt,
            method=args.method,
            gamma=args.gamma or 4,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            max_new=args.max_new_tokens,
            num_samples=args.num_samples,
            with_events=bool(args.trace or args.show),
            tree=tree,
            top=args.siblings != "sample",
            progress=progress,
            ssd=ssd,
            ignore_eos=args.ignore_eos,
        )
    if args.trace:
        write_jsonl(args.trace, result.events)
    if args.json:
        print(json.dumps(_generated_json(args, result), ensure_ascii=False))
        return
    _print_generated(args, result, bundle.models["target"][0].n_ctx)


def _generated_json(args, result) -> dict:
    """generate --json's object: the first sample and the stats, plus every sample when several."""
    out = {
        "prompt": args.prompt,
        "text": result.texts[0],
        "tokens": result.tokens[0],
        "finish_reason": result.finish_reasons[0],
        "stats": result.stats,
    }
    if args.num_samples > 1:
        out["samples"] = [
            {"text": t, "tokens": o, "finish_reason": f}
            for t, o, f in zip(result.texts, result.tokens, result.finish_reasons)
        ]
    return out


def _print_generated(args, result, n_ctx: int) -> None:
    """generate's console output: the samples (or --show's rounds), one stats line, why it stopped."""
    from rich.console import Console

    console = Console(highlight=False)
    if args.show:
        from nanospec.cli.show import show_rounds

        show_rounds(console, result.events)
    else:
        for i, text in enumerate(result.texts):
            prefix = f"[dim]#{i}[/dim] " if len(result.texts) > 1 else ""
            console.print(f"{prefix}[bold]{escape(args.prompt)}[/bold][cyan]{escape(text)}[/cyan]")
    s = result.stats
    parts = [f"{s['tokens_per_second']} tok/s", f"compiled in {s['compile_seconds']:.1f}s"]
    if "acceptance_rate" in s:
        parts.append(
            f"acceptance rate {s['acceptance_rate']:.0%}, mean acceptance length "
            f"{s['mean_acceptance_length']:.2f}, {s['rounds']} target calls"
        )
    console.print(
        f"[dim]{s['new_tokens']} tokens in {s['generate_seconds']:.3f}s ({'; '.join(parts)})[/dim]"
    )
    stopped = _stopped_at_context(result.finish_reasons, args.max_new_tokens, n_ctx)
    if stopped:
        console.print(f"[yellow]{stopped}[/yellow]")


def _stopped_at_context(reasons: list[str], max_new: int, n_ctx: int) -> str:
    """One sentence when the context's end, not --max-new-tokens, stopped some samples."""
    n = reasons.count("context")
    if not n:
        return ""
    which = "the sample" if len(reasons) == 1 else f"{n} of {len(reasons)} samples"
    return (
        f"Stopped {which} at the end of the model's {n_ctx}-token context, before "
        f'--max-new-tokens {max_new} (finish_reason "context").'
    )


class _progress:
    """A progress bar on stderr while many samples are drawn in chunks (samples.py); nothing
    for a handful of samples. Used as `with _progress(n) as progress: ... progress(done, n)`."""

    def __init__(self, n: int):
        self.n, self.bar, self.task = n, None, None

    def __enter__(self):
        if self.n < 1000:
            return None
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("sampling", total=self.n)
        return lambda done, total: self.bar.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def cmd_train(args) -> None:
    """`nanospec train`: the tokenizer, a model or the draft heads, from scratch; one summary line."""
    from nanospec.training.lm import TrainConfig, train, train_tokenizer

    command = "nanospec " + shlex.join(sys.argv[1:])
    if args.what == "heads":
        _train_heads(args, command)
        return
    if args.what == "tokenizer":
        tok = train_tokenizer(args.checkpoints, args.vocab_size, command=command)
        print(f"tokenizer: {tok.vocab_size} tokens -> {Path(args.checkpoints) / 'tokenizer.json'}")
        return
    tc = TrainConfig.preset(args.what)
    if args.steps is not None:
        from dataclasses import replace

        tc = replace(tc, steps=args.steps)
    info = train(
        args.what, args.checkpoints, args.work_dir, tc, command=command, resume=not args.no_resume
    )
    print(
        f"{args.what}: {info['params']:,} params, {info['tokens_seen']:,} tokens, "
        f"{info['wall_seconds']:.0f}s, train loss {info['final_train_loss']:.3f}, "
        f"val loss {info['final_val_loss']:.3f}"
    )


def _train_heads(args, command: str) -> None:
    """`nanospec train heads [--kinds ...]`: train them, then one line per head with its acceptance."""
    from nanospec.heads.modules import KINDS
    from nanospec.training.heads import HeadsTrainConfig, acceptance_probe, train_heads

    hc = HeadsTrainConfig() if args.steps is None else HeadsTrainConfig(steps=args.steps)
    kinds = [k.strip() for k in (args.kinds or "medusa,eagle,mtp").split(",") if k.strip()]
    if not kinds or any(k not in KINDS for k in kinds):
        raise UserError(
            f"--kinds takes a comma-separated list of medusa, eagle, mtp; got {args.kinds!r}."
        )
    infos = train_heads(
        args.checkpoints,
        hc,
        command=command,
        kinds=kinds,
        evaluate=lambda kind: acceptance_probe(args.checkpoints, kind),
    )
    for kind, info in infos.items():
        acc = info["acceptance_on_validation"]
        print(
            f"{kind}: {info['params']:,} params, val loss {info['final_val_loss']:.3f}, "
            f"greedy γ={acc['gamma']} on fresh facts prompts: acceptance "
            f"{acc['acceptance_rate']:.0%}, {acc['mean_acceptance_length']:.2f} tokens/round"
        )


def cmd_eval(args) -> None:
    """`nanospec eval`: fact and function-word accuracy of the shipped models, as a table."""
    from nanospec.measure.evaluate import check_models, run_eval
    from nanospec.measure.tables import console_for

    alone = args.target is not None and args.draft is None  # the shipped draft cannot pair
    default = "target" if alone else "target,draft"
    given = default if args.models is None else args.models  # "" is a mistake, not the default
    names = [n.strip() for n in given.split(",") if n.strip()]
    check_models(names)  # before loading anything
    run_eval(
        load_bundle(args, names),
        names,
        json_path=args.json,
        console=console_for(args.wide),
        wide=args.wide or None,
    )


def cmd_bench(args) -> None:
    """`nanospec bench`: time the methods on each workload, print the tables, write --json."""
    from nanospec.decode import needs
    from nanospec.fileio import atomic_write
    from nanospec.measure.bench import run_bench
    from nanospec.measure.tables import console_for

    methods, workloads = _bench_methods(args.methods), _bench_workloads(args.workload)
    gammas = int_list(args.gamma, "--gamma", 1, 32)
    check_sampling(args.temperature, 0, 1.0)
    bundle = load_bundle(args, sorted({n for m in methods for n in needs(m)}))
    trees = {text: tree_from_widths(text) for text in (args.tree or [])}
    console = console_for(args.wide)  # a file or a pipe gets the wide table (measure/tables.py)
    reports = [
        run_bench(
            bundle,
            methods,
            gammas,
            temperature=args.temperature,
            workload=w,
            tokens=args.tokens,
            repeats=args.repeats,
            n_prompts=args.prompts,
            trees=trees,
            console=console,
            wide=args.wide or None,
        )
        for w in workloads
    ]
    if args.json:  # one workload: its report; several: {"reports": [...]}
        out = reports[0] if len(reports) == 1 else {"reports": reports}
        atomic_write(args.json, json.dumps(out, indent=2))


def _bench_methods(text: str) -> list[str]:
    """bench --methods ar,draft -> ["ar", "draft"], every one a known method."""
    from nanospec.methods import METHODS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UserError(f"--methods takes a comma-separated list of {', '.join(METHODS)}.")
    return methods


def _bench_workloads(text: str) -> list[str]:
    """bench --workload facts,code (or all) -> the workload names, every one known."""
    from nanospec.measure.workloads import WORKLOADS

    workloads = (
        list(WORKLOADS) if text == "all" else [w.strip() for w in text.split(",") if w.strip()]
    )
    if not workloads or any(w not in WORKLOADS for w in workloads):
        raise UserError(
            f"--workload takes 'all' or a comma-separated list of "
            f"{', '.join(WORKLOADS)}, got {text!r}."
        )
    return workloads


def cmd_exercise(args) -> int:
    """`nanospec exercise list` / `check N [--file PATH]`: exit 1 when a check fails."""
    from nanospec.exercises.sheet import check, listing

    if args.action == "list":
        for number, signature, stub in listing():
            print(f"{number}  {signature:<58} {stub}")
        return 0
    if args.number is None:
        raise UserError("Say which exercise to check, e.g. `nanospec exercise check 1`.")
    return 0 if check(args.number, args.file) else 1
