# %% [markdown]
# # Lesson 14 — Multi-token prediction: a chain of small modules
#
# **You will see** the loop with the shipped MTP modules write the target's greedy text; then
# MTP, EAGLE and Medusa asked for their drafts at every point of that text — lessons 12 and
# 13's tables, one row more: MTP accepts far more than Medusa and somewhat less than EAGLE —
# and what each of the three adds to the target.
#
# **It explains** `MTPModule` in `nanospec/heads/modules.py`, `MTPDrafter` in
# `nanospec/heads/drafters.py` and `mtp_loss` in `nanospec/training/heads.py`.
#
# DeepSeek-V3 trains its model to predict tokens beyond the next with a chain of modules, one
# per extra depth (V3 itself uses one module: the next token and the one after); here such a
# chain, four deep, is distilled onto the frozen target and drafts for it.
# Module k has its own weights. It takes the representation h^{k−1} from the depth before it
# and the embedding of a token x, normalises each (LayerNorm), projects [LN(h^{k−1}) ;
# LN(embed(x))] down to half the target's width, adds a residual MLP block (LayerNorm, GELU)
# and projects back to the target's width: that is h^k. One more LayerNorm and the target's
# output layer give the law of the token after x. (DeepSeek-V3's modules use RMSNorm and hold
# a whole transformer block; these hold only the MLP.)
#
# Drafting: module 1 starts from the target's raw feature at L−2 and the last committed token
# y, so x₁ is a guess of the very next token, like EAGLE's first. Module 2 takes h^1 and x₁,
# module 3 h^2 and x₂: each depth sees the draft before it, like EAGLE. Unlike EAGLE, there is
# one module per draft (so γ ≤ 4) and no attention: a module reads one representation, not the
# history, so between rounds MTP keeps a single feature, as Medusa does. Training (`mtp_loss`)
# chains modules 1..k along the corpus's own tokens — module k at position i reads token i+k
# and is matched to the target's law for token i+k+1 — and never feeds them their own guesses.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax
import numpy as np

from nanospec.decode import make_loop
from nanospec.generate import pad_prompts
from nanospec.measure.positions import NEAR_TIE, acceptance_by_position, greedy_text
from nanospec.measure.probes import extra_cost
from nanospec.measure.workloads import workload_prompts
from nanospec.teach import claim, console, figure, shipped, table

NAMES = ("medusa", "eagle", "mtp")
bundle = shipped("target", *NAMES)
tok = bundle.tok
cfg, graphdef, params = bundle.models["target"]
hc = bundle.models["mtp"][0]
console.print(
    f"MTP: {hc.depth} modules, {hc.width} wide, MLP {hc.mlp_mult}× wider, "
    f"on a target {hc.d_model} wide"
)
GAMMA, N = hc.depth, 48
ids = [tok.encode_prompt(p) for p in workload_prompts("facts", 4) + workload_prompts("code", 4)]

# %% [markdown]
# ## The loop with MTP, T = 0
#
# The prompts of lessons 12 and 13, and lesson 13's check: one uncached target pass over the
# output must find every generated token to be the target's argmax after the text before it —
# save at a near-tie, where the target's top two logits are closer than NEAR_TIE and the
# loop's blockwise arithmetic and the one pass may round either way.

# %%
text, m = greedy_text(bundle, "mtp", ids, N, GAMMA)
console.print(
    f"{m['generated_tokens']} tokens in {m['rounds']} rounds over the {len(ids)} rows, "
    f"one target pass each for its row (the rows share batched passes; plus one over "
    f"the prompt): {m['tokens_per_target_call']:.2f} tokens per round"
)

off = text.off_greedy()  # [(row, token, top-2 gap)] wherever a token is not the argmax
claim(
    all(gap < NEAR_TIE for _, _, gap in off),
    f"every token MTP's loop wrote on the "
    f"{len(ids)} prompts is the target's greedy choice, save where it diverged at a "
    f"near-tie ({len(off)} tokens here; the closest call: a top-2 gap of "
    f"{text.continuation_gaps().min():.4f}): the text of greedy decoding",
)

# %% [markdown]
# ## Three drafters, a round at every point of the text
#
# (The tokens per round weighs every start alike, so it comes out above the loop's own count,
# for lesson 13's reasons: the loop dwells on hard stretches; each row's last round is cut short.)

# %%
pos = acceptance_by_position([bundle.drafter(n) for n in NAMES], text, GAMMA)
accepted, reached = pos.accepted, pos.reached  # (3, γ) each: Medusa, EAGLE, MTP
table(f"accepted, by position, T = 0: a round at each of {pos.rounds} starts", *pos.table(NAMES))
table("draft k accepted, once reached", *pos.table(NAMES, "reached"))
figure("14_three_heads", lambda ax: pos.plot(ax, NAMES))

# %%
medusa, eagle, mtp = accepted
claim(
    (mtp - medusa > 0.05).all(),
    "MTP accepts more than Medusa at every position: "
    + ", ".join(f"{a:.2f} vs {b:.2f}" for a, b in zip(mtp, medusa)),
)
claim(
    np.abs(reached[2] - reached[2, 0]).max() < 0.05 and reached[2].min() > reached[0].max(),
    "like EAGLE's, every MTP draft, once reached, is accepted about as often as its first "
    f"(within 0.05: {', '.join(f'{r:.2f}' for r in reached[2])}), and at least "
    f"{reached[2].min():.2f} of the time; a Medusa head at most {reached[0].max():.2f}",
)
claim(
    (eagle > mtp).all(),
    "EAGLE accepts more than MTP at every position: "
    + ", ".join(f"{a:.2f} vs {b:.2f}" for a, b in zip(eagle, mtp)),
)

# %% [markdown]
# MTP's first module sees the last committed token, and each later one the draft before it,
# so every draft is a one-step guess; Medusa's heads see neither. Draft 1 already differs (the
# first table). That fits the idea that seeing the token is what lifts MTP above Medusa, but
# this lesson does not isolate it: MTP also has more parameters (the table below), another
# block and another training loss. What keeps it below EAGLE, this lesson does not separate
# either: EAGLE attends over the whole history of (feature, token) pairs and was trained to
# read its own guessed features; an MTP module sees only the representation handed down the
# chain.
#
# ## What each adds to the target
#
# `measure.probes.extra_cost` as in lesson 12, and the drafter's state between rounds.

# %%
tokens, lengths = pad_prompts(ids, cfg.n_ctx)


def carried(method):
    """The numbers the drafter keeps per row between rounds, from `prefill` traced."""
    loop, dparams = make_loop(bundle, method, GAMMA)
    s = jax.eval_shape(
        lambda: loop.prefill(params, dparams, tokens[:1], lengths[:1], jax.random.key(0))
    )
    return sum(x.size for x in jax.tree.leaves(s.dstate))


cost = {n: (extra_cost(bundle, n, GAMMA), carried(n)) for n in NAMES}
table(
    "what a head adds to the target",
    ["head", "parameters", "MiB", "state per row"],
    [
        [n, f"{c['extra_params']:,}", f"{c['extra_memory_mb']:.2f}", f"{s:,} numbers"]
        for n, (c, s) in cost.items()
    ],
)
console.print(
    f"By construction, MTP keeps one feature per row between rounds "
    f"({cost['mtp'][1]} numbers, the target's width), as Medusa does; EAGLE a KV "
    f"cache and its last output ({cost['eagle'][1]:,} numbers)."
)

# %% [markdown]
# ## What to look at
#
# The parameters column: with a module per depth, MTP carries the most weights of the three,
# and reads each depth's weights once a round; EAGLE reuses one layer for every draft. The MiB
# column counts more than the parameters (4 bytes each): what a drafter derives at load and
# one row's state between rounds. EAGLE derives two things (`EagleFold`): its layers folded
# into new matrices, and a table of the target's first feature for every one-token prompt
# (2,048 × 384 numbers, 3.0 MiB, read only in such a prompt's first round) — so EAGLE, with
# fewer parameters than MTP, holds more memory, and without that table about as much. Three
# heads on one target: blind to their own drafts (Medusa), seeing the draft before through one
# representation (MTP), attending over the whole history (EAGLE) — and at T = 0 all three
# write the target's own greedy text (lessons 12, 13 and this one check it), a genuine
# near-tie aside.
