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

from nanospec.aot import compiled
from nanospec.cache import capacity
from nanospec.checkpoint import load_models
from nanospec.drafters import DraftModel, PromptLookup
from nanospec.errors import UserError
from nanospec.generate import (_generate, bucket, compile_decode_rounds, decode_rounds, new_tokens,
                               pad_prompts)
from nanospec.heads.modules import KINDS
from nanospec.measure.samples import MEMORY_BUDGET, plan_chunks, run_chunks, state_counters
from nanospec.sampling import SamplingParams
from nanospec.speculative import (_fused, check_room, compile_rounds, generated,
                                  speculative_rounds)
from nanospec.trace import compile_event, events_from_step, metrics, run_end, run_start
from nanospec.trees.tree import Tree
from nanospec.trees.loop import _fused_tree, check_tree, compile_tree_rounds, tree_rounds
from nanospec.trees.trace import events_from_tree_step

METHODS = ("ar", "draft", "ngram", "medusa", "eagle", "mtp")
HEADS = KINDS  # drafters that sit on the target (heads/modules.py)
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
        from nanospec.heads.modules import load_head
        tok, models = load_models(ckpt_dir, [n for n in names if n not in HEADS])
        models.update({n: load_head(ckpt_dir, n) for n in names if n in HEADS})
        return cls(tok, models)

    def drafter(self, method: str):
        """(drafter, its params) for a speculative method."""
        from nanospec.heads.drafters import DRAFTERS
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
    finish_reasons: list[str] = field(default_factory=list)  # per sample, see finish_reason


def finish_reason(tokens: list[int], eos_id: int, max_new: int) -> str:
    """Why a sample stopped, in the serving APIs' words: "stop" (it emitted <|endoftext|>),
    "length" (max_new_tokens reached) or "context" (the model's context is full)."""
    if tokens and tokens[-1] == eos_id:
        return "stop"
    return "length" if len(tokens) >= max_new else "context"


def decode(bundle: Bundle, prompt: str, method: str = "ar", gamma: int = 4,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
           max_new: int = 32, num_samples: int = 1, with_events: bool = False,
           tree: Tree | None = None, top: bool = True, memory_budget: int = MEMORY_BUDGET,
           progress=None) -> Result:
    """`tree`: draft a token tree instead of a chain of γ (`top`: top-k siblings, else sampled).

    Many samples run in chunks whose caches fit `memory_budget` bytes (measure/samples.py), each
    reported to `progress(samples_done, num_samples)` if given."""
    if method not in METHODS:
        raise UserError(f"Unknown method {method!r}; choose one of {', '.join(METHODS)}.")
    if tree is not None and method == "ar":
        raise UserError("A token tree is drafted; choose a drafting method with --tree, "
                        "not ar.")
    tok = bundle.tok
    cfg, graphdef, params = bundle.models["target"]
    prompt_ids = tok.encode_prompt(prompt)
    if max_new < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {max_new}.")
    drafter, dparams = (None, ()) if method == "ar" else bundle.drafter(method)
    if tree is not None:
        check_tree(cfg, drafter, [len(prompt_ids)], max_new, tree)
    elif drafter is not None:
        check_gamma(drafter, gamma)
        check_room(cfg, [len(prompt_ids)], max_new, gamma)
    block = 1 if drafter is None else tree.size + 1 if tree is not None else gamma + 1
    width = bucket(len(prompt_ids), cfg.n_ctx)
    cap = capacity(cfg.n_ctx, width, max_new, block)
    plan = plan_chunks(bundle, method, num_samples, block, cap, memory_budget, with_events)
    tokens, lengths = pad_prompts([prompt_ids] * plan.rows, cfg.n_ctx)
    sp = SamplingParams.make(temperature, top_k, top_p)
    key = jax.random.key(seed)
    stats: dict = {"method": method, "prompt_tokens": len(prompt_ids), "temperature": temperature,
                   "top_k": top_k, "top_p": top_p, "seed": seed}
    if drafter is not None:
        stats.update({"tree": list(tree.parents), "tree_nodes": tree.size,
                      "siblings": "top" if top else "sample"} if tree is not None else {"gamma": gamma})
    dyn = dict(params=params, tokens=tokens, lengths=lengths, key=key, sp=sp)
    events: list[dict] = []

    if with_events:
        events.append(run_start(tok, prompt, prompt_ids, method,
                                0 if drafter is None else tree.max_depth if tree else gamma,
                                temperature, top_k, top_p, seed, target=cfg.name,
                                drafter="none" if drafter is None else drafter.name,
                                batch=num_samples))
        if tree is not None:
            events[0].update(tree=list(tree.parents), siblings="top" if top else "sample")
            programs, compile_s = compile_tree_rounds(graphdef, params, cfg, drafter, dparams,
                                                      tokens, lengths, key, sp, tok.eos_id, tree,
                                                      top, cap)
            steps = tree_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp,
                                max_new, tok.eos_id, tree, top, cap, programs)
        elif drafter is None:
            programs, compile_s = compile_decode_rounds(graphdef, params, cfg, tokens, lengths, key,
                                                        sp, tok.eos_id, cap)
            steps = decode_rounds(graphdef, params, cfg, tokens, lengths, key, sp, max_new,
                                  tok.eos_id, cap, programs)
        else:
            programs, compile_s = compile_rounds(graphdef, params, cfg, drafter, dparams, tokens,
                                                 lengths, key, sp, tok.eos_id, gamma, cap)
            steps = speculative_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths,
                                       key, sp, max_new, tok.eos_id, gamma, cap, programs)
        events.append(compile_event(compile_s))
        t0 = time.perf_counter()
        for r, (trace, state, times) in enumerate(steps):
            events.extend(events_from_step(trace, tok, r, times) if tree is None
                          else events_from_tree_step(trace, tok, r, tree, times))
        run_s = time.perf_counter() - t0
        events.append(run_end(events))
        outs = new_tokens(state, lengths) if drafter is None else generated(state, lengths)
        counters = None if drafter is None else state_counters(state)
    else:
        if drafter is None:
            jitted, static = _generate, dict(graphdef=graphdef, cfg=cfg, eos_id=tok.eos_id,
                                             capacity=cap, shared=True)
        elif tree is not None:
            jitted, static = _fused_tree, dict(graphdef=graphdef, cfg=cfg, drafter=drafter,
                                               eos_id=tok.eos_id, tree=tree, top=top, capacity=cap, shared=True)
        else:
            jitted, static = _fused, dict(graphdef=graphdef, cfg=cfg, drafter=drafter,
                                          eos_id=tok.eos_id, gamma=gamma, capacity=cap, shared=True)
        if drafter is not None:
            dyn["dparams"] = dparams
        dyn["max_new"] = jnp.int32(max_new)
        program, compile_s = compiled(jitted, static, dyn)
        outs, counters, run_s = run_chunks(program, dyn, plan, num_samples, drafter is None,
                                           progress)

    if counters is not None:
        stats.update(metrics(*counters))
    n_new = sum(len(o) for o in outs)
    reasons = [finish_reason(o, tok.eos_id, max_new) for o in outs]
    stats.update({"new_tokens": n_new, "compile_seconds": round(compile_s, 3),
                  "generate_seconds": round(run_s, 4),
                  "tokens_per_second": round(n_new / max(run_s, 1e-9), 1),
                  "finish_reason": reasons[0], "samples_per_chunk": plan.rows,
                  "chunks": plan.chunks})
    texts = [tok.decode(t for t in o if t != tok.eos_id) for o in outs]
    return Result(texts, outs, stats, events, reasons)


def check_gamma(drafter, gamma: int) -> None:
    """Heads draft one token per head: γ cannot exceed how many they have."""
    most = getattr(drafter, "max_gamma", None)
    if most is not None and gamma > most:
        raise UserError(f"{drafter.name} has {most} heads, so gamma can be at most {most}; "
                        f"got {gamma}.")
