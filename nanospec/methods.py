"""Every decoding method in one table, shared by every part of nanospec that picks a method.

The table is what the CLI lists, `decode` runs, the demo's m key cycles through, bench measures
and the server serves.

A method is a drafter (drafters.py's contract) and a way to put a loop together around it.
Adding one takes a module and an entry here:

    # nanospec/mine.py: a Drafter subclass with init, propose and a `load(models, name)`
    Method("mine", "what it drafts from", loads=(), drafter="nanospec.mine:Mine"),

and every command takes `--method mine`, drafting chains (or `--tree` trees, if trees/grow.py
knows it). A method that is not a chain of drafts brings its own loop builder (`loop`), as SSD
does. Names resolve only when a method is built, so the CLI can list methods without JAX.
"""

import importlib
from dataclasses import dataclass, field
from typing import Any

from nanospec.errors import UserError
from nanospec.ssd.fanout import SSDOptions

CHAIN_OR_TREE = "nanospec.methods:chain_or_tree"


@dataclass(frozen=True)
class Method:
    name: str
    help: str  # one line, for --help and the demo
    loads: tuple[str, ...] = ()  # checkpoints it needs besides the target's and the tokenizer
    drafter: str | None = None  # "module:Class", a drafters.Drafter; None: nothing drafts
    loop: str = CHAIN_OR_TREE  # "module:function"(drafter, dparams, fixed, Options) -> loop
    adaptive: bool = False  # the engine may choose its γ step by step (serve --adaptive)
    vllm: str | None = None  # its name in vLLM's --speculative-config, if vLLM has it
    refuses_tree: str | None = None  # why it takes no --tree (a drafter that cannot grow one
    #                                  says so itself: trees/grow.py)


METHODS = {
    m.name: m
    for m in (
        Method(
            "ar",
            "autoregressive",
            loop="nanospec.methods:autoregressive",
            refuses_tree="ar drafts nothing",
        ),
        Method(
            "draft",
            "speculative with the draft model",
            ("draft",),
            "nanospec.drafters:DraftModel",
            adaptive=True,
            vllm="draft_model",
        ),
        Method(
            "ngram",
            "prompt lookup",
            (),
            "nanospec.drafters:PromptLookup",
            adaptive=True,
            vllm="ngram",
        ),
        Method(
            "medusa",
            "Medusa heads",
            ("medusa",),
            "nanospec.heads.drafters:MedusaDrafter",
            vllm="medusa",
        ),
        Method(
            "eagle", "EAGLE head", ("eagle",), "nanospec.heads.drafters:EagleDrafter", vllm="eagle"
        ),
        Method(
            "mtp",
            "multi-token prediction heads",
            ("mtp",),
            "nanospec.heads.drafters:MTPDrafter",
            vllm="mtp",
        ),
        Method(
            "ssd",
            "speculative speculative decoding (the draft model pre-drafts the next round)",
            ("draft",),
            "nanospec.drafters:DraftModel",
            loop="nanospec.ssd.loop:ssd_loop",
            refuses_tree="ssd pre-drafts a chain for each outcome it guesses",
        ),
    )
}
DRAFTING = tuple(name for name, m in METHODS.items() if m.drafter)  # all but ar


@dataclass(frozen=True)
class Options:
    """How a method's loop is set: γ, or a token tree (`top`: top-k siblings, else sampled),
    and SSD's settings (a geometric fan-out reads the temperature)."""

    gamma: int = 4
    tree: Any = None  # trees.tree.Tree
    top: bool = True
    ssd: SSDOptions = field(default_factory=SSDOptions)
    temperature: float = 1.0


def method_of(name: str) -> Method:
    """The method called `name`, or a UserError that lists them."""
    if name not in METHODS:
        raise UserError(f"Unknown method {name!r}; choose one of {', '.join(METHODS)}.")
    return METHODS[name]


def needs(name: str) -> list[str]:
    """The checkpoint files a method loads besides the tokenizer."""
    return ["target", *method_of(name).loads]


def resolve(path: str):
    """ "module:name" -> the object (imported only now)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def build(name: str, models: dict, fixed: dict, options: Options = Options()):
    """(the loop that runs method `name`, its drafter's params). `models` holds the loaded
    checkpoints ({name: (cfg, graphdef, params)}, decode.Bundle), `fixed` the target's
    fields every loop has (graphdef, cfg, eos_id, capacity, shared)."""
    m = method_of(name)
    if options.tree is not None and m.refuses_tree:
        raise UserError(f"{m.refuses_tree}; drop --tree or choose another drafting method.")
    drafter, dparams = None, ()
    if m.drafter:
        drafter, params = resolve(m.drafter).load(models, name)
        dparams = drafter.prepare(params, models["target"][2])
    return resolve(m.loop)(drafter, dparams, fixed, options), dparams


def autoregressive(drafter, dparams, fixed: dict, o: Options):
    from nanospec.generate import Decoder

    return Decoder(**fixed)


def chain_or_tree(drafter, dparams, fixed: dict, o: Options):
    """γ drafts in a row (speculative.Speculator), or `o.tree` (trees/loop.TreeSpeculator)."""
    if o.tree is not None:
        from nanospec.trees.loop import TreeSpeculator

        return TreeSpeculator(drafter=drafter, tree=o.tree, top=o.top, **fixed)
    from nanospec.speculative import Speculator

    return Speculator(drafter=drafter, gamma=o.gamma, **fixed)
