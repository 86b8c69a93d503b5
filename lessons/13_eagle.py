# %% [markdown]
# # Lesson 13 — EAGLE: drafting in feature space
#
# **You will see** the loop with the shipped EAGLE head write the target's greedy text; then
# EAGLE and the Medusa heads asked for their drafts at every point of that text, side by side
# in lesson 12's table — EAGLE accepts far more, at every position — and why: once reached
# (the drafts before it accepted), each EAGLE draft is accepted about as often as its first,
# and more often than any Medusa head is (Medusa's row stays within a looser band, and lower).
#
# **It explains** `nanospec/heads/modules.py` (`EagleHead`), `nanospec/heads/drafters.py`
# (`EagleDrafter`) and `eagle_loss` in `nanospec/training/heads.py`.
#
# Medusa's heads all read one feature and never see a drafted token. EAGLE (Li et al., 2024)
# drafts autoregressively again — but over the target's *features*, not its tokens. Its one
# transformer layer (a GPT-2 block at half the target's width) reads pairs: at position i the
# target's normalised feature f_i = ln_f(h_i) and the embedding of token i+1, fused by one
# linear layer, fc([f_i ; embed(token i+1)]). Its output, projected back to the target's
# width, is a guess f̂_{i+1} of the target's next feature, and the target's own output layer
# turns that into the law of token i+2.
#
# Between rounds its KV cache holds the pairs of every committed position up to L−2 — the last
# one carries the last committed token — so its output there is f̂_{L−1}, and the law of the
# first draft x₁. The pair (f̂_{L−1}, x₁) then gives f̂_L and x₂, and so on: each draft sees
# the drafts before it, and a whole feature carries the target's state from step to step.
# After the verify pass it re-reads the accepted tokens with the target's *real* features, so its
# own guesses never pile up. Training (`eagle_loss`) matches the target's law and pulls f̂
# towards the real feature (smooth-L1), as EAGLE does. But drafting feeds the layer its own f̂,
# which training on real features alone never shows it. EAGLE answered that by adding noise
# to the features it trains on; nanospec adds none (`training/heads.py` leaves noise out) and
# instead runs a second pass that feeds the layer its own f̂ from the first: a one-step form
# of what EAGLE-3 (Li et al., 2025) calls a training-time test (EAGLE-3 also drops the
# feature loss, which nanospec keeps).
# (At load, `EagleFold` multiplies the projection into fc and the output layer, so a draft
# step stays 192 wide.)
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import numpy as np

from nanospec.measure.positions import NEAR_TIE, acceptance_by_position, greedy_text
from nanospec.measure.workloads import workload_prompts
from nanospec.teach import claim, console, figure, shipped, table

NAMES = ("medusa", "eagle")
bundle = shipped("target", *NAMES)
tok = bundle.tok
GAMMA, N = 4, 48
ids = [tok.encode_prompt(p) for p in workload_prompts("facts", 4) + workload_prompts("code", 4)]

# %% [markdown]
# ## The loop with EAGLE, T = 0
#
# The prompts and length of lesson 12. Lesson 12 compared the output with the autoregressive
# loop's; here an equivalent check costs one pass: greedy decoding writes, at every step, the
# target's argmax after the text so far — so one uncached target pass over the output must
# find every generated token to be the argmax at the position before it.
# (`measure.positions.greedy_text` runs the loop and that pass.) Only a genuine near-tie may
# differ: the loop's blockwise arithmetic and the one pass round differently (~1e-5 in float32),
# so where the target's top two logits are closer than NEAR_TIE either may win; we count those.
# (On GPUs JAX multiplies float32 in TF32 by default, ~1e-3 relative error; the lessons ask
# for full float32: nanospec.teach.)

# %%
text, m = greedy_text(bundle, "eagle", ids, N, GAMMA)
console.print(
    f"{m['generated_tokens']} tokens in {m['rounds']} rounds over the {len(ids)} rows, "
    f"one target pass each for its row (the rows share batched passes): "
    f"{m['tokens_per_target_call']:.2f} tokens per round (the prompt's pass is not counted)"
)

off = text.off_greedy()  # [(row, token, top-2 gap)] wherever a token is not the argmax
claim(
    all(gap < NEAR_TIE for _, _, gap in off),
    f"every token EAGLE's loop wrote on the "
    f"{len(ids)} prompts is the target's greedy choice, save where it diverged at a "
    f"near-tie ({len(off)} tokens here; the closest call: a top-2 gap of "
    f"{text.continuation_gaps().min():.4f}): the text of greedy decoding",
)

# %% [markdown]
# ## Side by side: a round at every point of the text
#
# Lesson 12's measurement, for both drafters at once: each drafter's state at every committed
# length L (its own `init`), its 4 greedy drafts (`propose`), and how many match the text.
# Its tokens per round weighs every start alike, so it comes out above the loop's own count:
# the loop starts a round only where the last one ended, so it dwells on the hard stretches,
# and each row's last round is cut short where the text ends (EOS, or 48 tokens).

# %%
pos = acceptance_by_position([bundle.drafter(n) for n in NAMES], text, GAMMA)
accepted, reached = pos.accepted, pos.reached  # (2, γ) each: Medusa, EAGLE
table(f"accepted, by position, T = 0: a round at each of {pos.rounds} starts", *pos.table(NAMES))
figure("13_eagle_vs_medusa", lambda ax: pos.plot(ax, NAMES))
claim(
    (accepted[1] - accepted[0] > 0.1).all(),
    "EAGLE accepts more than Medusa at every "
    "position: " + ", ".join(f"{e:.2f} vs {md:.2f}" for md, e in accepted.T),
)

# %% [markdown]
# ## One reason: every EAGLE draft is a one-step guess
#
# Divide each accepted share by the one before it: how often draft k is accepted once a round
# reaches it, that is, once drafts 1..k−1 were accepted (lesson 08 measured the draft model so).

# %%
table("draft k accepted, once reached", *pos.table(NAMES, "reached"))
claim(
    np.abs(reached[1] - reached[1, 0]).max() < 0.05,
    "once reached, every EAGLE draft is "
    "accepted about as often as its first (within 0.05): "
    + ", ".join(f"{x:.2f}" for x in reached[1]),
)
claim(
    reached[1].min() > reached[0].max(),
    f"every EAGLE draft, once reached, is accepted at "
    f"least {reached[1].min():.2f} of the time; a Medusa head at most {reached[0].max():.2f}",
)
claim(
    np.abs(reached[0] - reached[0, 0]).max() < 0.1,
    "Medusa's row, once reached, stays within 0.1 of its first (twice EAGLE's band), "
    "and lower: " + ", ".join(f"{x:.2f}" for x in reached[0]),
)

# %% [markdown]
# EAGLE's first step reads the pair that carries the last committed token, and each later step
# reads the draft before it: every draft is a guess of the very next token, the guess the target
# itself makes. Medusa's head k never sees the last committed token nor any draft: it guesses
# k+1 tokens past its feature, however right its neighbours were. That difference fits these
# numbers, but they do not isolate it: the heads also differ in size, in EAGLE's attention over
# the history, and in how they were trained. Medusa's row stays in a band too — a round that
# reaches head k is in text the heads before it found easy, which likely makes up for guessing
# farther ahead (this lesson does not measure that) — but at a lower level, and the levels
# compound: a draft's accepted share in the first table is, by definition, the product of the
# second table's row up to it. One round where the difference shows (× marks a wrong draft; a
# round is cut at its first one, and whatever comes after it is wasted):

# %%
# The first round where EAGLE's 4 drafts are right and Medusa's 2nd is wrong after a right 1st.
right = pos.right  # (B, J, 2, γ)
shows = pos.valid & right[:, :, 1].all(-1) & right[:, :, 0, 0] & ~right[:, :, 0, 1]
claim(
    shows.any(),
    f"in {shows.sum()} of the {pos.rounds} rounds EAGLE's 4 drafts are right "
    "and Medusa's 2nd is wrong after a right 1st; the first of them:",
)
b, j = next(zip(*np.nonzero(shows)))
start = pos.starts[b, j]
mark = lambda x, ok: repr(tok.token_str(int(x))) + ("" if ok else " ×")
table(
    f"one round: {tok.decode(text.seq[b, max(0, start - 12) : start])!r} …",
    ["", *[f"draft {k}" for k in range(1, GAMMA + 1)]],
    [["the text", *(repr(tok.token_str(int(x))) for x in pos.truth[b, j])]]
    + [
        [n, *(mark(x, ok) for x, ok in zip(pos.drafts[b, j, i], right[b, j, i]))]
        for i, n in enumerate(NAMES)
    ],
)

# %% [markdown]
# ## What to look at
#
# The second table: both rows are about flat, and Medusa's never climbs to EAGLE's lowest
# column. Here the drafter that sees its own drafts (EAGLE) goes on as long as the text is
# predictable, and the one that guesses blind (Medusa) is cut short far more often; as said
# above, that fits seeing the drafts, but the two heads differ in other ways too. Why
# *features* and not just tokens, as the draft model does? The layer starts from everything
# the target's six layers worked out, and only has to predict how that moves one step. That is
# the likely reason EAGLE accepts more per round than the draft model on every workload
# (docs/results.md), but not an isolated one: EAGLE is also distilled from the target's law,
# while the draft model learned the corpus on its own. Lesson 14: multi-token prediction,
# autoregressive too, without attention.
