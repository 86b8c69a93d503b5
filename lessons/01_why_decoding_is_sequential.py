# %% [markdown]
# # Lesson 01 — Why decoding is sequential, and the opening speculation uses
#
# **You will see** how long one pass of the shipped target takes over 1, 2, 4, 8 and 16 new
# tokens (64 tokens already in its KV cache), measured side by side on this machine.
#
# **It explains** `nanospec/model.py` (one call shape for every pass:
# `model(tokens, positions, cache)`) and the opening that `nanospec/speculative.py` uses.
#
# A language model writes one token at a time: token t+1 needs token t as input, so
# autoregressive decoding is a chain of passes over ONE new token each. But a pass over several
# new tokens at once — if we already knew them — computes every one of their next-token laws
# together, and costs far less than that many passes: the weights are read from memory once
# for all of them. Speculative decoding guesses the next γ tokens cheaply, then checks all of
# them with one such wide pass.

# %%
import statistics

from nanospec.measure.probes import FORWARD_CALLS, forward_probe, interleaved_samples
from nanospec.teach import bar, claim, console, figure, shipped, table

bundle = shipped("target")
target = bundle.models["target"]
cfg = target[0]
console.print(f"target: {cfg.n_layer} layers, width {cfg.d_model}, context {cfg.n_ctx} tokens")

# %% [markdown]
# ## Timing a pass
#
# `forward_probe(model, block)` compiles a loop of FORWARD_CALLS cached passes over `block`
# new tokens. `interleaved_samples` times every probe once per round-robin pass, so a noisy
# neighbour on this shared machine slows them all alike, and we take the median of the passes.

# %%
BLOCKS = (1, 2, 4, 8, 16)
probes = {b: forward_probe(target, b) for b in BLOCKS}
samples = interleaved_samples(probes, repeats=7)
ms = {b: 1000 * statistics.median(s) / FORWARD_CALLS for b, s in samples.items()}

rows = [[b, f"{ms[b]:.2f}", f"{ms[b] / ms[1]:.2f}×", f"{ms[b] / b:.2f}", bar(ms[b], ms[16])]
        for b in BLOCKS]
table("one target pass over b new tokens (64 cached)",
      ["b", "ms per pass", "vs b = 1", "ms per token", ""], rows)


def cost_curve(ax):  # for a slide: what b tokens cost in one pass, against b separate passes
    ax.plot(BLOCKS, [ms[b] for b in BLOCKS], "o-", label="one pass over b tokens")
    ax.plot(BLOCKS, [b * ms[1] for b in BLOCKS], "--", label="b passes over one token")
    ax.set(xlabel="new tokens b", ylabel="ms", xscale="log", xticks=BLOCKS, xticklabels=BLOCKS,
           title="The target's cost per pass, on this machine")
    ax.legend()


figure("01_pass_cost", cost_curve)

# %% [markdown]
# ## What the numbers say
#
# Read the "vs b = 1" column: a pass over 8 tokens costs a small multiple of a pass over 1,
# not 8 of them. That gap is the whole opportunity. If a cheap drafter guesses 7 tokens and
# the target checks them (plus the token before them) in one 8-token pass, every accepted
# guess is a token we did not pay a full pass for. `r(γ+1)` — the cost of a (γ+1)-token pass
# in one-token passes — is the `r` column of `nanospec bench` (docs/design.md §6).

# %%
claim(ms[8] < 4 * ms[1],
      f"a pass over 8 tokens costs {ms[8] / ms[1]:.2f} one-token passes, far below 8")
claim(ms[16] / 16 < ms[1] / 2,
      f"per token, a 16-token pass is {ms[1] / (ms[16] / 16):.1f}× cheaper than one token at a time")
