# %% [markdown]
# # Lesson 03 — Greedy speculation by hand
#
# **You will see** the reference loop (`nanospec/reference.py`) run at temperature 0 with the
# shipped draft model: it writes exactly the text that autoregressive greedy decoding writes,
# and the fast loop (`speculative.py`), which follows the same rule, counts its target
# passes: far fewer than decoding's (each round also runs γ draft steps; what the passes cost
# is lessons 01 and 09's question).
#
# **It explains** `nanospec/reference.py`, the whole algorithm in one screen — read it beside
# this lesson.
#
# At T = 0 both models are deterministic: the target's "law" p is a point mass on its argmax,
# and so is the draft's q. The verify rule then reduces to: accept a draft while it equals
# what the target would have chosen; at the first disagreement emit the target's choice; if
# every draft agreed, the target's next choice comes free (the bonus token). Nothing the
# target would not have written can get through, so in exact arithmetic the text cannot
# change — only the number of target passes.
#
# In float32 it can, at a near-tie. Autoregressive decoding scores one new token per pass; the
# reference loop scores the whole sequence in each round's pass, the fast loop the γ + 1 tokens
# of its round (the token before the γ drafts, and the drafts).
# Passes of different widths add the same numbers in different orders, so their logits can
# differ in the last bits (about 1e-5 here), and where the target's top two logits are that
# close the two loops can pick different tokens. tests/statistical/test_greedy_identity.py,
# which holds the fast loop with every drafter to autoregressive decoding, allows exactly that
# and no more: at the first token where the texts differ it recomputes the target's logits
# over the text so far and fails unless the top two are within 1e-3; each near-tie it finds
# is printed and raised as a warning, never hidden. The last cell here does the same check
# and prints each near-tie.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax

from nanospec.generate import generate, pad_prompts
from nanospec.measure.positions import NEAR_TIE, text_features
from nanospec.reference import speculative_sampling
from nanospec.rounds import generated
from nanospec.sampling import GREEDY
from nanospec.speculative import Speculator
from nanospec.teach import claim, console, shipped, table

bundle = shipped("target", "draft")
tok = bundle.tok
cfg, graphdef, params = target = bundle.models["target"]
drafter, dparams = bundle.drafter("draft")
PROMPT, GAMMA, N = "The capital of France is", 4, 32
ids = tok.encode_prompt(PROMPT)

# %% [markdown]
# ## Autoregressive greedy decoding: one target pass per token

# %%
tokens, lengths = pad_prompts([ids], cfg.n_ctx)
ar, _ = generate(graphdef, params, cfg, tokens, lengths, jax.random.key(0), GREEDY, N, tok.eos_id)
ar = ar[0]
console.print(
    f"[bold]autoregressive[/] ({len(ar)} tokens, {len(ar)} target passes: the "
    f"prompt's, which yields the first token, then one for each of the other "
    f"{len(ar) - 1}):"
)
console.print(PROMPT + tok.decode(ar), markup=False)

# %% [markdown]
# ## The reference loop, γ = 4
#
# Each round: the draft model proposes 4 tokens, ONE target pass scores all of them, the
# verify rule keeps the agreeing prefix and adds one token of the target's own.

# %%
spec = speculative_sampling(
    target, drafter, dparams, ids, GAMMA, GREEDY, jax.random.key(0), N, tok.eos_id
)
console.print(f"[bold]speculative[/] ({len(spec)} tokens):")
console.print(PROMPT + tok.decode(spec), markup=False)

# %% [markdown]
# ## Counting target passes
#
# The reference loop makes one target pass over the prompt, then one per round. The fast loop
# (`speculative.py`) follows the same rule, so at T = 0 it makes the same rounds (the last cell
# checks only that it writes the same text, which the same rounds imply but do not prove) and
# counts them (`RoundStats.hist`: rounds by how many drafts they accepted). Its
# pass over the prompt yields no token: the prompt's last token waits for round 1.

# %%
loop = Speculator(graphdef=graphdef, cfg=cfg, drafter=drafter, gamma=GAMMA, eos_id=tok.eos_id)
state, stats = loop.run(params, dparams, tokens, lengths, jax.random.key(0), GREEDY, N)
hist = [int(x) for x in stats.hist[0]]
rounds, fast = sum(hist), generated(state, lengths)[0]
table(
    "rounds by drafts accepted (γ = 4)",
    ["accepted", "rounds", "tokens each (a last round may be cut short)"],
    [[k, n, k + 1] for k, n in enumerate(hist)],
)
console.print(
    f"{len(fast)} tokens in {rounds + 1} target passes (the prompt's, then {rounds} "
    f"rounds) instead of {len(ar)}: {len(fast) / rounds:.2f} tokens per round"
)

# %%
text = text_features(graphdef, params, [ids, ids], [ar, ar])  # AR's text, once per loop
parted = text.parted([spec, fast])  # [] if both loops wrote AR's text
for b, at, gap in parted:  # float32 only: where the target's top two logits (nearly) tie
    console.print(
        f"the {('reference', 'fast')[b]} loop's text parts from AR's at token {at}, "
        f"where the target's top two logits are {gap:.1e} apart"
    )
claim(
    all(gap < NEAR_TIE for _, _, gap in parted),
    "both loops write exactly the "
    "autoregressive text" + (", but for a near-tie, as the suite allows" if parted else ""),
)
claim(
    rounds + 1 < len(ar) / 2,
    f"it needed {rounds + 1} target passes (and {GAMMA} draft steps in each of its {rounds} "
    f"rounds) for {len(fast)} tokens, fewer than half of autoregressive decoding's {len(ar)}",
)
