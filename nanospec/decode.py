"""One entry point for every decoding method: what the CLI, the demo and the lessons call.

    result = decode(bundle, prompt, method="draft", gamma=4, temperature=0.0, max_new=32)

`Bundle` holds the tokenizer and the loaded models; `make_loop` builds the loop object a method
runs (rounds.Loop: a Decoder, a Speculator, a TreeSpeculator or an SSDSpeculator), as the
method table says (methods.py). `decode` picks its driver:
`run`, fused, when only the output and the counters are wanted, `rounds`, step by step, when
every round's events are wanted (`with_events=True`, for --trace, --show, the visualiser). Both produce the
same tokens for the same seed, so asking for events never changes the text.

What this file deliberately leaves out: the algorithms themselves (generate.py,
speculative.py, verify.py) — this is only the wiring.
"""

import time
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import jax.numpy as jnp

from nanospec.cache import capacity
from nanospec.checkpoint import load_models
from nanospec.errors import UserError
from nanospec.generate import bucket, pad_prompts
from nanospec.heads.modules import KINDS
from nanospec.methods import METHODS, Options, build, method_of, needs, resolve  # noqa: F401
from nanospec.rounds import generated
from nanospec.samples import MEMORY_BUDGET, plan_chunks, run_chunks
from nanospec.sampling import SamplingParams
from nanospec.ssd.fanout import SSDOptions
from nanospec.trace import compile_event, metrics, run_end, run_start
from nanospec.trees.tree import Tree

HEADS = KINDS  # drafters that sit on the target (heads/modules.py)
EVERYTHING = ("target", "draft") + HEADS  # every shipped model and head


@dataclass
class Bundle:
    """The tokenizer and the models a run needs: {name: (cfg, graphdef, params)}."""

    tok: Any
    models: dict

    @classmethod
    def load(
        cls, ckpt_dir, names=("target", "draft"), target=None, draft=None, skip=False
    ) -> "Bundle":
        """Load the named models and heads (`medusa`, `eagle`, `mtp` are heads). `target` and
        `draft`: Hugging Face GPT-2-family folders in place of the shipped models (what the
        shipped models cannot pair with is refused, or left out with `skip`: hf/folder.py)."""
        from nanospec.heads.modules import load_head

        if target is not None or draft is not None:
            from nanospec.hf.folder import load_folders

            return cls(*load_folders(ckpt_dir, names, target, draft, skip))
        tok, models = load_models(ckpt_dir, [n for n in names if n not in HEADS])
        models.update({n: load_head(ckpt_dir, n) for n in names if n in HEADS})
        return cls(tok, models)

    def drafter(self, method: str):
        """(drafter, its params) for a speculative method."""
        m = method_of(method)
        if m.drafter is None:
            raise UserError(
                f"{method} drafts nothing; choose one of "
                f"{', '.join(n for n in METHODS if METHODS[n].drafter)}."
            )
        drafter, params = resolve(m.drafter).load(self.models, method)
        return drafter, drafter.prepare(params, self.models["target"][2])


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


def make_loop(
    bundle: Bundle,
    method: str,
    gamma: int = 4,
    tree: Tree | None = None,
    top: bool = True,
    capacity: int | None = None,
    shared: bool = False,
    ssd: SSDOptions = SSDOptions(),
    temperature: float = 1.0,
):
    """(the loop that runs `method`, its drafter's params), as the method table builds it
    (methods.py): γ drafts a round, or `tree` (`top`: top-k siblings, else sampled); `ssd`
    sets SSD (a geometric fan-out reads `temperature`)."""
    cfg, graphdef, _ = bundle.models["target"]
    fixed = dict(
        graphdef=graphdef, cfg=cfg, eos_id=bundle.tok.eos_id, capacity=capacity, shared=shared
    )
    return build(method, bundle.models, fixed, Options(gamma, tree, top, ssd, temperature))


def decode(
    bundle: Bundle,
    prompt: str,
    method: str = "ar",
    gamma: int = 4,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    max_new: int = 32,
    num_samples: int = 1,
    with_events: bool = False,
    tree: Tree | None = None,
    top: bool = True,
    memory_budget: int = MEMORY_BUDGET,
    progress=None,
    ssd: SSDOptions = SSDOptions(),
    ignore_eos: bool = False,
) -> Result:
    """`tree`: draft a token tree instead of a chain of γ (`top`: top-k siblings, else sampled).
    `ignore_eos`: go on past <|endoftext|> to max_new tokens (fixed-length runs).

    Many samples run in chunks whose caches fit `memory_budget` bytes (samples.py),
    each reported to `progress(samples_done, num_samples)` if given."""
    tok, cfg = bundle.tok, bundle.models["target"][0]
    prompt_ids = tok.encode_prompt(prompt)
    loop, dparams = make_loop(
        bundle, method, gamma, tree, top, shared=not with_events, ssd=ssd, temperature=temperature
    )
    if ignore_eos:
        loop = replace(loop, eos_id=-1)
    loop.check([len(prompt_ids)], max_new)
    cap = capacity(cfg.n_ctx, bucket(len(prompt_ids), cfg.n_ctx), max_new, loop.block)
    loop = replace(loop, capacity=cap)
    plan = plan_chunks(loop.kv_models(), num_samples, loop.block, cap, memory_budget, with_events)
    tokens, lengths = pad_prompts([prompt_ids] * plan.rows, cfg.n_ctx)
    dyn = dict(
        params=bundle.models["target"][2],
        dparams=dparams,
        tokens=tokens,
        lengths=lengths,
        key=jax.random.key(seed),
        sp=SamplingParams.make(temperature, top_k, top_p),
    )
    stats = {
        "method": method,
        "prompt_tokens": len(prompt_ids),
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "seed": seed,
        **loop.settings(),
    }
    events: list[dict] = []
    if with_events:
        events.append(
            run_start(
                tok,
                prompt,
                prompt_ids,
                method,
                loop.depth,
                temperature,
                top_k,
                top_p,
                seed,
                target=cfg.name,
                drafter=drafter_name(loop),
                batch=num_samples,
            )
        )
        events[0].update(loop.settings())
        outs, counters, compile_s, run_s = traced(loop, tok, dyn, max_new, events)
    else:
        program, compile_s = loop.program(**dyn)
        outs, counters, run_s = run_chunks(
            program, {**dyn, "max_new": jnp.int32(max_new)}, plan, num_samples, progress
        )
    if loop.drafter is not None:
        stats.update(metrics(*counters[:3]))
    if loop.predrafts:  # each row's first round has no cache yet: the rest could hit
        stats["cache_hit_rate"] = round(counters[3] / max(sum(counters[0]) - len(outs), 1), 4)
    reasons = [finish_reason(o, loop.eos_id, max_new) for o in outs]
    n_new = sum(len(o) for o in outs)
    stats.update(
        {
            "new_tokens": n_new,
            "compile_seconds": round(compile_s, 3),
            "generate_seconds": round(run_s, 4),
            "tokens_per_second": round(n_new / max(run_s, 1e-9), 1),
            "finish_reason": reasons[0],
            "samples_per_chunk": plan.rows,
            "chunks": plan.chunks,
        }
    )
    texts = [tok.decode(t for t in o if t != tok.eos_id) for o in outs]
    return Result(texts, outs, stats, events, reasons)


def drafter_name(loop) -> str:
    return "none" if loop.drafter is None else loop.drafter.name


def traced(loop, tok, dyn: dict, max_new: int, events: list[dict]):
    """Run `loop` step by step, appending every round's events (after the compile event).
    Returns (generated ids per row, counters for trace.metrics and the rounds drafted from
    SSD's cache, compile s, run s)."""
    programs, compile_s = loop.compile(**dyn)
    events.append(compile_event(compile_s))
    t0 = time.perf_counter()
    for r, rnd in enumerate(loop.rounds(**dyn, max_new=max_new, programs=programs)):
        events.extend(loop.events(rnd.trace, tok, r, rnd.seconds))
    run_s = time.perf_counter() - t0
    events.append(run_end(events))
    counters = (*rnd.stats.counters(rnd.state), rnd.stats.cached_rounds())
    return generated(rnd.state, dyn["lengths"]), counters, compile_s, run_s
