# %% [markdown]
# # Lesson 17 — Speculative speculative decoding
#
# **You will see** SSD round by round on "The capital of France is", greedy and at T = 1:
# each round's drafts and verdict, how it ended (the outcome (k, t*)), the speculation cache
# built meanwhile for the next round, and whether that round found its drafts there (◆) or
# drafted them late (◇); then the outcome space, the hit rate against the fan-out, SSD's
# greedy text against autoregressive decoding, and what the cache costs on one device. (Its
# law at T > 0, tested, and a broken version caught: lesson 18.)
#
# **It explains** `nanospec/ssd/loop.py` (`SSDProposer`: drafts from the cache or a backup,
# and `build`s the next), `nanospec/ssd/fanout.py` (uniform and geometric fan-outs) and the trace's
# `ssd` events (`nanospec/trace.py`).
#
# In ordinary speculation the drafter waits while the target verifies. SSD (Kumar, Dao & May,
# ICLR 2026) keeps it busy: while one round is verified, the draft model guesses how it will
# end and drafts the next round for each guess. If a guess was right, the next round's drafts
# are ready the moment this one ends; if not, a backup drafts them then, as usual.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
from dataclasses import replace
from itertools import islice, pairwise
from typing import NamedTuple

import jax
import numpy as np

from nanospec.cache import capacity
from nanospec.decode import make_loop
from nanospec.generate import pad_prompts
from nanospec.measure.bench import iid_acceptance
from nanospec.measure.positions import NEAR_TIE, text_features
from nanospec.measure.ssd_hits import fit_beta
from nanospec.measure.workloads import workload_prompts
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams
from nanospec.ssd.fanout import SHIPPED_ALPHA_BETA, SSDOptions, parse_fanout, uniform_fanout
from nanospec.teach import bar, claim, console, shipped, table

bundle = shipped("target", "draft")
tok = bundle.tok
cfg, graphdef, params = bundle.models["target"]
GAMMA, F, NEW = 4, 4, 48  # γ drafts a round; 4 guesses of t* cached for every k; new tokens
PROMPTS = ["The capital of France is"] + workload_prompts("facts", 31)  # row 0, then 31 more
ids = [tok.encode_prompt(s) for s in PROMPTS]
tokens, lengths = pad_prompts(ids, cfg.n_ctx)
# Every loop runs all NEW tokens in every row (no EOS), in a cache sized for them:
fit = lambda loop: replace(
    loop, eos_id=-1, capacity=capacity(cfg.n_ctx, tokens.shape[1], NEW, loop.block)
)
ssd, dparams = make_loop(bundle, "ssd", GAMMA, ssd=SSDOptions(str(F)))
ssd = fit(ssd)
K, RANK = ssd.branch_k, ssd.branch_rank  # branch j caches the (RANK[j]+1)-th guess at k = K[j]
T0, T1 = SamplingParams.make(0.0), SamplingParams.make(1.0)


class Round(NamedTuple):  # one SSD round of every row, on the host
    live: np.ndarray  # (B,) the row took part
    hit: np.ndarray  # (B,) its drafts came from the cache built last round
    drafts: np.ndarray  # (B, γ)
    k: np.ndarray  # (B,) drafts accepted ...
    t: np.ndarray  # (B,) ... then t*: the correction, or the bonus if k = γ
    cache: np.ndarray  # (B, K) the t* of each branch cached for the NEXT round
    events: list  # row 0's trace events (the first 4 rounds)


def run(sp, seed=0):
    """Every SSD round of the 32 rows, step by step (the step-wise driver), and the final state."""
    out = []
    for r, rnd in enumerate(
        ssd.rounds(params, dparams, tokens, lengths, jax.random.key(seed), sp, NEW)
    ):
        t, v = rnd.trace, rnd.trace.verdict
        events = [e for e in ssd.events(t, tok, r) if e["row"] == 0] if r < 4 else []
        arrays = (t.live, t.cached, t.drafts, v.n_accepted, v.token, t.ahead.branch_t)
        out.append(Round(*map(np.asarray, arrays), events))
    return out, rnd.state


greedy, greedy_state = run(T0)
sampled, _ = run(T1)

# %% [markdown]
# ## Round by round
#
# Row 0 of a batch of 32 (the other 31 are the facts prompts of the benchmark), γ = 4, and
# F = 4 guesses of t* cached for every k: 20 branches. Each draft is marked ✓ accepted, ×
# rejected, · never judged. Then the outcome, and the cache built for the next round from
# this round's drafts (on two devices, during this round's verify), one line per k: the
# draft model's four likeliest tokens at position k+1 (for k < γ leaving out the draft
# x_{k+1} itself: why, in the next section). If the outcome is among them, the next round's
# drafts are ready (◆); if not, the next round drafts late, with the backup (◇). Round 1
# always drafts late: there was no round before it.

# %%
MARK = {"accept": "✓", "reject": "×", "discard": "·"}


def show(rounds, title):
    console.rule(title)
    for r, rnd in enumerate(rounds[:4]):
        ev = rnd.events
        s = next(e for e in ev if e["type"] == "ssd")
        drafts = " ".join(f"{e['text']!r}{MARK[e['type']]}" for e in ev if e["type"] in MARK)
        end = next(e for e in ev if e["type"] in ("resample", "bonus"))
        k, t = s["outcome"]
        console.print(
            f"round {r + 1} {'◆' if s['hit'] else '◇'} drafts from the {s['source']}: {drafts}",
            markup=False,
        )
        console.print(
            f"    outcome (k = {k}, t* = {end['text']!r}): "
            f"{'the bonus' if end['type'] == 'bonus' else 'a correction'}",
            markup=False,
        )
        cached = any(kj == k and x == t for kj, x, _ in s["cache"])
        for j in range(GAMMA + 1):
            guesses = " ".join(repr(text) for kj, _, text in s["cache"] if kj == j)
            console.print(
                f"    cache k = {j}: {guesses}"
                + (f"   ← the outcome: round {r + 2} ◆" if cached and j == k else ""),
                markup=False,
            )
        if not cached:
            console.print(f"    the outcome is not cached: round {r + 2} ◇", markup=False)


show(greedy, "T = 0")
text = generated(greedy_state, lengths)[0]
text = text[: text.index(tok.eos_id)] if tok.eos_id in text else text
console.print(f"the greedy text: {PROMPTS[0] + tok.decode(text)!r}", markup=False)
show(sampled, "T = 1")

# %% [markdown]
# `hit` in a round's `ssd` event says where THIS round's drafts came from; its `outcome` and
# `cache` are this round's, for the next. The loop decides a hit exactly as printed above: the
# next round hits if and only if (k, t*) is one of the cached branches. We check it on every
# round but each row's first, in every row, greedy and sampled.


# %%
def looked_up(rounds, f):
    """f(round) (B,) of every round and row that a next round looked up (the row's next round
    took part), in one array."""
    return np.concatenate([f(before)[now.live] for before, now in pairwise(rounds)])


def would_hit(rounds, fanout):
    """Was each looked-up outcome (k, t*) among the branches that a fan-out `fanout` (F_0..F_γ,
    none above F) would have cached?"""
    assert max(fanout) <= F, f"the F = {F} run cannot answer for {fanout}"
    keep = RANK < np.asarray(fanout)[K]  # (K,) which of the F = 4 branches it keeps
    return looked_up(
        rounds, lambda r: np.any((K == r.k[:, None]) & (r.cache == r.t[:, None]) & keep, axis=1)
    )


flags = lambda rounds: np.concatenate([r.hit[r.live] for r in rounds[1:]])
agree = all(
    np.array_equal(would_hit(rs, uniform_fanout(F, GAMMA)), flags(rs)) for rs in (greedy, sampled)
)
console.print(  # the same rule on the same arrays: a check of the trace, printed
    f"the loop's hit flags and the lookup recomputed from the trace "
    f"{'agree' if agree else 'DISAGREE'} on all {len(flags(greedy)) + len(flags(sampled))} "
    "rounds but each row's first (both apply ssd/loop.py's `lookup` rule to the same arrays)"
)

# %% [markdown]
# ## The outcome space
#
# A round with γ drafts ends in one of at most (γ+1)·V outcomes: k = 0..γ drafts accepted,
# then one token t* out of V. For k < γ, t* is the residual's draw after draft k+1 was rejected. A
# draft x can be rejected only where q(x) > p(x), and there the residual norm(max(0, p − q))
# has no mass. So t* is never the rejected x_{k+1} (greedy: x_{k+1} was not the target's
# argmax, t* is), and `build` leaves x_{k+1} out of its guesses at k instead of wasting a
# branch on it. For k = γ, t* is the bonus from p_{γ+1}: any token. Here that leaves
# γ(V − 1) + V = 4 · 2047 + 2048 = 10,236 outcomes, and the cache holds 20 of them.

# %%
x_next = lambda r, k: r.drafts[np.arange(len(r.k))[:, None], np.minimum(k, GAMMA - 1)]  # x_{k+1}
rejected = np.concatenate(
    [(r.t != x_next(r, r.k[:, None])[:, 0])[r.live & (r.k < GAMMA)] for r in greedy + sampled]
)
guessed = [((K < GAMMA) & (r.cache == x_next(r, K)))[r.live] for r in greedy + sampled]
claim(
    rejected.all(),
    f"in all {len(rejected)} rounds that ended in a rejection, t* was not the "
    "rejected draft x_(k+1)",
)
console.print(
    f"and {sum(int(g.sum()) for g in guessed)} of the "
    f"{sum(int(g[:, K < GAMMA].size) for g in guessed):,} cached branches (k < γ, t*) held "
    "x_(k+1): by construction, since `outcome_keys` (ssd/loop.py) scores it −∞ there",
    markup=False,
)

ks = looked_up(sampled, lambda r: r.k)  # how each round ended, aligned with would_hit
hist = np.bincount(ks, minlength=GAMMA + 1)  # rounds that accepted k = 0..γ drafts
share = hist / len(ks)
alpha, rate = iid_acceptance(hist.tolist()), ks.mean() / GAMMA  # lesson 08's α̂; accepted/drafted
iid = [alpha**k * (1 - alpha) if k < GAMMA else alpha**GAMMA for k in range(GAMMA + 1)]
FS = (1, 2, 3, 4)  # uniform fan-outs: the F = 4 run's first F guesses at every k
by_f = {f: would_hit(sampled, uniform_fanout(f, GAMMA)) for f in FS}
table(
    "T = 1: how rounds ended, the i.i.d. model's P(k) at α̂, and the share of each k's "
    "outcomes that F per k caches",
    ["k", "t*", "share of rounds", "i.i.d. P(k)", *(f"F = {f}" for f in by_f)],
    [
        [
            k,
            "bonus" if k == GAMMA else "correction",
            f"{share[k]:.2f}",
            f"{iid[k]:.2f}",
            *(f"{by_f[f][ks == k].mean():.2f}" for f in by_f),
        ]
        for k in range(GAMMA + 1)
    ],
)
claim(share[GAMMA] > 0.5, f"at T = 1 most rounds ended with the bonus ({share[GAMMA]:.0%})")
claim(
    abs(iid[GAMMA] - share[GAMMA]) < abs(rate**GAMMA - share[GAMMA]),
    f"the i.i.d. model at lesson 08's α̂ = {alpha:.3f} puts α̂^γ = {iid[GAMMA]:.2f} of rounds on "
    f"the bonus, nearer the measured {share[GAMMA]:.2f} than at the acceptance rate "
    f"{rate:.3f} (accepted / drafted), which would put {rate**GAMMA:.2f}",
)

# %% [markdown]
# Most rounds end with the bonus: the draft model agrees with the target on about 9 drafts in
# 10 (lesson 08's α), so all γ = 4 pass about two times in three (0.9⁴ ≈ 0.66). The acceptance
# rate, accepted / drafted, is lower, about 8 in 10: it also counts the drafts after a
# rejection, which are never judged. Fed to the i.i.d. model it would say the bonus ends fewer
# than half the rounds; α̂, estimated as lesson 08 does, is what the model needs. The bonus is
# also the easier outcome to cache: after γ drafts the target agreed with, the next token is
# usually predictable, and the draft model's top guesses tend to hold it. The corrections are
# the hard part: a correction is a sample from the residual, which has mass only where the
# draft model under-proposed, while the cache guesses where it proposes most.
#
# ## Hit rate against the fan-out
#
# One run with F = 4 answers for every smaller fan-out: its branches at k are the draft
# model's likeliest tokens there, in order, so a cache of F_k ≤ 4 at each k is its first F_k
# — and a round it hits is a round every larger fan-out hits too (on the same rounds, more
# branches can only add hits). The misses fall roughly as a power of F, 1 − hit rate ≈
# m·F^(−β). `--fanout geometric:10` splits 10 branches over k: one for every k, then the rest
# in proportion to P(k)^(1/(1+β)), the shape of the split that minimises the expected misses
# Σ P(k)·F_k^(−β) when F may be fractional. Rounded so, with a branch for every k, it is a
# heuristic, not always the best whole-number split. P(k) is the i.i.d. model's law above at α̂
# (lesson 08's estimate, not the acceptance rate) and β, both measured on more rounds of the
# shipped pair (ssd/fanout.py, `SHIPPED_ALPHA_BETA`). (± is two standard errors, rounds taken
# as independent.)

# %%
geometric = {t: parse_fanout("geometric:10", GAMMA, t) for t in (0.0, 1.0)}
hit = {
    (f, t): would_hit(rs, uniform_fanout(f, GAMMA))
    for f in FS
    for t, rs in ((0.0, greedy), (1.0, sampled))
}
for t, rs in ((0.0, greedy), (1.0, sampled)):
    hit["geometric", t] = would_hit(rs, geometric[t])  # asserts it caches at most F per k
pct = lambda h: f"{100 * h.mean():.1f} ± {200 * np.sqrt(h.mean() * (1 - h.mean()) / len(h)):.1f}%"
table(
    f"hit rate, {len(hit[1, 0.0])} greedy and {len(hit[1, 1.0])} sampled rounds",
    ["fan-out", "branches", "T = 0", "T = 1"],
    [[f"uniform F = {f}", 5 * f, pct(hit[f, 0.0]), pct(hit[f, 1.0])] for f in FS]
    + [["geometric:10", 10, pct(hit["geometric", 0.0]), pct(hit["geometric", 1.0])]],
)
(a0, b0), (a1, b1) = SHIPPED_ALPHA_BETA["greedy"], SHIPPED_ALPHA_BETA["sampled"]
console.print(
    f"geometric:10 caches F_0..F_4 = {geometric[0.0]} greedy (α̂ = {a0}, β = {b0}), "
    f"{geometric[1.0]} at T = 1 (α̂ = {a1}, β = {b1}): at most {F} per k, so the F = {F} run "
    "answers for it"
)
beta = {t: fit_beta(list(FS), [hit[f, t].mean() for f in FS]) for t in (0.0, 1.0)}
console.print(
    f"misses fall as F^(−β): β = {beta[0.0]:.2f} greedy, {beta[1.0]:.2f} at T = 1 "
    f"(docs/results.md, on more rounds: 1.68 and 0.37)"
)
more = [int(hit[f, 1.0].sum()) for f in FS]
console.print(  # nested caches: more branches can only add hits
    f"at T = 1, hits with F = {', '.join(map(str, FS))}: {', '.join(map(str, more))} of "
    f"{len(hit[1, 1.0])} rounds (each cache holds the smaller ones: never fewer)"
)
claim(
    hit[2, 0.0].mean() >= 0.8,
    f"greedy, 10 branches (F = 2) hit {hit[2, 0.0].mean():.0%} "
    "of rounds: t* is the target's argmax (after a rejection and for the bonus alike), "
    "one token to guess",
)
claim(
    beta[0.0] > 1.5 * beta[1.0],
    f"greedy, misses fall faster with F (β = {beta[0.0]:.2f}) than at "
    f"T = 1 (β = {beta[1.0]:.2f}), where t* is a sample (from p after a full accept, from the "
    "residual after a rejection), not one fixed token",
)
g1, gain = geometric[1.0], hit["geometric", 1.0].mean() - hit[2, 1.0].mean()
moved = {
    k: 100 * share[k] * (by_f[f][ks == k].mean() - by_f[2][ks == k].mean())  # points
    for k, f in enumerate(g1)
    if f != 2
}  # of all rounds, gained or lost at k
moved = ", ".join(f"k = {k}: {v:+.1f}" for k, v in moved.items())
won = int((hit["geometric", 1.0] & ~hit[2, 1.0]).sum())  # rounds only the geometric split hit
lost = int((hit[2, 1.0] & ~hit["geometric", 1.0]).sum())  # ... and only uniform F = 2
claim(
    abs(gain) < 0.05,
    f"at T = 1 the geometric split {g1} moved the hit rate by {100 * gain:+.1f} points from "
    f"uniform F = 2, under 5: only where it moves a branch ({moved} points), {won} rounds "
    f"won and {lost} lost of {len(hit[2, 1.0])}",
)

# %% [markdown]
# ## Why it is still exact
#
# Which branches get cached, and their drafts, depend only on the draft side: the committed
# text, this round's drafts and the draft's key — never on the target's randomness in the
# round being verified. So given the outcome, the branch that matches it holds a fresh sample
# from the law q stored with it, and the verify rule is exact for drafts from any law it is
# told (lesson 04). A miss's backup drafts are judged the same way. Nothing in the rule
# changes. Greedy, that means SSD writes the target's greedy text, token for token. (In exact
# arithmetic; in float32 a near-tie could part the two texts, as lesson 03 explains, and the
# check allows that as the test suite does: only where the target's top two logits are within
# NEAR_TIE = 1e-3.)

# %%
ar = fit(make_loop(bundle, "ar")[0])
ar_state, _ = ar.run(params, (), tokens, lengths, jax.random.key(0), T0, NEW)
reference = text_features(graphdef, params, ids, generated(ar_state, lengths))
parted = reference.parted(generated(greedy_state, lengths))  # [(row, token, top-2 gap)]
for row, at, gap in parted:  # float32 only: texts may part where the top two logits (nearly) tie
    console.print(f"row {row} parts at token {at}: top-2 logit gap {gap:.1e}")
claim(
    all(gap < NEAR_TIE for _, _, gap in parted),
    f"greedy, SSD wrote the autoregressive text on {len(PROMPTS) - len(parted)} of "
    f"{len(PROMPTS)} rows × {NEW} tokens"
    f"{', and the rest part only at near-ties' if parted else ''}",
)

# %% [markdown]
# At T > 0 the claim is about a law, not a text: lesson 18 tests it.

# %% [markdown]
# ## What the cache costs
#
# On one device everything runs in turn: the round's target pass, then `build` — the draft
# model over [last, x₁..x_γ], and γ draft steps for each of the 20 branches of every row.
# For the clock, the same 32 rows at T = 1 by ordinary speculation (`--method draft`) and by
# SSD, a round of each in turn, so that both see the machine as it is (the median of rounds
# 2 to 7; round 1 aside). SSD's `build` runs inside its settle program, so its cost shows in
# the verify-step column. A second copy of the speculation loop takes its turn right after
# SSD's, and is not shown: a program that runs just after SSD's long settle came out dearer
# in earlier runs of this lesson, so the speculation loop timed is the one that never follows it.

# %%
sd = fit(make_loop(bundle, "draft", GAMMA)[0])
loops = {"speculation": sd, f"SSD, F = {F}": ssd}
go = lambda loop: loop.rounds(params, dparams, tokens, lengths, jax.random.key(0), T1, NEW)
in_turn = zip(go(sd), go(ssd), go(sd))  # speculation, SSD, and the untimed copy after SSD
turns = list(islice(in_turn, 1, 7))  # rounds 2 to 7
ms = {
    name: {
        part: 1e3 * np.median([pair[i].seconds[part] for pair in turns])
        for part in ("draft_s", "verify_s")
    }
    for i, name in enumerate(loops)
}
most = max(sum(m.values()) for m in ms.values())  # the bars' scale: the dearer round
table(
    "milliseconds per round, 32 rows, on this machine",
    ["loop", "draft step", "verify step", ""],
    [
        [name, f"{m['draft_s']:.0f}", f"{m['verify_s']:.0f}", bar(sum(m.values()), most, 20)]
        for name, m in ms.items()
    ],
)
slower = sum(ms[f"SSD, F = {F}"].values()) / sum(ms["speculation"].values())
claim(
    slower > 1.2,
    f"on one device a round of SSD took {slower:.1f}× one of speculation "
    f"(asserted: over 1.2×): its {5 * F} branch chains are drafted in turn with the target's "
    "pass, not beside it",
)
s = ms["speculation"]["draft_s"] / sum(ms["speculation"].values())
console.print(
    f"on this machine the draft step was s = {s:.0%} of a speculation round; "
    f"1 / (1 − s) = {1 / (1 - s):.2f}"
)

# %% [markdown]
# (At T = 1, with 32 rows, almost every round has a row that missed, so the draft step runs
# the same backup as speculation's; with one row a hit's draft step is a lookup. So the
# table's two draft steps should cost about alike; the bound below uses speculation's own
# split.) SSD pays only when the
# drafter runs on hardware of its own, building the cache *while* the target verifies: then a
# hit removes drafting from the round's critical path, and a round costs the longer of the
# target's pass and the build. So, at the same γ, SSD can beat ordinary speculation by at
# most (verify + drafting) / verify = 1 / (1 − s), where s is the share of an ordinary round spent
# drafting (measured above). On this CPU the target's pass dominates a round, so s, and the
# bound, are modest, although a draft step costs more than the draft's share of the weights
# would suggest (lesson 19 measures its cost c in target steps). The timeline
# model, and a measurement on two devices, are in docs/results.md ("SSD in time";
# `python -m nanospec.measure.ssd_timeline`).
#
# ## What to take away
#
# SSD changes where drafts come from, never how they are judged: each round is verified
# against the law its drafts were drawn from, and the cache is built from the draft side
# alone, so the text keeps the target's law — greedy, the very greedy text. What it buys is
# time, and only with a second device: the hit rate says how often the next drafts are ready.
# Greedy, a few branches per k catch nearly every outcome; at T = 1, t* is a sample, and
# misses fall slowly with more branches.
