"""Many samples of one prompt, in chunks that fit in memory.

Drawing thousands of continuations is how a learner sees a distribution (`nanospec generate
--num-samples 100000`). Every sample is one row of a batch, and a row costs memory for its KV
caches and for the prompt pass, so the rows run in chunks sized to a memory budget: a plan
(`plan_chunks`), then one compiled program run once per chunk (`run_chunks`). Every chunk has
the same shape — the last is filled up with rows that are thrown away — so nothing recompiles.

Randomness: chunk 0 uses the run's key, so its rows are exactly those of an unchunked run
(each row's draws depend on its key and row index only: sampling.row_keys); chunk c ≥ 1
uses its own key derived from the run's. The result depends on the seed and N, never on timing.

The rows all hold one prompt, so each chunk runs the prompt once and repeats its state
(`shared=True` in the fused loops): the prompt pass is no longer paid per sample.

What this file deliberately leaves out: different prompts per row (the CLI draws many samples
of one prompt).
"""

import time
from typing import NamedTuple

import jax
import numpy as np

from nanospec.errors import UserError
from nanospec.rounds import generated

# Bytes a chunk's rows may take on the device (what a run of 100,000 samples peaked at with
# this budget: docs/results.md, "Why the code is shaped as it is").
MEMORY_BUDGET = 2 * 2**30


class Plan(NamedTuple):
    rows: int  # rows per chunk (every chunk is run at this batch size)
    chunks: int  # how many chunks


def row_bytes(cfgs, block: int, capacity: int) -> int:
    """A row's device memory, estimated: the KV caches of every model in `cfgs`, and one
    round's pass (logits, laws and activations over its `block` tokens), twice over — a
    step's input and output buffers can be alive together. The prompt pass is not per row:
    identical rows share one (rounds.share_rows)."""
    kv = sum(2 * c.n_layer * capacity * c.d_model * 4 for c in cfgs)
    target = cfgs[0]
    round_pass = block * (4 * target.vocab_size + 16 * target.d_model) * 4
    return 2 * (kv + round_pass)


def plan_chunks(
    cfgs, n: int, block: int, capacity: int, budget: int, one_batch: bool = False
) -> Plan:
    """How to split n samples so that a chunk fits `budget`, for a loop whose rows keep KV
    caches of the models `cfgs` (the target's first: its `kv_models()`); `one_batch`: all n in
    one chunk (a traced run follows every row round by round), or one sentence saying how
    many fit."""
    fit = budget // row_bytes(cfgs, block, capacity)
    if fit < 1:
        raise UserError(
            f"One sample of this prompt needs more than the memory budget of "
            f"{budget / 2**30:.1f} GiB; lower --max-new-tokens."
        )
    if one_batch:
        if n > fit:
            raise UserError(
                f"A traced run keeps all {n:,} samples in one batch, which does not "
                f"fit in {budget / 2**30:.1f} GiB here; at most {fit:,} would "
                f"(or drop --trace/--show)."
            )
        return Plan(n, 1)
    rows = min(n, fit)
    return Plan(rows, -(-n // rows))


def chunk_key(key, c: int):
    """The key of chunk c: the run's own for chunk 0, an independent one for each later chunk."""
    return key if c == 0 else jax.random.fold_in(jax.random.split(key)[1], c)


def run_chunks(program, dyn: dict, plan: Plan, n: int, progress=None):
    """Run a compiled generation `program` (rounds.Loop.program) once per chunk on the
    traced arguments `dyn`. Returns (generated ids per sample, counters for trace.metrics and
    then the rounds drafted from SSD's cache, seconds)."""
    outs: list[list[int]] = []
    hist, new, drafted, cached = None, 0, 0, 0
    t0 = time.perf_counter()
    for c in range(plan.chunks):
        state, stats = jax.block_until_ready(program(**{**dyn, "key": chunk_key(dyn["key"], c)}))
        keep = min(plan.rows, n - len(outs))
        outs += generated(state, dyn["lengths"])[:keep]
        h, g, d = stats.counters(state, keep)
        hist = h if hist is None else list(np.add(hist, h))
        new, drafted, cached = new + g, drafted + d, cached + stats.cached_rounds(keep)
        if progress is not None:
            progress(len(outs), n)
    return outs, ([int(x) for x in hist], new, drafted, cached), time.perf_counter() - t0
