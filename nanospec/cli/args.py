"""Reading the command line's values: argparse types, list and tree flags, sampling settings.

Shared by the `nanospec` commands (cli/__init__.py, commands.py) and the visualiser's `demo`. Each
check raises what the user can act on: argparse's ArgumentTypeError while parsing, UserError
after, both printed as one sentence with exit code 2.
"""

import argparse

from nanospec.errors import UserError
from nanospec.settings import INT32_MAX, SettingError, check_settings


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
    """An argparse type: any number."""
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """sampling.check_settings, its sentence naming the flag (top_k -> --top-k)."""
    try:
        check_settings(temperature, top_k, top_p)
    except SettingError as e:
        raise UserError(str(e).replace(e.field, flag(e.field), 1)) from None


def flag(field: str) -> str:
    """The flag that sets a setting: top_k -> --top-k."""
    return "--" + field.replace("_", "-")


def int_list(text: str, flag: str, lo: int, hi: int) -> list[int]:
    """--flag 1,2,4 -> [1, 2, 4], every value in [lo, hi]."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated whole numbers, got {text!r}.") from None
    if not values or not all(lo <= v <= hi for v in values):
        raise UserError(f"{flag} values must be between {lo} and {hi}, got {text!r}.")
    return values


def tree_from_widths(text: str):
    """--tree 3,2,1 -> Tree.from_branching((3, 2, 1)); a shape it cannot build is a UserError."""
    from nanospec.trees.tree import Tree

    widths = int_list(text, "--tree", 1, 16)
    try:
        return Tree.from_branching(widths)
    except ValueError as e:
        raise UserError(str(e)) from None


def parse_tree(args):
    """generate's --tree 3,2,1 -> Tree.from_branching((3, 2, 1)); None without --tree."""
    if args.tree is None:
        if args.siblings is not None:
            raise UserError(
                "--siblings chooses how a token tree's siblings are drafted; it needs --tree."
            )
        return None
    if args.gamma is not None:
        raise UserError("--tree sets how deep drafting goes (one width per level); drop --gamma.")
    return tree_from_widths(args.tree)


def ssd_options(args):
    """generate's --fanout, --saguaro-c and --backup as ssd.SSDOptions (they need --method ssd);
    the fan-out's shape is checked against γ when the loop is built."""
    from nanospec.ssd.fanout import SSDOptions

    given = {
        name: value
        for name, value in (
            ("fanout", args.fanout),
            ("saguaro_c", args.saguaro_c),
            ("backup", args.backup),
        )
        if value is not None
    }
    if given and args.method != "ssd":
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UserError(f"{flags} set speculative speculative decoding; add --method ssd.")
    if not 0 < given.get("saguaro_c", 1.0) <= 1:
        raise UserError(f"--saguaro-c must be in (0, 1], got {given['saguaro_c']}.")
    return SSDOptions(**given)


def add_model_flags(parser) -> None:
    """--target and --draft: Hugging Face GPT-2-family folders in place of the shipped models
    (generate, bench, eval, serve and the visualiser's demo take them)."""
    parser.add_argument(
        "--target",
        default=None,
        metavar="FOLDER",
        help="a GPT-2-family model folder (config.json, model.safetensors, tokenizer.json) "
        "in place of the shipped target; `nanospec models pull gpt2` fetches one",
    )
    parser.add_argument(
        "--draft",
        default=None,
        metavar="FOLDER",
        help="a GPT-2-family folder in place of the shipped draft (it must share the "
        "target's tokenizer)",
    )


def load_bundle(args, names, skip: bool = False):
    """decode.Bundle.load with the run's --checkpoints, --target and --draft."""
    from nanospec.decode import Bundle

    return Bundle.load(
        args.checkpoints,
        names,
        target=getattr(args, "target", None),
        draft=getattr(args, "draft", None),
        skip=skip,
    )
