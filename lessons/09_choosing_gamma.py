# %% [markdown]
# # Lesson 09 — Choosing γ
#
# **You will see** the speedup of speculation over autoregressive decoding predicted from
# ratios measured in this run — each γ's own α̂, and c and r — at γ = 1 and γ = 7, then
# measured side by side with autoregressive decoding on the same prompt and the same 64
# tokens; and where the prediction would put the best γ if a wide pass cost one step (r = 1).
# The speedups are this machine's. What the lesson asserts is loose: that the γ the model
# picks of the two is faster than autoregressive decoding on this machine's clock; which γ
# that is, and how close the prediction comes, are printed.
#
# **It explains** the performance model of `docs/design.md` §6, as `nanospec bench` computes
# it (`gamma_row` in `nanospec/measure/bench.py`, the probes in `nanospec/measure/probes.py`).
#
# Count time in target decode steps (t_ar, one target pass over one new token). A round costs
# γ draft steps of c each (c = a draft step over a target step) and one verify pass over γ + 1
# tokens, which costs r(γ+1) one-token passes (lesson 01). It emits E(α, γ) tokens on average
# (lesson 08), where autoregressive decoding would have needed E target steps. So
#
#     predicted speedup = E(α, γ) / (γ·c + r(γ+1))
#
# A longer γ buys more tokens per round, with diminishing returns (α^i shrinks), and pays γ·c
# plus a wider verify pass for them. The best γ is where the two balance. Each γ is its own
# compiled loop, so this lesson measures two: one draft per round, and seven.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

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
# ## α̂, from one run per γ
#
# `program_for` compiles the loop that `nanospec bench` times: EOS off, so every run writes
# exactly N tokens, and N traced, so a run that stops after the first token (prefill and one
# round) reuses it. γ = 0 stands for autoregressive decoding.

# %%
runs = {
    g: program_for(
        bundle, "draft" if g else "ar", GREEDY, N, gamma=g or None, prompt=(tokens, lengths)
    )
    for g in (0, *GAMMAS)
}
alpha, counted = {}, {}  # α̂, and the run's own tokens per round: N over its rounds
for g in GAMMAS:
    _, stats = runs[g](tokens, lengths, key)
    alpha[g] = iid_acceptance(stats.hist.sum(0).tolist())
    counted[g] = N / int(stats.hist.sum())

# %% [markdown]
# ## c, r and the runs, timed side by side
#
# Everything goes into one round-robin pool (`interleaved_samples`), so a slow drift in the
# machine's load reaches every probe alike; a short burst hits one sample, and the median
# over 7 passes absorbs it. A decode step is a difference of two runs of one compiled loop,
# (t(N) − t(1)) / (N − 1), so prefill cancels out: for the target (t_ar) and for the draft
# model. c, the draft model's step over the target's, is taken pass by pass, like r(γ+1) (a
# (γ+1)-token pass over a one-token pass) and the speedups below. Still, c is a small
# difference of two times (a draft step is a few percent of the prompt's pass in its probe),
# so it moves with load more than r does, and the r = 1 table's best γ moves with it.

# %%
probes = {("pass", b): forward_probe(target, b) for b in {1, *(g + 1 for g in GAMMAS)}}
probes.update({("draft", n): decode_probe(bundle.models["draft"], ids, n) for n in (1, N)})
for g, run in runs.items():
    probes["all", g] = lambda run=run: run(tokens, lengths, key)
    probes["first", g] = lambda run=run: run(tokens, lengths, key, 1)
samples = interleaved_samples(probes, repeats=7)
med = {k: statistics.median(v) for k, v in samples.items()}
t_ar = (med["all", 0] - med["first", 0]) / (N - 1)
steps = zip(samples["draft", N], samples["draft", 1], samples["all", 0], samples["first", 0])
c = statistics.median((dn - d1) / (an - a1) for dn, d1, an, a1 in steps)  # pass by pass
console.print(f"t_ar = {1e3 * t_ar:.2f} ms per target step, c = {c:.3f}")

# %% [markdown]
# The measured speedup is taken pass by pass (`paired_latency`): autoregressive time over
# speculative time within each pass, then the median. The model predicts the decode phase,
# so the "measured" column is the speedup after the first token (vLLM's TPOT, time per output
# token, `tpot_speedup`); "end to end" (which also pays the prompt, and the draft model's too)
# is shown beside it. (Speculation's first token costs a whole round, which in the full run
# may emit up to γ + 1 tokens, while the time per output token divides by N − 1 regardless:
# a small bias in speculation's favour, at most (N − 1)/(N − γ − 1).)


# %%
def ratio(a, b) -> float:
    """The median over passes of probe a's time over probe b's, timed in the same pass."""
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


rows, pred, meas, e2e, r = [], {}, {}, {}, {}
for g in GAMMAS:
    r[g] = ratio(("pass", g + 1), ("pass", 1))
    e = expected_tokens(alpha[g], g)
    pred[g] = e / (g * c + r[g])
    lat = paired_latency(
        samples["all", g], samples["first", g], samples["all", 0], samples["first", 0], 1, N - 1
    )
    meas[g], e2e[g] = lat["tpot_speedup"], lat["measured_speedup"]
    rows.append(
        [
            g,
            f"{alpha[g]:.3f}",
            f"{e:.2f}",
            f"{counted[g]:.2f}",
            f"{g * c:.2f}",
            f"{r[g]:.2f}",
            f"{pred[g]:.2f}×",
            f"{meas[g]:.2f}×",
            f"{e2e[g]:.2f}×",
        ]
    )
table(
    "speedup over autoregressive decoding, on this machine",
    ["γ", "α̂", "E", "counted", "γ·c", "r(γ+1)", "predicted", "measured", "end to end"],
    rows,
)

# %% [markdown]
# How much speculation gains is the machine's: on a GPU a wide pass is expected to be relatively
# cheaper than here (r nearer 1; not measured in this project), and another CPU's r and c are its
# own, so the speedups, and even which γ is faster, move. Which γ the model picks is printed, not
# asserted: E alone picks γ = 7, which brings so many more tokens a round, and on this CPU the cost
# terms would turn the pick only at an r(8) far above the one it prints (the line below says where),
# so a claim on the pick could not fail. The claim is that the pick pays: it is faster than
# autoregressive decoding on this run's clock, as it was in every recorded run of this lesson on the
# project's 2-core EPYC, busy ones included (the comment on the claim gives them); on your machine
# the margin is its own. What tests the cost terms is how close the prediction comes, which is
# printed, not asserted. Note too that α̂ is measured at each γ from that γ's own run, and the two
# need not agree (the table shows this run's), where the i.i.d. model has one α: to choose a γ you
# have not run, take one α̂ for all, as the r = 1 table below does.
#
# On a quiet machine the prediction is usually within a tenth or two of the measured speedup.
# Part of the gap is no time at all: E is the i.i.d. model's count of tokens per round, and
# the run's own count (*counted*: N over the run's rounds) differs from it by chance over
# so few rounds (about a dozen at γ = 7), by the last round being cut at N, and where rounds
# are not i.i.d. (lesson 08); the line below prints the prediction with the counted tokens
# in place of E. The rest is the clock —
# bursts of other work can move the measured speedup far more than the model's inputs — and
# what a round costs beyond its passes (the draft model re-reads two tokens every round, the
# verify rule, the bookkeeping), which makes the model over-predict, most where a round
# brings fewest tokens; which γ it over- or under-predicts changes from run to run.

# %%
pick, best = max(GAMMAS, key=pred.get), max(GAMMAS, key=meas.get)
short = 1 - meas[pick] / meas[best]  # 0 when the model picks the γ measured fastest
off = pred[best] / meas[best] - 1  # as a share of the measured speedup
console.print(
    f"on this machine, at γ = {best} speculation is {meas[best]:.2f}× as fast per "
    f"token as autoregressive decoding ({e2e[best]:.2f}× end to end), and the "
    f"prediction, {pred[best]:.2f}×, is {abs(off):.0%} {'below' if off < 0 else 'above'}"
    " that (measured, not asserted)"
)
recount = pred[best] * counted[best] / expected_tokens(alpha[best], best)
console.print(
    f"with the counted {counted[best]:.2f} tokens a round in place of E's "
    f"{expected_tokens(alpha[best], best):.2f}, the prediction at γ = {best} would be "
    f"{recount:.2f}×, {abs(recount / meas[best] - 1):.0%} "
    f"{'below' if recount < meas[best] else 'above'} the measured (not asserted)"
)
lo, hi = GAMMAS
turn = expected_tokens(alpha[hi], hi) / pred[lo] - hi * c  # r(hi + 1) where the two tie
verdict = "the faster measured" if pick == best else f"measured {short:.0%} below γ = {best}"
console.print(
    f"from this run's α̂, c and r the model picks γ = {pick}, {verdict}; its pick turns at "
    f"r({hi + 1}) = {turn:.1f}, against this run's {r[hi]:.2f} (printed: E alone picks γ = {hi})"
)
# Asserted with the whole margin above 1 (the pick measured 2.53-2.73× beside two busy loops
# before the cache fix, lessons/NUMBERS.md; 1.72-2.05× in four runs after it and the wider
# vectors, 2026-12-07, one quiet, three beside other jobs).
claim(
    meas[pick] > 1,
    f"the model's pick, γ = {pick}, predicted {pred[pick]:.2f}×, measured {meas[pick]:.2f}× "
    "as fast per token as autoregressive decoding (asserted: faster)",
)

# %% [markdown]
# ## Where would γ stop paying?
#
# A thought experiment: what if only r changed? The same formula, with this run's α̂ (at γ = 7)
# and this CPU's c, for every γ up to 16, as if the verify pass cost one step whatever its width
# (r = 1). An accelerator's wide pass is expected to cost about one step (docs/design.md §6; not
# measured in this project), and its c is its own, not this CPU's, so this is not a prediction
# for one: it shows what drafting alone does to γ. Then only drafting limits γ: one more draft
# adds α^(γ+1) tokens for c more cost, and past the best that rate, α^(γ+1)/c, is below the
# speedup already reached, E/(γ·c + 1), so it pulls the ratio down; the larger c, the smaller
# the best γ can be (the line after the table varies c). On a CPU r grows with the block too
# (the table above has this machine's); docs/results.md times γ up to 15 with `nanospec bench`.

# %%
a = alpha[max(GAMMAS)]
flat = {g: expected_tokens(a, g) / (g * c + 1) for g in range(1, 17)}
top = max(flat, key=flat.get)
table(
    f"E(α̂ = {a:.3f}, γ) / (γ·c + 1), c = {c:.3f}",
    ["γ", "E", "speedup", ""],
    [
        [g, f"{expected_tokens(a, g):.2f}", f"{flat[g]:.2f}×", bar(flat[g], flat[top], 20)]
        for g in sorted({1, 2, 4, 8, 12, 16, top})
    ],
)


def draw(ax):
    ax.plot(list(flat), list(flat.values()), "-", label="predicted if r = 1")
    ax.plot(GAMMAS, [pred[g] for g in GAMMAS], "o", label="predicted, this machine's r")
    ax.plot(GAMMAS, [meas[g] for g in GAMMAS], "s", label="measured (after the first token)")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set(xlabel="γ", ylabel="speedup over autoregressive")
    ax.legend()


figure("09_choosing_gamma", draw)
console.print(f"with this run's c and r = 1, the best γ of 1..16 would be {top}")
best_at = {
    k: max(range(1, 17), key=lambda g, k=k: expected_tokens(a, g) / (g * k * c + 1)) for k in (2, 4)
}
console.print(
    f"with r = 1 and c twice this run's, it would be {best_at[2]}; four times, {best_at[4]}: "
    "a dearer draft step never lets γ go further (arithmetic, not a measurement)"
)
wider = (r[hi] - r[lo]) / (hi - lo)  # what one more draft adds to the verify pass
console.print(
    f"on this machine each draft from γ = {lo} to {hi} cost {wider:.3f} target steps "
    f"of wider pass and c = {c:.3f} of drafting (the stand-alone c; in place, as "
    "`nanospec bench` measures it, c is larger: see below)"
)

# %% [markdown]
# ## What to take away
#
# On any machine the best γ balances E's diminishing returns against what a round costs,
# γ·c + r(γ+1), and the model ranks γ from ratios measured in one run; the speedups, and which
# term holds γ back, are the machine's. Where a wide pass costs more than a narrow one (a CPU),
# r(γ+1) holds γ back, though in one `nanospec bench` run here before the cache fix the largest γ
# tried, 15, was still the fastest (docs/results.md, first section); r(16) has risen since, as the
# one-token pass got faster (lesson 01 prints yours), so run bench to see where γ stops paying on
# yours. Where a wide pass is expected to cost about the same (r ≈ 1, an accelerator), only
# drafting does, and how soon depends on that machine's c — the r = 1 table kept this CPU's. The
# line above gives both costs of one more draft on this machine.
#
# This lesson measures c as the draft model's decode step alone; `nanospec bench` measures it
# *in place*, each drafting round timed beside the target pass, where the target's weights
# have evicted the draft's from the CPU caches and the two-token re-read is counted too — a
# larger c (compare the two in docs/results.md).
