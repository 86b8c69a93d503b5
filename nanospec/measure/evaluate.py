"""How good are the shipped models? Facts versus grammar (`nanospec eval`).

The project needs a contrast: the target knows the facts *and* the grammar, the draft knows
the grammar but fewer facts — so speculation accepts " is", " the", " of" and trips on facts.
Two measurements show it:

- fact accuracy: greedy continuation of a probe ("The capital of France is", "The population
  of Japan is about", ...) starts with the right answer, for every country and seven kinds of
  fact;
- function-word accuracy: teacher-forced top-1 next-token accuracy on the validation split, at
  positions whose true next token is a function word (" the", " of", ",", ...), next to the
  accuracy on all other tokens.

What this file deliberately leaves out: perplexity on outside text (there is none offline).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
from rich.console import Console

from nanospec.corpus import (
    CorpusConfig,
    build_corpus,
    capital_prompts,
    load_countries,
    people_phrase,
)
from nanospec.errors import UserError
from nanospec.fileio import atomic_write
from nanospec.generate import generate, pad_prompts
from nanospec.measure.tables import print_eval
from nanospec.model import forward
from nanospec.sampling import GREEDY
from nanospec.tokenizer import tokenize_docs

# The models eval can judge: the two language models. The heads draft from the target's
# features and are no language model on their own; `bench` measures them.
MODELS = ("target", "draft")

FUNCTION_WORDS = frozenset(
    "the a an of in on at to is are was and or but its it their there this that which with "
    "for from by as has have be also , . ; : ? ! 's".split()
)


def fact_probes() -> dict[str, list[tuple[str, str]]]:
    """Seven kinds of fact, one (prompt, answer) pair per country; answers start with a space."""
    cs = load_countries()
    return {
        "capital": capital_prompts(),
        "currency": [(f"The currency of {c.name} is the", f" {c.currency}") for c in cs],
        "language": [(f"The main language of {c.name} is", f" {c.language}") for c in cs],
        "continent": [(f"{c.name} is located in", f" {c.continent}") for c in cs],
        "demonym": [(f"A person from {c.name} is", f" {c.demonym}") for c in cs],
        "population": [
            (f"The population of {c.name} is about", f" {people_phrase(c.population_millions)}")
            for c in cs
        ],
        "neighbour": [
            (f"{c.name} shares a border with", f" {c.neighbour}")
            for c in cs
            if c.neighbour != "none"
        ],
    }


# Probes a batch. A row's KV cache holds the whole context (4.7 MB for the shipped target), and
# smaller batches stay in the CPU's caches: the shipped target's 1,298 fact probes took 8.9 s in
# one batch per kind of fact, 6.0 s in batches of 32, the same answers (2-core CPU, warm). And
# every kind of fact runs the one program.
ROWS = 32


def fact_accuracy(
    tok, cfg, graphdef, params, probes: list[tuple[str, str]]
) -> tuple[float, list[str]]:
    """Fraction of probes the model completes greedily with the right answer; and the misses."""
    ids = [tok.encode_prompt(p) for p, _ in probes]
    longest_answer = max(len(tok.encode(a)) for _, a in probes)
    outs = []
    for start in range(0, len(ids), ROWS):
        rows = ids[start : start + ROWS]
        tokens, lengths = pad_prompts(rows + [rows[0]] * (ROWS - len(rows)), cfg.n_ctx)
        done, _ = generate(
            graphdef,
            params,
            cfg,
            tokens,
            lengths,
            jax.random.key(0),
            GREEDY,
            longest_answer + 1,
            tok.eos_id,
        )
        outs += done[: len(rows)]
    misses = [
        f"{p} -> {tok.decode(o)!r} (want {a!r})"
        for (p, a), o in zip(probes, outs)
        if not tok.decode(o).startswith(a)
    ]
    return 1 - len(misses) / len(probes), misses


def capital_accuracy(tok, cfg, graphdef, params) -> tuple[float, list[str]]:
    return fact_accuracy(tok, cfg, graphdef, params, capital_prompts())


def all_fact_accuracy(tok, cfg, graphdef, params) -> dict[str, float]:
    """Accuracy per kind of fact, and over all probes together ("all")."""
    out, right, total = {}, 0, 0
    for kind, probes in fact_probes().items():
        acc, _ = fact_accuracy(tok, cfg, graphdef, params, probes)
        out[kind] = acc
        right, total = right + acc * len(probes), total + len(probes)
    out["all"] = right / total
    return out


def validation_windows(tok, n_ctx: int, n_windows: int):
    """n_windows windows of n_ctx tokens spread evenly over the validation text: the inputs
    (N, n_ctx), the token after each input position (N, n_ctx), and which of those are
    function words."""
    _, val_docs = build_corpus(CorpusConfig())
    data = tokenize_docs(tok, val_docs)
    starts = np.linspace(0, len(data) - n_ctx - 1, n_windows).astype(int)
    x = np.stack([data[s : s + n_ctx] for s in starts])
    y = np.stack([data[s + 1 : s + n_ctx + 1] for s in starts])
    is_fw = np.vectorize(lambda t: tok.token_str(t).strip().lower() in FUNCTION_WORDS)(y)
    return x, y, is_fw


def next_token_accuracy(tok, cfg, graphdef, params, n_windows: int = 64) -> dict[str, float]:
    """Teacher-forced top-1 accuracy on validation text: function words vs everything else."""
    x, y, is_fw = validation_windows(tok, cfg.n_ctx, n_windows)
    positions = jnp.broadcast_to(jnp.arange(cfg.n_ctx), x.shape)
    run = jax.jit(lambda p, x, pos: jnp.argmax(forward(graphdef, p, x, pos)[0], -1))
    pred = np.concatenate(
        [
            np.asarray(run(params, x[i : i + 8], positions[i : i + 8]))
            for i in range(0, n_windows, 8)
        ]
    )
    correct = pred == y
    return {
        "function_word_accuracy": float(correct[is_fw].mean()),
        "other_token_accuracy": float(correct[~is_fw].mean()),
        "function_word_fraction": float(is_fw.mean()),
    }


def agreement(tok, target, draft, n_windows: int = 64) -> dict[str, float]:
    """What speculation needs, on next_token_accuracy's windows (teacher-forced): how often the
    draft's likeliest token is the target's, and the mean of Σ min(p, q) at T = 1 (the chance
    that a draft sampled from q is accepted), for function words and for every other token.
    Unlike accuracy, neither looks at the text's own next token."""
    (cfg, tg, _), (_, dg, _) = target, draft
    x, _, is_fw = validation_windows(tok, cfg.n_ctx, n_windows)

    @jax.jit
    def both(tp, dp, x):
        pos = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape)
        p = jax.nn.softmax(forward(tg, tp, x, pos)[0], -1)
        q = jax.nn.softmax(forward(dg, dp, x, pos)[0], -1)
        return jnp.argmax(p, -1) == jnp.argmax(q, -1), jnp.minimum(p, q).sum(-1)

    parts = [both(target[2], draft[2], x[i : i + 8]) for i in range(0, n_windows, 8)]
    same, overlap = (np.concatenate([np.asarray(p[j]) for p in parts]) for j in (0, 1))
    return {
        f"{what}_{kind}": float(values[mask].mean())
        for what, values in (("argmax_agreement", same), ("mean_overlap", overlap))
        for kind, mask in (("function_words", is_fw), ("other_tokens", ~is_fw))
    }


def check_models(names: list[str]) -> None:
    """Refuse anything but MODELS, in one sentence, before anything is loaded."""
    if not names or any(n not in MODELS for n in names):
        raise UserError(
            f"--models takes {', '.join(MODELS)} or both, comma-separated (the heads "
            f"are measured by `nanospec bench`), got {','.join(names)!r}."
        )


def run_eval(
    bundle,
    names: list[str],
    json_path: str | None = None,
    console: Console | None = None,
    wide: bool | None = None,
) -> dict:
    """Judge each named model of `bundle` (decode.Bundle); `wide`: one row per model (None:
    whenever it fits the console)."""
    check_models(names)
    tok = bundle.tok
    results = {
        name: {"facts": all_fact_accuracy(tok, *model), **next_token_accuracy(tok, *model)}
        for name, model in bundle.models.items()
        if name in names
    }
    print_eval(console or Console(), results, list(fact_probes()) + ["all"], wide)
    if json_path:
        atomic_write(json_path, json.dumps(results, indent=2))
    return results
