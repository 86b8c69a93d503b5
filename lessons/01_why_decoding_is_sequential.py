# %% [markdown]
# # Lesson 01 — Why decoding is sequential, and the opening speculation uses
#
# **You will see** how long one pass of the shipped target takes over 1, 2, 4, 8 and 16 new
# tokens (64 tokens already in its KV cache), measured side by side on this machine, and
# which of its costs a wider pass does not pay again: overhead, memory traffic or arithmetic.
#
# **It explains** `nanospec/model.py` (one call shape for every pass:
# `model(tokens, positions, cache)`) and the opening that `nanospec/speculative.py` uses.
#
# A language model writes one token at a time: each token needs the one before it as input, so
# autoregressive decoding is a chain of passes over ONE new token each. But a pass over several
# new tokens at once — if we already knew them — computes every one of their next-token laws
# together, and a pass over 8 or 16 of them costs far less than 8 or 16 passes: part of a pass's
# cost is paid once per pass however many tokens it carries, and only the rest grows with the
# tokens. (On this CPU the first extra token can still cost nearly a whole pass, see the table:
# from two tokens on, the pass's matrix products run on other kernels, which take longer over the
# same weights; the end of the lesson says more.) Speculative decoding guesses the next γ tokens
# cheaply, then checks all of them with one such wide pass.
# Below we time it, and split a pass into those two parts to see which costs what here.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import dataclasses
import statistics

import jax
import jax.numpy as jnp
from flax import nnx

from nanospec.measure.probes import FORWARD_CALLS, forward_probe, interleaved_samples
from nanospec.model import GPT
from nanospec.teach import bar, claim, console, figure, shipped, table

bundle = shipped("target")
target = bundle.models["target"]
cfg = target[0]
weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(target[2]))
console.print(
    f"target: {cfg.n_layer} layers, width {cfg.d_model}, context {cfg.n_ctx} tokens, "
    f"{weight_bytes / 1e6:.0f} MB of weights in memory (float32; shipped as float16)"
)

# %% [markdown]
# ## Timing a pass
#
# `forward_probe(model, block)` compiles a loop of FORWARD_CALLS (32) cached passes over
# `block` new tokens; one call from Python runs all 32, as nanospec's own loops do, so
# Python's cost per call is spread thin. Three more probes take a one-token pass apart for
# the second half of the lesson:
#
# - *weights*: a bare product x @ W, x one row and W as many bytes as the target's weights.
#   It does 2 flops per 4 bytes of W: its time is the time to stream the weights once.
# - *80-slot cache*: the same one-token pass with a KV cache of 80 slots instead of the
#   context's 256 (a pass attends over its cache's whole buffer, the empty slots masked).
# - *width 48*: a model with the target's layers, heads and vocabulary but width 48: every
#   operation of the pass with next to no weights, so what starting the operations costs.
#
# `interleaved_samples` times every probe once per round-robin pass, 7 passes. A busy machine
# (a browser, a video call, someone else's job) slows some passes more than others, so
# each ratio below is taken within one pass, between probes timed close together (8 tokens,
# 1, 16 right after each other, the 2- and 4-token passes a little later in the same pass;
# then each of the three probes right after a one-token pass of its own), and then the median
# over the passes. The 2- and 4-token rows are the least protected, but under load even the
# 8- and 16-token rows can come out level or reversed, and the split below (built on the
# 16-token row) moves with them: run the lesson again.


# %%
def weight_stream(n_bytes: int):
    """FORWARD_CALLS products x @ W, x (1, d), W (d, ·) of n_bytes float32: each reads W once."""
    W = jnp.ones((cfg.d_model, n_bytes // 4 // cfg.d_model), jnp.float32)  # an argument, not
    x = jnp.ones((1, cfg.d_model), jnp.float32)  # a constant of `loop`

    @jax.jit
    def loop(W, x):  # each product's first d outputs feed the next: nothing to hoist
        step = lambda i, x: (x @ W)[:, : cfg.d_model] / cfg.d_model  # (1, d)
        return jax.lax.fori_loop(0, FORWARD_CALLS, step, x)

    return lambda: loop(W, x)


BLOCKS = (1, 2, 4, 8, 16)
probes = {b: forward_probe(target, b) for b in (8, 1, 16, 2, 4)}  # 8 and 16 right beside 1
narrow = dataclasses.replace(cfg, d_model=48)  # 6 heads of 8, random weights
parts = {
    "weights": weight_stream(weight_bytes),
    "80-slot cache": forward_probe((dataclasses.replace(cfg, n_ctx=80), *target[1:]), 1),
    "width 48": forward_probe((narrow, *nnx.split(GPT(narrow, nnx.Rngs(0)))), 1),
}
for name, probe in parts.items():  # each right after a one-token pass, to compare the two
    probes[f"1 before {name}"], probes[name] = probes[1], probe
samples = interleaved_samples(probes, repeats=7)


def ratio(a, b) -> float:  # the median over passes of a's time over b's, both from one pass
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


ms = {1: 1000 * statistics.median(samples[1]) / FORWARD_CALLS}  # the median pass
ms |= {b: ratio(b, 1) * ms[1] for b in BLOCKS[1:]}  # and the others by their ratio to it

rows = [
    [b, f"{ms[b]:.2f}", f"{ratio(b, 1):.2f}×", f"{ms[b] / b:.2f}", bar(ms[b], ms[16])]
    for b in BLOCKS
]
table(
    "one target pass over b new tokens (64 cached)",
    ["b", "ms per pass", "vs b = 1", "ms per token", ""],
    rows,
)


def cost_curve(ax):  # for a slide: what b tokens cost in one pass, against b separate passes
    ax.plot(BLOCKS, [ms[b] for b in BLOCKS], "o-", label="one pass over b tokens")
    ax.plot(BLOCKS, [b * ms[1] for b in BLOCKS], "--", label="b passes over one token")
    ax.set(
        xlabel="new tokens b",
        ylabel="ms",
        xscale="log",
        xticks=BLOCKS,
        xticklabels=BLOCKS,
        title="The target's cost per pass, on this machine",
    )
    ax.legend()


figure("01_pass_cost", cost_curve)

# %% [markdown]
# ## What the numbers say
#
# Read the "vs b = 1" column: a pass over 8 tokens costs a small multiple of a pass over 1,
# not 8 of them. That gap is the whole opportunity. If a cheap drafter guesses 7 tokens and
# the target checks them (plus the token before them) in one 8-token pass, every accepted
# guess is a token we did not pay a full pass for. The "vs b = 1" column is r(b), the cost of
# a pass over b tokens in one-token passes (NOTATION.md: r(n)); r(γ+1), the verify pass, is
# the `r` column of `nanospec bench` (docs/design.md §6), which takes it as a ratio of two
# medians rather than the median of per-pass ratios.

# %%
claim(
    ratio(8, 1) < 4, f"a pass over 8 tokens costs {ratio(8, 1):.2f} one-token passes, far below 8"
)
claim(
    ratio(16, 1) < 8,
    f"per token, a 16-token pass is {16 / ratio(16, 1):.1f}× cheaper than one token at a time",
)

# %% [markdown]
# ## Which cost does the wide pass save?
#
# Draw a straight line through the 1- and 16-token passes: a pass over b tokens costs about
# *fixed* + b · *per token*. The per-token part stands for the arithmetic, about 2 flops per
# weight per token, which a wide pass does not save. The split is rough: the passes between lie
# above the line, because the first extra token costs the most (the kernels change, below), and
# the line's per-token part carries that change too (in the runs so far it came out above what
# the table's 8- and 16-token rows add per token). The fixed part is paid once per pass however
# many tokens it carries: that is what a wide pass saves. The three probes say what it is made of.

# %%
part = lambda name: ratio(name, f"1 before {name}")  # of a one-token pass, timed beside it
arithmetic = (ratio(16, 1) - 1) / 15  # 15 more tokens cost 15 of these
share = {
    "arithmetic for its one token": arithmetic,
    "fixed, once per pass": 1 - arithmetic,
    f"· streaming the {weight_bytes / 1e6:.0f} MB of weights": part("weights"),
    "· a 256-slot cache, not 80": 1 - part("80-slot cache"),
    "· at most: starting its operations (width 48)": part("width 48"),
}
flops = 2 * weight_bytes / 4  # the weights' arithmetic for a token, and the bare product's
slot = 2 * 2 * cfg.d_model * cfg.n_layer  # model.py's two attention einsums: flops a slot
token_flops = flops + cfg.n_ctx * slot  # a token's arithmetic: weights and all 256 slots
gflops = lambda n, x: f"{n / (x * ms[1]) / 1e6:.0f}"  # n flops in x of a pass (ms: 1e6)
table(
    f"a one-token pass ({ms[1]:.2f} ms), part by part (this machine, now)",
    ["part", "share", "ms", "GFLOP/s"],
    [
        [
            k,
            f"{x:.0%}",
            f"{x * ms[1]:.2f}",
            {0: gflops(token_flops, x), 2: gflops(flops, x)}.get(i, ""),
        ]
        for i, (k, x) in enumerate(share.items())
    ],
)
console.print(
    f"on the straight line, the fixed part costs as much as the per-token part of "
    f"{(1 - arithmetic) / arithmetic:.0f} tokens: by this rough split, a pass over more would "
    "be compute-bound"
)
more = (cfg.n_ctx - 80) * slot  # the slots a 256-slot cache has beyond 80
console.print(
    f"attention's arithmetic: {slot:,} flops a slot; all {cfg.n_ctx} slots are "
    f"{cfg.n_ctx * slot / flops:.0%} of the weights' {flops / 1e6:.2f} MFLOP, the "
    f"{cfg.n_ctx - 80} beyond 80 are {more / 1e6:.2f} MFLOP, {more / flops:.0%} of it: at the "
    f"rate of the pass's arithmetic ({token_flops / 1e6:.2f} MFLOP a token), "
    f"{arithmetic * more / token_flops:.1%} of a pass"
)
cache_bytes = (cfg.n_ctx - 80) * cfg.n_layer * 2 * cfg.d_model * 4  # K and V, float32
per_s = lambda nbytes, x: nbytes / (x * ms[1] / 1e3) / 1e9  # GB/s, ms[1] in ms
console.print(
    f"the {cfg.n_ctx - 80} slots beyond 80 hold {cache_bytes / 1e6:.2f} MB of K and V: "
    f"{per_s(cache_bytes, share['· a 256-slot cache, not 80']):.1f} GB/s of buffer, against "
    f"{per_s(weight_bytes, share[f'· streaming the {weight_bytes / 1e6:.0f} MB of weights']):.0f}"
    " GB/s streaming the weights (this run)"
)

# %% [markdown]
# Read the table from the bottom; what follows is what earlier runs showed (each range below
# says which runs), so check it against yours. Starting the pass's
# operations cost about a tenth of it at most (the width-48 pass roughly bounds it: it still
# streams its own small weights and cache, and an operation is assumed to cost about as much to
# start at width 48 as at 384): per-operation overhead is a small part of what a wide pass saves.
# (Python's cost per call is spread over 32 passes by the probe, as nanospec's loops do.)
# Streaming the weights was a large share: the bare product did several times fewer GFLOP/s than
# the same CPU did on the wide pass's arithmetic, so it waits for memory, not for arithmetic.
# The KV cache is a smaller part: a pass works over the cache's whole buffer, so 256 slots
# cost more than 80 however few are filled. That is neither arithmetic nor the cost of starting
# operations. Not arithmetic: model.py's two attention einsums (the scores, then the weighted
# values) each do a multiply and an add per slot for each of a key's or value's 384 numbers, in
# each of the 6 layers: 2 × 2 × 384 × 6 = 9,216 flops a slot. All 256 slots are a tenth of the
# weights' 23.06 MFLOP; the 176 slots beyond 80 are 1.62 MFLOP, about 7% of it, and at the rate
# the pass does its arithmetic about a percent of a pass (printed under the table), against
# the share the table measures. Not starting operations: the 80-slot and 256-slot passes run
# the same operations, so what starting them costs cancels out of the difference (the width-48
# model, whose buffers have an eighth of the bytes, bounds that cost at about a tenth of a
# pass). It is work that grows with the buffers' bytes, and dearer per byte than streaming the
# weights (the line under the table prints both rates): every slot's key and value is read, and
# every slot's score masked and weighed, filled or not. (Before nanospec's cache took its
# present layout, every pass also copied all of its buffers to lay them out for its matmuls, a
# third of a decode step: docs/results.md, "The verify pass: before and after"; this lesson's
# runs then, on a busy machine, put the larger cache at 25–60% of a pass.) Each part is
# measured on its own, so they need not add up, and on a busy machine one can come out far off,
# even above the whole pass, when other programs slow it more than the pass timed beside it:
# run the lesson again. In three quiet runs on 2026-12-07 on a 2-core AMD EPYC with AVX-512 (the
# cache's present layout, 512-bit vectors: nanospec/compat.py; before the one-row products were
# split over both cores, below), the fixed part was 86–87% of a
# one-token pass, streaming the weights 54–57%, the larger cache 14–15% and starting the
# operations 11–12%. Under more load each moved by several points (83%, 68%, 17% and 10% in a run
# at a load of 1.3 to 1.5; 88%, 64%, 21% and 5% beside two busy loops), so expect yours to move.
#
# So on this CPU a wide pass saves the work that grows with bytes, not tokens: the weights streamed
# and the work on the cache's buffers, paid once for all its tokens. It does not save arithmetic:
# each extra token adds arithmetic that a wide pass does not share, so r(γ+1) grows with γ
# (docs/design.md §6). The count printed under the part-by-part table is where, on the straight
# line, the per-token part overtakes the fixed part: a property of that rough line, not a measured
# turning point of the pass, and it moves with the machine's load, the code and the CPU. Most of
# what the first extra token costs is not arithmetic. In a one-token pass each block's matrix
# product is a matrix-vector product that XLA compiles itself, split in two halves that the two
# cores stream at once (model.py's `one_row_dot`), at nearly the speed of memory; from two tokens
# on XLA hands the products to YNNPACK's kernels, which take longer over the same weights
# (docs/results.md, "What holds r(8) above 1.5 here": the 8-token pass's matrix products alone
# cost two to three times the one-token pass's). Where a pass over a few tokens runs
# about as fast as a one-token pass, both bound by reading the weights once, r barely moves: a GPU
# at batch 1 is expected to be such a case (this project has not measured one). GPT-2 small's shape
# on this CPU is not: in two runs on the present code its r(5) came out about the shipped target's
# (docs/results.md, "GPT-2's shape").
