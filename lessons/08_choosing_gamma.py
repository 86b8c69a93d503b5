# %% [markdown]
# # Lesson 08 — Choosing γ
#
# **You will see** the speedup of speculation over autoregressive decoding predicted from
# three ratios measured on this machine — α, c and r — at γ = 1 and γ = 7, then measured side
# by side with autoregressive decoding on the same prompt and the same 64 tokens; and where
# the prediction puts the best γ.
#
# **It explains** the performance model of `docs/design.md` §6, as `nanospec bench` computes
# it (`gamma_row` in `nanospec/measure/bench.py`, the probes in `nanospec/measure/probes.py`).
#
# Count time in target decode steps (T_ar, one target pass over one new token). A round costs
# γ draft steps of c each (c = a draft step over a target step) and one verify pass over γ + 1
# tokens, which costs r(γ+1) one-token passes (lesson 01). It emits E(α, γ) tokens on average
# (lesson 07), where autoregressive decoding would have needed E target steps. So
#
#     predicted speedup = E(α, γ) / (γ·c + r(γ+1))
#
# A longer γ buys more tokens per round, with diminishing returns (α^i shrinks), and pays γ·c
# plus a wider verify pass for them. The best γ is where the two balance. Each γ is its own
# compiled loop, so this lesson measures two: one draft per round, and seven.

# %%
import statistics

import jax

from nanospec.generate import pad_prompts
from nanospec.measure.bench import expected_tokens, iid_acceptance, program_for
from nanospec.measure.probes import decode_probe, forward_probe, interleaved_samples, paired_latency
from nanospec.measure.workloads import workload_prompts
from nanospec.sampling import GREEDY
from nanospec.teach import bar, claim, console, figure, shipped, table

bundle = shipped("target", "draft")
target = bundle.models["target"]
GAMMAS, N = (1, 7), 64
prompt = workload_prompts("facts", 1)[0]
ids = bundle.tok.encode_prompt(prompt)
tokens, lengths = pad_prompts([ids], target[0].n_ctx)
key = jax.random.key(0)
console.print(f"prompt ({len(ids)} tokens): {prompt[:48]!r}…; greedy, {N} new tokens")

# %% [markdown]
# ## α, from one run per γ
#
# `program_for` compiles the loop that `nanospec bench` times: EOS off, so every run writes
# exactly N tokens, and N traced, so a run that stops after the first token (prefill and one
# round) reuses it. γ = 0 stands for autoregressive decoding.

# %%
runs = {g: program_for(bundle, "draft" if g else "ar", GREEDY, N, gamma=g or None,
                       prompt=(tokens, lengths)) for g in (0, *GAMMAS)}
alpha = {}
for g in GAMMAS:
    _, stats = runs[g](tokens, lengths, key)
    alpha[g] = iid_acceptance(stats.hist.sum(0).tolist())

# %% [markdown]
# ## c, r and the runs, timed side by side
#
# Everything goes into one round-robin pool (`interleaved_samples`), so a noisy neighbour
# slows all of it alike. A decode step is a difference of two runs of one compiled loop,
# (T(N) − T(1)) / (N − 1), so prefill cancels out: for the target (T_ar) and for the draft
# model (its step over T_ar is c). r(γ+1) is a (γ+1)-token pass over a one-token pass, taken
# pass by pass like the speedups below.

# %%
probes = {("pass", b): forward_probe(target, b) for b in {1, *(g + 1 for g in GAMMAS)}}
probes.update({("draft", n): decode_probe(bundle.models["draft"], ids, n) for n in (1, N)})
for g, run in runs.items():
    probes["all", g] = lambda run=run: run(tokens, lengths, key)
    probes["first", g] = lambda run=run: run(tokens, lengths, key, 1)
samples = interleaved_samples(probes, repeats=5)
med = {k: statistics.median(v) for k, v in samples.items()}
t_ar = (med["all", 0] - med["first", 0]) / (N - 1)
c = (med["draft", N] - med["draft", 1]) / (N - 1) / t_ar
console.print(f"T_ar = {1e3 * t_ar:.2f} ms per target step, c = {c:.3f}")

# %% [markdown]
# The measured speedup is taken pass by pass (`paired_latency`): autoregressive time over
# speculative time within each pass, then the median. The model predicts the decode phase,
# so it is compared with the time after the first token (TPOT ×); end to end (which also pays
# the prompt, and the draft model's too) is shown beside it.

# %%
def ratio(a, b) -> float:
    """The median over passes of probe a's time over probe b's, timed in the same pass."""
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


rows, pred, meas, r = [], {}, {}, {}
for g in GAMMAS:
    r[g] = ratio(("pass", g + 1), ("pass", 1))
    e = expected_tokens(alpha[g], g)
    pred[g] = e / (g * c + r[g])
    lat = paired_latency(samples["all", g], samples["first", g], samples["all", 0],
                         samples["first", 0], 1, N - 1)
    meas[g] = lat["tpot_speedup"]
    rows.append([g, f"{alpha[g]:.3f}", f"{e:.2f}", f"{g * c:.2f}", f"{r[g]:.2f}",
                 f"{pred[g]:.2f}×", f"{meas[g]:.2f}×", f"{lat['measured_speedup']:.2f}×"])
table("speedup over autoregressive decoding", ["γ", "α", "E", "γ·c", "r(γ+1)", "predicted",
      "measured", "end to end"], rows)

# %% [markdown]
# Timing on a shared machine moves by a tenth or more from run to run (docs/results.md), so
# the claims keep to the robust parts: which γ wins, by how much, and how close the model
# gets there. Expect it to miss most at γ = 1: it leaves out what a round costs beyond its
# passes (the draft model re-reads two tokens every round, the verify rule, the bookkeeping),
# and at γ = 1 that is shared by the fewest tokens.

# %%
best, worst = max(GAMMAS, key=meas.get), min(GAMMAS, key=meas.get)
off = abs(meas[best] / pred[best] - 1)
claim(pred[best] > pred[worst], f"the model ranks γ = {best} above γ = {worst}, as measured "
      f"({meas[best]:.2f}× against {meas[worst]:.2f}×)")
claim(meas[best] > 1.25, f"at γ = {best} speculation is {meas[best]:.2f}× faster per token "
      "than autoregressive decoding (asserted: above 1.25×)")
claim(off < 0.4, f"there the prediction, {pred[best]:.2f}×, is within {off:.0%} of the "
      "measurement (asserted: 40%)")

# %% [markdown]
# ## Where would γ stop paying?
#
# The same formula, with this run's α (at γ = 7) and c, for every γ up to 16 — if the verify
# pass cost one step whatever its width (r = 1), which is roughly what an accelerator gives
# (docs/design.md §6). Then only drafting limits γ: past the best, each extra draft adds less
# to E than its c adds to the cost. On this CPU r grows with the block too (the table
# above); docs/results.md times γ up to 15 with `nanospec bench`.

# %%
a = alpha[max(GAMMAS)]
flat = {g: expected_tokens(a, g) / (g * c + 1) for g in range(1, 17)}
top = max(flat, key=flat.get)
table(f"E(α = {a:.3f}, γ) / (γ·c + 1), c = {c:.3f}", ["γ", "E", "speedup", ""],
      [[g, f"{expected_tokens(a, g):.2f}", f"{flat[g]:.2f}×", bar(flat[g], flat[top], 20)]
       for g in sorted({1, 2, 4, 8, 12, 16, top})])


def draw(ax):
    ax.plot(list(flat), list(flat.values()), "-", label="predicted if r = 1")
    ax.plot(GAMMAS, [pred[g] for g in GAMMAS], "o", label="predicted, this machine's r")
    ax.plot(GAMMAS, [meas[g] for g in GAMMAS], "s", label="measured (after the first token)")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set(xlabel="γ", ylabel="speedup over autoregressive")
    ax.legend()


figure("08_choosing_gamma", draw)
console.print(f"with r = 1, the best γ of 1..16 would be {top}")

# %% [markdown]
# ## What to take away
#
# Read the table's two rows: a draft step is a small fraction of a target step (c) and α is
# high, so long drafts pay here, held back by r(γ+1) — not by the draft. This lesson measures
# c as the draft model's decode step alone; `nanospec bench` measures it *in place*, each
# drafting round timed beside the target pass, where the target's weights have evicted the
# draft's from the CPU caches and the two-token re-read is counted too — a larger c (compare
# the two in docs/results.md).
