"""The `nanospec` command line.

    nanospec generate --prompt TEXT [--method ar|draft] [--gamma K] [--max-new-tokens N]
                      [--temperature T] [--top-k K] [--top-p P] [--seed S] [--num-samples N]
                      [--json] [--trace FILE.jsonl] [--show]
    nanospec train {tokenizer,target,draft} [--steps N] [--no-resume]
    nanospec eval  [--models target,draft]          facts and function-word accuracy
    nanospec bench [--methods ar,draft] [--gamma 1,2,4,6,8] [--temperature T]
                   [--workload facts|repetitive|code] [--json FILE]

Every problem a user can fix (bad path, bad prompt, out-of-range setting) is reported as one
sentence on stderr with exit code 2 — never a traceback.
"""

import argparse
import importlib.metadata
import json
import shlex
import sys
from pathlib import Path

from rich.markup import escape

from nanospec import compile_cache
from nanospec.errors import UserError

DEFAULT_CKPT = Path(__file__).resolve().parent.parent / "checkpoints"


INT32_MAX = 2**31 - 1


def int_in(lo: int, hi: int = INT32_MAX):
    """An argparse type: a whole number in [lo, hi] (JAX holds these as int32)."""
    def parse(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {s!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {v}")
        return v
    return parse


def float_arg(s):
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """The one place sampling settings are validated (CLI, demo and benchmarks share it)."""
    if not temperature >= 0:  # also rejects NaN
        raise UserError(f"--temperature must be 0 (greedy) or positive, got {temperature}.")
    if top_k < 0:
        raise UserError(f"--top-k must be 0 (off) or positive, got {top_k}.")
    if not 0 < top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1], got {top_p}.")


def cmd_generate(args) -> None:
    from nanospec.decode import Bundle, decode, needs
    from nanospec.fileio import check_output
    from nanospec.trace import write_jsonl

    check_sampling(args.temperature, args.top_k, args.top_p)
    if not args.prompt:
        raise UserError("The prompt is empty; give at least one token of text.")
    if args.json and args.show:
        raise UserError("--json prints one JSON object and --show prints the rounds in colour; "
                        "choose one (--trace FILE.jsonl keeps the rounds beside --json).")
    if args.trace:
        check_output(args.trace, ".jsonl", "--trace")
    tree = parse_tree(args)
    bundle = Bundle.load(args.checkpoints, needs(args.method))
    with _progress(args.num_samples) as progress:
        result = decode(bundle, args.prompt, method=args.method, gamma=args.gamma or 4,
                        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        seed=args.seed, max_new=args.max_new_tokens, num_samples=args.num_samples,
                        with_events=bool(args.trace or args.show), tree=tree,
                        top=args.siblings != "sample", progress=progress)
    if args.trace:
        write_jsonl(args.trace, result.events)
    if args.json:
        out = {"prompt": args.prompt, "text": result.texts[0], "tokens": result.tokens[0],
               "finish_reason": result.finish_reasons[0], "stats": result.stats}
        if args.num_samples > 1:
            out["samples"] = [{"text": t, "tokens": o, "finish_reason": f}
                              for t, o, f in zip(result.texts, result.tokens, result.finish_reasons)]
        print(json.dumps(out, ensure_ascii=False))
        return
    from rich.console import Console
    console = Console(highlight=False)
    if args.show:
        from nanospec.show import show_rounds
        show_rounds(console, result.events)
    else:
        for i, text in enumerate(result.texts):
            prefix = f"[dim]#{i}[/dim] " if len(result.texts) > 1 else ""
            console.print(f"{prefix}[bold]{escape(args.prompt)}[/bold][cyan]{escape(text)}[/cyan]")
    s = result.stats
    parts = [f"{s['tokens_per_second']} tok/s", f"compiled in {s['compile_seconds']:.1f}s"]
    if "acceptance_rate" in s:
        parts.append(f"acceptance rate {s['acceptance_rate']:.0%}, mean acceptance length "
                     f"{s['mean_acceptance_length']:.2f}, {s['rounds']} target calls")
    console.print(f"[dim]{s['new_tokens']} tokens in {s['generate_seconds']:.3f}s "
                  f"({'; '.join(parts)})[/dim]")
    stopped = _stopped_at_context(result.finish_reasons, args.max_new_tokens,
                                  bundle.models["target"][0].n_ctx)
    if stopped:
        console.print(f"[yellow]{stopped}[/yellow]")


def _stopped_at_context(reasons: list[str], max_new: int, n_ctx: int) -> str:
    """One sentence when the context's end, not --max-new-tokens, stopped some samples."""
    n = reasons.count("context")
    if not n:
        return ""
    which = "the sample" if len(reasons) == 1 else f"{n} of {len(reasons)} samples"
    return (f"Stopped {which} at the end of the model's {n_ctx}-token context, before "
            f"--max-new-tokens {max_new} (finish_reason \"context\").")


class _progress:
    """A progress bar on stderr while many samples are drawn in chunks (measure/samples.py); nothing
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


def parse_tree(args):
    """--tree 3,2,1 -> Tree.from_branching((3, 2, 1)); None without --tree."""
    if args.tree is None:
        if args.siblings is not None:
            raise UserError("--siblings chooses how a token tree's siblings are drafted; "
                            "it needs --tree.")
        return None
    if args.gamma is not None:
        raise UserError("--tree sets how deep drafting goes (one width per level); drop --gamma.")
    from nanospec.trees.tree import Tree
    widths = _int_list(args.tree, "--tree", 1, 16)
    try:
        return Tree.from_branching(widths)
    except ValueError as e:
        raise UserError(str(e)) from None


def cmd_train(args) -> None:
    from nanospec.training.lm import TrainConfig, train, train_tokenizer

    command = "nanospec " + shlex.join(sys.argv[1:])
    if args.what == "heads":
        from nanospec.heads.modules import KINDS
        from nanospec.training.heads import HeadsTrainConfig, acceptance_probe, train_heads
        hc = HeadsTrainConfig() if args.steps is None else HeadsTrainConfig(steps=args.steps)
        kinds = [k.strip() for k in (args.kinds or "medusa,eagle,mtp").split(",") if k.strip()]
        if not kinds or any(k not in KINDS for k in kinds):
            raise UserError(f"--kinds takes a comma-separated list of medusa, eagle, mtp; "
                            f"got {args.kinds!r}.")
        infos = train_heads(args.checkpoints, hc, command=command, kinds=kinds,
                            evaluate=lambda kind: acceptance_probe(args.checkpoints, kind))
        for kind, info in infos.items():
            acc = info["acceptance_on_validation"]
            print(f"{kind}: {info['params']:,} params, val loss {info['final_val_loss']:.3f}, "
                  f"greedy γ={acc['gamma']} on fresh facts prompts: acceptance "
                  f"{acc['acceptance_rate']:.0%}, {acc['mean_acceptance_length']:.2f} tokens/round")
        return
    if args.what == "tokenizer":
        tok = train_tokenizer(args.checkpoints, args.vocab_size, command=command)
        print(f"tokenizer: {tok.vocab_size} tokens -> {Path(args.checkpoints) / 'tokenizer.json'}")
        return
    tc = TrainConfig.preset(args.what)
    if args.steps is not None:
        from dataclasses import replace
        tc = replace(tc, steps=args.steps)
    info = train(args.what, args.checkpoints, args.work_dir, tc, command=command,
                 resume=not args.no_resume)
    print(f"{args.what}: {info['params']:,} params, {info['tokens_seen']:,} tokens, "
          f"{info['wall_seconds']:.0f}s, train loss {info['final_train_loss']:.3f}, "
          f"val loss {info['final_val_loss']:.3f}")


def cmd_eval(args) -> None:
    from nanospec.measure.evaluate import check_models, run_eval
    from nanospec.measure.tables import console_for
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    check_models(names)  # before loading anything
    run_eval(args.checkpoints, names, json_path=args.json, console=console_for(args.wide),
             wide=args.wide or None)


def cmd_bench(args) -> None:
    from nanospec.measure.bench import run_bench
    from nanospec.decode import METHODS, Bundle, needs
    from nanospec.fileio import atomic_write
    from nanospec.measure.tables import console_for
    from nanospec.measure.workloads import WORKLOADS

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UserError(f"--methods takes a comma-separated list of {', '.join(METHODS)}.")
    workloads = list(WORKLOADS) if args.workload == "all" else [
        w.strip() for w in args.workload.split(",") if w.strip()]
    if not workloads or any(w not in WORKLOADS for w in workloads):
        raise UserError(f"--workload takes 'all' or a comma-separated list of "
                        f"{', '.join(WORKLOADS)}, got {args.workload!r}.")
    gammas = _int_list(args.gamma, "--gamma", 1, 32)
    check_sampling(args.temperature, 0, 1.0)
    bundle = Bundle.load(args.checkpoints, sorted({n for m in methods for n in needs(m)}))
    trees = {}
    for text in (args.tree or []):
        from nanospec.trees.tree import Tree
        try:
            trees[text] = Tree.from_branching(_int_list(text, "--tree", 1, 16))
        except ValueError as e:
            raise UserError(str(e)) from None
    console = console_for(args.wide)  # a file or a pipe gets the wide table (measure/tables.py)
    reports = [run_bench(bundle, methods, gammas, temperature=args.temperature, workload=w,
                         tokens=args.tokens, repeats=args.repeats, n_prompts=args.prompts,
                         trees=trees, console=console, wide=args.wide or None)
               for w in workloads]
    if args.json:  # one workload: its report; several: {"reports": [...]}
        out = reports[0] if len(reports) == 1 else {"reports": reports}
        atomic_write(args.json, json.dumps(out, indent=2))


def _int_list(text: str, flag: str, lo: int, hi: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated whole numbers, got {text!r}.") from None
    if not values or not all(lo <= v <= hi for v in values):
        raise UserError(f"{flag} values must be between {lo} and {hi}, got {text!r}.")
    return values


# The methods as the CLI lists them (decode.METHODS is the same list; cli.py avoids importing
# JAX just to build the parser).
METHOD_HELP = {"ar": "autoregressive", "draft": "speculative with the draft model",
               "ngram": "prompt lookup", "medusa": "Medusa heads", "eagle": "EAGLE head",
               "mtp": "multi-token prediction heads"}


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that a mistake is one sentence, like every other nanospec error.

    Stock argparse prints its usage block before the error line; `--help` still shows it.
    """

    def error(self, message: str):
        self.exit(2, f"nanospec: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="nanospec", description="Speculative decoding, from scratch.")
    p.add_argument("--checkpoints", default=str(DEFAULT_CKPT), help="folder of shipped weights")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    g = sub.add_parser("generate", help="generate text from a prompt")
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int_in(1, 100_000), default=32)
    g.add_argument("--temperature", type=float_arg, default=1.0, help="0 = greedy")
    g.add_argument("--top-k", type=int_in(0), default=0, help="0 = off")
    g.add_argument("--top-p", type=float_arg, default=1.0, help="1 = off")
    g.add_argument("--seed", type=int_in(0), default=0)
    g.add_argument("--num-samples", type=int_in(1, 100_000), default=1)
    g.add_argument("--method", choices=list(METHOD_HELP), default="ar",
                   help="; ".join(f"{k} = {v}" for k, v in METHOD_HELP.items()) + " (default ar)")
    g.add_argument("--gamma", type=int_in(1, 32), default=None,
                   help="drafted tokens per round (default 4)")
    g.add_argument("--tree", default=None, metavar="WIDTHS",
                   help="draft a token tree instead: children per node at each depth, e.g. 3,2,1")
    g.add_argument("--siblings", choices=["top", "sample"], default=None,
                   help="tree siblings: the drafter's top-k tokens (default) or i.i.d. samples")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--trace", default=None, metavar="FILE.jsonl", help="write every round's events")
    g.add_argument("--show", action="store_true", help="print the rounds (or, for ar, the steps) in colour")
    g.set_defaults(func=cmd_generate)

    t = sub.add_parser("train", help="train the tokenizer or a model from scratch")
    t.add_argument("what", choices=["tokenizer", "target", "draft", "heads"],
                   help="heads = Medusa, EAGLE and MTP heads on the shipped target")
    t.add_argument("--steps", type=int_in(1), default=None)
    t.add_argument("--kinds", default=None, help="heads only: which to train (default all)")
    t.add_argument("--vocab-size", type=int_in(257, 65536), default=2048)
    t.add_argument("--work-dir", default="runs", help="resumable training state")
    t.add_argument("--no-resume", action="store_true")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="fact and function-word accuracy of the shipped models")
    e.add_argument("--models", default="target,draft", help="target, draft or both, comma-separated")
    e.add_argument("--json", default=None, help="also write the results here")
    e.add_argument("--wide", action="store_true", help="one wide table, however narrow the terminal")
    e.set_defaults(func=cmd_eval)

    b = sub.add_parser("bench", help="measure speculative speedups (prints a table, writes JSON)")
    b.add_argument("--methods", default="ar,draft", help="comma-separated: " + ",".join(METHOD_HELP))
    b.add_argument("--gamma", default="1,2,4,6,8", help="comma-separated γ values")
    b.add_argument("--temperature", type=float_arg, default=0.0)
    b.add_argument("--workload", default="facts",
                   help="facts, repetitive, code, a comma-separated list, or all")
    b.add_argument("--tokens", type=int_in(2, 128), default=64, help="new tokens per prompt")
    b.add_argument("--prompts", type=int_in(1, 64), default=8)
    b.add_argument("--repeats", type=int_in(1, 100), default=3)
    b.add_argument("--tree", action="append", default=None, metavar="WIDTHS",
                   help="also time this token tree (top-k siblings), e.g. 3,2,1; repeatable")
    b.add_argument("--json", default=None, metavar="FILE", help="also write the report here")
    b.add_argument("--wide", action="store_true",
                   help="one wide table, however narrow the terminal (files and pipes get it anyway)")
    b.set_defaults(func=cmd_bench)
    # Other packages add subcommands through the "nanospec.commands" entry-point group (the
    # visualiser registers `demo` this way), so this library never imports them itself.
    for entry in importlib.metadata.entry_points(group="nanospec.commands"):
        entry.load()(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    compile_cache.enable()  # before anything compiles: a repeated command loads, not compiles
    try:
        args.func(args)
    except UserError as e:
        print(f"nanospec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nanospec: interrupted.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
