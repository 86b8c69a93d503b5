"""One entry point for every decoding method: what the CLI, the demo and the lessons call.

    result = decode(bundle, prompt, method="draft", gamma=4, temperature=0.0, max_new=32)

`Bundle` holds the tokenizer and the loaded models. `decode` picks the driver: the fused loop
when only the output and the counters are wanted, the step-wise generator when every round's
events are wanted (`with_events=True`, for --trace, --show, the visualiser). Both produce the
same tokens for the same seed, so asking for events never changes the text.

What this file deliberately leaves out: the algorithms themselves (generate.py,
speculative.py, verify.py) — this is only the wiring.
"""

import time
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from nanospec.checkpoint import load_models
from nanospec.drafters import DraftModel, PromptLookup
from nanospec.errors import UserError
from nanospec.generate import _generate, new_tokens, pad_prompts
from nanospec.heads import KINDS
from nanospec.sampling import SamplingParams
from nanospec.speculative import _fused, check_room, generated, speculative_rounds, state_metrics
from nanospec.trace import events_from_step, run_end, run_start
from nanospec.tree import Tree
from nanospec.tree_speculative import _fused_tree, check_tree

METHODS = ("ar", "draft", "ngram", "medusa", "eagle", "mtp")
HEADS = KINDS  # drafters that sit on the target (heads.py)
EVERYTHING = ("target", "draft") + HEADS  # every shipped model and head


def needs(method: str) -> list[str]:
    """The checkpoint files a method loads besides the tokenizer."""
    return ["target"] + (["draft"] if method == "draft" else [method] if method in HEADS else [])


@dataclass
class Bundle:
    """The tokenizer and the models a run needs: {name: (cfg, graphdef, params)}."""

    tok: Any
    models: dict

    @classmethod
    def load(cls, ckpt_dir, names=("target", "draft")) -> "Bundle":
        """Load the named models and heads (`medusa`, `eagle`, `mtp` are heads)."""
        from nanospec.heads import load_head
        tok, models = load_models(ckpt_dir, [n for n in names if n not in HEADS])
        models.update({n: load_head(ckpt_dir, n) for n in names if n in HEADS})
        return cls(tok, models)

    def drafter(self, method: str):
        """(drafter, its params) for a speculative method."""
        from nanospec.feature_drafters import DRAFTERS
        tcfg, tgraph, tparams = self.models["target"]
        if method == "draft":
            cfg, graphdef, params = self.models["draft"]
            return DraftModel(graphdef, cfg), params
        if method == "ngram":
            return PromptLookup(tcfg.vocab_size), ()
        if method in HEADS:
            hc, graphdef, params = self.models[method]
            drafter = DRAFTERS[method](graphdef, hc, tgraph)
            return drafter, drafter.prepare(params, tparams)
        raise UserError(f"Unknown method {method!r}; choose one of {', '.join(METHODS)}.")


@dataclass
class Result:
    texts: list[str]  # one per sample
    tokens: list[list[int]]  # generated ids per sample
    stats: dict  # timings and (for speculative methods) the acceptance metrics
    events: list[dict] = field(default_factory=list)  # trace events, when asked for


def decode(bundle: Bundle, prompt: str, method: str = "ar", gamma: int = 4,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
           max_new: int = 32, num_samples: int = 1, with_events: bool = False,
           tree: Tree | None = None, top: bool = True) -> Result:
    """`tree`: draft a token tree instead of a chain of γ (`top`: top-k siblings, else sampled);
    trees run in the fused loop only, so they cannot be combined with `with_events`."""
    if method not in METHODS:
        raise UserError(f"Unknown method {method!r}; choose one of {', '.join(METHODS)}.")
    if tree is not None and (method == "ar" or with_events):
        raise UserError("A token tree needs a drafting method, and runs without traces "
                        "(--trace and --show follow chains only).")
    tok = bundle.tok
    cfg, graphdef, params = bundle.models["target"]
    prompt_ids = tok.encode_prompt(prompt)
    tokens, lengths = pad_prompts([prompt_ids] * num_samples, cfg.n_ctx)
    sp = SamplingParams.make(temperature, top_k, top_p)
    key = jax.random.key(seed)
    stats: dict = {"method": method, "prompt_tokens": len(prompt_ids), "temperature": temperature,
                   "top_k": top_k, "top_p": top_p, "seed": seed}
    events: list[dict] = []

    if method == "ar":
        state, timing = _compiled_run(
            _generate, dict(graphdef=graphdef, cfg=cfg, eos_id=tok.eos_id),
            dict(params=params, tokens=tokens, lengths=lengths, key=key, sp=sp,
                 max_new=jnp.int32(max_new)))
        outs = new_tokens(state, lengths)
    elif tree is not None:
        drafter, dparams = bundle.drafter(method)
        check_tree(cfg, drafter, lengths, max_new, tree)
        stats.update({"tree": list(tree.parents), "tree_nodes": tree.size,
                      "siblings": "top" if top else "sample"})
        state, timing = _compiled_run(
            _fused_tree, dict(graphdef=graphdef, cfg=cfg, drafter=drafter, eos_id=tok.eos_id,
                              tree=tree, top=top),
            dict(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key, sp=sp,
                 max_new=jnp.int32(max_new)))
        outs = generated(state, lengths)
        stats.update(state_metrics(state))
    else:
        drafter, dparams = bundle.drafter(method)
        check_gamma(drafter, gamma)
        check_room(cfg, lengths, max_new, gamma)
        stats["gamma"] = gamma
        if with_events:
            events.append(run_start(tok, prompt, prompt_ids, method, gamma, temperature, top_k,
                                    top_p, seed, target=cfg.name, drafter=drafter.name,
                                    batch=num_samples))
            t0 = time.perf_counter()
            for r, (trace, state, times) in enumerate(speculative_rounds(
                    graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp, max_new,
                    tok.eos_id, gamma)):
                events.extend(events_from_step(trace, tok, r, times))
            timing = {"compile_s": None, "run_s": time.perf_counter() - t0}  # compiled as it went
            events.append(run_end(events))
        else:
            state, timing = _compiled_run(
                _fused, dict(graphdef=graphdef, cfg=cfg, drafter=drafter, eos_id=tok.eos_id,
                             gamma=gamma),
                dict(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key, sp=sp,
                     max_new=jnp.int32(max_new)))
        outs = generated(state, lengths)
        stats.update(state_metrics(state))

    n_new = sum(len(o) for o in outs)
    compile_s = timing["compile_s"]
    stats.update({"new_tokens": n_new,
                  "compile_seconds": None if compile_s is None else round(compile_s, 3),
                  "generate_seconds": round(timing["run_s"], 4),
                  "tokens_per_second": round(n_new / max(timing["run_s"], 1e-9), 1)})
    texts = [tok.decode(t for t in o if t != tok.eos_id) for o in outs]
    return Result(texts, outs, stats, events)


def check_gamma(drafter, gamma: int) -> None:
    """Heads draft one token per head: γ cannot exceed how many they have."""
    most = getattr(drafter, "max_gamma", None)
    if most is not None and gamma > most:
        raise UserError(f"{drafter.name} has {most} heads, so gamma can be at most {most}; "
                        f"got {gamma}.")


def _compiled_run(jitted, static: dict, dynamic: dict):
    """Compile ahead of time, then run: compile and run seconds reported apart."""
    t0 = time.perf_counter()
    compiled = jitted.lower(**static, **dynamic).compile()
    t1 = time.perf_counter()
    state = jax.block_until_ready(compiled(**dynamic))
    return state, {"compile_s": t1 - t0, "run_s": time.perf_counter() - t1}
