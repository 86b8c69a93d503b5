"""The `nanospec` command line.

    nanospec generate --prompt TEXT [--method ar|draft|ngram|medusa|eagle|mtp|ssd] [--gamma K]
                      [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]
                      [--seed S] [--num-samples N] [--json] [--trace FILE.jsonl] [--show]
                      [--tree WIDTHS] [--fanout F] [--saguaro-c C] [--backup neural|fast]
                      [--target FOLDER] [--draft FOLDER]     (also on eval, bench, serve, demo)
    nanospec train {tokenizer,target,draft} [--steps N] [--no-resume]
    nanospec eval  [--models target,draft]          facts and function-word accuracy
    nanospec bench [--methods ar,draft] [--gamma 1,2,4,6,8] [--temperature T]
                   [--workload facts|repetitive|code] [--json FILE]
    nanospec exercise list | check N [--file PATH]  the workshop's exercises (exit 1: a check failed)
    nanospec export-hf --model target|draft --out FOLDER    a folder transformers loads
    nanospec models pull NAME                       fetch gpt2, distilgpt2, ... (needs the network)
    nanospec serve [--host H] [--port P] [--method M] [--gamma K] [--adaptive]
                   [--speculative-config JSON] [--slots S] [--max-queue Q]
                   [--served-model-name NAME]                    an OpenAI-compatible server
    nanospec loadtest [--strategies ar,draft,adaptive,vllm-disable] [--workloads facts,mixed]
                      [--concurrency 1,2,4,...,64] [--requests-per-level N] [--max-tokens N]
                      [--temperature T] [--rates R1,R2] [--json FILE] [--plots DIR]
                      [--url URL [--label NAME] [--api-key KEY]]  load `nanospec serve`

FOLDER is a Hugging Face GPT-2-family model folder (hf/folder.py), in place of a shipped model.

Every problem a user can fix (bad path, bad prompt, out-of-range setting) is reported as one
sentence on stderr with exit code 2 — never a traceback.

This file builds the parser and runs a command; what each command does is in cli/commands.py,
and reading flag values (with the sampling checks the demo shares) in cli/args.py.
"""

import argparse
import importlib.metadata
import sys

from nanospec import SHIPPED, compile_cache

# check_sampling, int_in and float_arg are imported from here by the visualiser (viz/) and tests.
from nanospec.cli.args import add_model_flags, check_sampling, float_arg, int_in  # noqa: F401
from nanospec.cli.commands import (
    cmd_bench,
    cmd_eval,
    cmd_exercise,
    cmd_generate,
    cmd_train,
)
from nanospec.cli.hf import add_export_hf, add_models
from nanospec.errors import UserError
from nanospec.methods import METHODS

DEFAULT_CKPT = SHIPPED


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that a mistake is one sentence, like every other nanospec error.

    Stock argparse prints its usage block before the error line; `--help` still shows it.
    """

    def error(self, message: str):
        self.exit(2, f"nanospec: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole `nanospec` parser: the shared --checkpoints, then one subparser per command."""
    p = OneLineParser(prog="nanospec", description="Speculative decoding, from scratch.")
    p.add_argument("--checkpoints", default=str(DEFAULT_CKPT), help="folder of shipped weights")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for add in (
        add_generate,
        add_train,
        add_eval,
        add_bench,
        add_exercise,
        add_serve,
        add_loadtest,
        add_export_hf,
        add_models,
    ):
        add(sub)
    # Other packages add subcommands through the "nanospec.commands" entry-point group (the
    # visualiser registers `demo` this way), so this library never imports them itself.
    for entry in importlib.metadata.entry_points(group="nanospec.commands"):
        entry.load()(sub)
    return p


def add_generate(sub) -> None:
    """`nanospec generate`'s arguments."""
    g = sub.add_parser("generate", help="generate text from a prompt")
    g.add_argument("--prompt", required=True)
    add_model_flags(g)
    g.add_argument("--max-new-tokens", type=int_in(1, 100_000), default=32)
    g.add_argument("--temperature", type=float_arg, default=1.0, help="0 = greedy")
    g.add_argument("--top-k", type=int_in(0), default=0, help="0 = off")
    g.add_argument("--top-p", type=float_arg, default=1.0, help="1 = off")
    g.add_argument("--seed", type=int_in(0), default=0)
    g.add_argument("--num-samples", type=int_in(1, 100_000), default=1)
    g.add_argument(
        "--ignore-eos",
        action="store_true",
        help="go on past <|endoftext|> to --max-new-tokens (fixed-length runs)",
    )
    g.add_argument(
        "--method",
        choices=list(METHODS),
        default="ar",
        help="; ".join(f"{k} = {m.help}" for k, m in METHODS.items()) + " (default ar)",
    )
    g.add_argument(
        "--gamma", type=int_in(1, 32), default=None, help="drafted tokens per round (default 4)"
    )
    g.add_argument(
        "--tree",
        default=None,
        metavar="WIDTHS",
        help="draft a token tree instead: children per node at each depth, e.g. 3,2,1",
    )
    g.add_argument(
        "--siblings",
        choices=["top", "sample"],
        default=None,
        help="tree siblings: the drafter's top-k tokens (default) or i.i.d. samples",
    )
    g.add_argument(
        "--fanout",
        default=None,
        metavar="F|F0,..,Fγ|geometric:BUDGET",
        help="ssd: tokens t* cached per k accepted (default 1)",
    )
    g.add_argument(
        "--saguaro-c",
        type=float_arg,
        default=None,
        metavar="C",
        help="ssd: draw drafts with their likeliest tokens scaled by C in (0, 1]",
    )
    g.add_argument(
        "--backup",
        choices=["neural", "fast"],
        default=None,
        help="ssd: what drafts after a cache miss (default neural: the draft model)",
    )
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--trace", default=None, metavar="FILE.jsonl", help="write every round's events")
    g.add_argument(
        "--show", action="store_true", help="print the rounds (or, for ar, the steps) in colour"
    )
    g.set_defaults(func=cmd_generate)


def add_train(sub) -> None:
    """`nanospec train`'s arguments."""
    t = sub.add_parser("train", help="train the tokenizer or a model from scratch")
    t.add_argument(
        "what",
        choices=["tokenizer", "target", "draft", "heads"],
        help="heads = Medusa, EAGLE and MTP heads on the shipped target",
    )
    t.add_argument("--steps", type=int_in(1), default=None)
    t.add_argument("--kinds", default=None, help="heads only: which to train (default all)")
    t.add_argument("--vocab-size", type=int_in(257, 65536), default=2048)
    t.add_argument("--work-dir", default="runs", help="resumable training state")
    t.add_argument("--no-resume", action="store_true")
    t.set_defaults(func=cmd_train)


def add_eval(sub) -> None:
    """`nanospec eval`'s arguments."""
    e = sub.add_parser("eval", help="fact and function-word accuracy of the shipped models")
    e.add_argument(
        "--models",
        default=None,
        help="target, draft or both, comma-separated (default both; with --target and no "
        "--draft, the target)",
    )
    add_model_flags(e)
    e.add_argument("--json", default=None, help="also write the results here")
    e.add_argument(
        "--wide", action="store_true", help="one wide table, however narrow the terminal"
    )
    e.set_defaults(func=cmd_eval)


def add_bench(sub) -> None:
    """`nanospec bench`'s arguments."""
    b = sub.add_parser("bench", help="measure speculative speedups (prints a table, writes JSON)")
    b.add_argument("--methods", default="ar,draft", help="comma-separated: " + ",".join(METHODS))
    add_model_flags(b)
    b.add_argument("--gamma", default="1,2,4,6,8", help="comma-separated γ values")
    b.add_argument("--temperature", type=float_arg, default=0.0)
    b.add_argument(
        "--workload",
        default="facts",
        help="facts, repetitive, code, a comma-separated list, or all",
    )
    b.add_argument("--tokens", type=int_in(2, 128), default=64, help="new tokens per prompt")
    b.add_argument("--prompts", type=int_in(1, 64), default=8)
    b.add_argument("--repeats", type=int_in(1, 100), default=3)
    b.add_argument(
        "--tree",
        action="append",
        default=None,
        metavar="WIDTHS",
        help="also time this token tree (top-k siblings), e.g. 3,2,1; repeatable",
    )
    b.add_argument("--json", default=None, metavar="FILE", help="also write the report here")
    b.add_argument(
        "--wide",
        action="store_true",
        help="one wide table, however narrow the terminal (files and pipes get it anyway)",
    )
    b.set_defaults(func=cmd_bench)


def add_exercise(sub) -> None:
    """`nanospec exercise`'s arguments (the workshop track in lessons/exercises/)."""
    x = sub.add_parser("exercise", help="list the workshop exercises or check your solution")
    x.add_argument("action", choices=["list", "check"])
    x.add_argument(
        "number", nargs="?", type=int_in(1, 99), default=None, help="which exercise to check"
    )
    x.add_argument(
        "--file",
        default=None,
        metavar="PATH",
        help="check this file (default: the exercise's own file in lessons/exercises/)",
    )
    x.set_defaults(func=cmd_exercise)


def add_serve(sub) -> None:
    """`nanospec serve`'s arguments (the command is serving/launch.py, the server server.py)."""
    s = sub.add_parser("serve", help="serve the models over HTTP: OpenAI's completions API")
    s.add_argument("--host", default="127.0.0.1")
    add_model_flags(s)
    s.add_argument("--port", type=int_in(0, 65535), default=8000)
    s.add_argument(
        "--method",
        choices=list(METHODS),
        default=None,
        help="how to decode (default ar); see generate --help",
    )
    s.add_argument(
        "--gamma", type=int_in(1, 32), default=None, help="drafted tokens per round (default 4)"
    )
    s.add_argument(
        "--adaptive",
        action="store_true",
        help="choose γ (0 = plain decoding, up to --gamma) every step by goodput; "
        "--method draft or ngram",
    )
    s.add_argument(
        "--speculative-config",
        default=None,
        metavar="JSON",
        help="vLLM's form instead of --method/--gamma, e.g. "
        '\'{"method": "draft_model", "num_speculative_tokens": 4}\'',
    )
    s.add_argument("--slots", type=int_in(1, 256), default=8, help="requests decoded at once")
    s.add_argument(
        "--max-model-len",
        type=int_in(2, 1_000_000),
        default=None,
        help="tokens a request may hold, prompt and completion (default the model's "
        "context): each slot's cache is sized to it",
    )
    s.add_argument(
        "--max-queue",
        type=int_in(0, 100_000),
        default=64,
        help="requests that may wait for a slot; past that: 429",
    )
    s.add_argument("--served-model-name", default="nanospec", help="the API's model name")
    s.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="clients must send Authorization: Bearer KEY to /v1 and /tokenize, "
        "/detokenize (default: $NANOSPEC_API_KEY; unset: no key)",
    )
    s.set_defaults(func=run_serve)


def add_loadtest(sub) -> None:
    """`nanospec loadtest`'s arguments (load/loadtest.py)."""
    t = sub.add_parser(
        "loadtest",
        help="load `nanospec serve` over HTTP: throughput and "
        "latency percentiles against concurrency",
    )
    t.add_argument(
        "--strategies",
        default=None,
        help="comma-separated: ar, draft (fixed γ), adaptive, vllm-disable (default all)",
    )
    t.add_argument(
        "--method",
        default=None,
        help="the speculative strategies' drafter: draft (the draft model), ngram "
        "(prompt lookup) or eagle (ar,draft only)",
    )
    t.add_argument("--workloads", default="facts", help="facts, repetitive, code, mixed")
    t.add_argument(
        "--concurrency",
        default="1,2,4,8,16,32,64",
        help="closed-loop clients at each level, comma-separated",
    )
    t.add_argument(
        "--requests-per-level",
        type=int_in(1, 100_000),
        default=128,
        help="closed loop: at least the largest --concurrency (default 128: the "
        "default sweep takes about 12 minutes on 2 cores)",
    )
    t.add_argument("--max-tokens", type=int_in(1, 4096), default=32)
    t.add_argument(
        "--ignore-eos",
        action="store_true",
        help="every request goes on past <|endoftext|> to --max-tokens (vLLM's "
        "ignore_eos: fixed-length runs)",
    )
    t.add_argument("--temperature", type=float_arg, default=0.0, help="0 = greedy")
    t.add_argument(
        "--rates",
        default=None,
        metavar="R1,R2",
        help="also open-loop Poisson arrivals at these requests/s",
    )
    t.add_argument("--gamma", type=int_in(1, 32), default=4, help="drafts a round")
    t.add_argument(
        "--disable-at",
        type=int_in(1, 100_000),
        default=16,
        help="vllm-disable: plain decoding from this many running requests",
    )
    t.add_argument(
        "--slots",
        type=int_in(1, 256),
        default=None,
        help="one server of this many slots per strategy (default: slots = clients)",
    )
    t.add_argument(
        "--max-model-len",
        type=int_in(2, 1_000_000),
        default=None,
        help="the servers' --max-model-len: each slot's cache (default the context)",
    )
    t.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="write the report here (default runs/loadtest.json)",
    )
    t.add_argument("--plots", default=None, metavar="DIR", help="also write SVG plots here")
    t.add_argument("--url", default=None, help="load this running server instead")
    t.add_argument("--label", default=None, help="with --url: the name in the report")
    t.add_argument(
        "--api-key",
        metavar="KEY",
        help="with --url: the server's key, sent as Authorization: Bearer KEY "
        "(default: $NANOSPEC_API_KEY)",
    )

    def run(args):  # the load generator (httpx, rich's progress) is imported only to run it
        from nanospec.cli.loadtest import cmd_loadtest

        return cmd_loadtest(args)

    t.set_defaults(func=run)


def run_serve(args):
    """Import the server (FastAPI, JAX) only when serving."""
    from nanospec.serving.launch import cmd_serve

    return cmd_serve(args)


def main(argv: list[str] | None = None) -> int:
    """Run one `nanospec` command; the exit code (2: a mistake the user can fix, told in one line)."""
    args = build_parser().parse_args(argv)
    compile_cache.enable()  # before anything compiles: a repeated command loads, not compiles
    try:
        code = args.func(args)
    except UserError as e:
        print(f"nanospec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nanospec: interrupted.", file=sys.stderr)
        return 130
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
