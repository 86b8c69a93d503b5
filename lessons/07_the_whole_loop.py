# %% [markdown]
# # Lesson 07 — The whole loop: bonus token, rollback, the cache invariant
#
# **You will see** a speculative run at T = 1 round by round, with the bonus tokens and the
# rejected drafts pointed out; the reference loop and the loop object's step-wise driver
# write the same tokens; and that driver's KV cache at the right length after every round,
# and at the end the same keys and values as a fresh pass.
#
# **It explains** `nanospec/speculative.py` (`Speculator`: `prefill`, `draft`, then `settle`,
# whose `ChainJudge` makes the round's one target pass and applies verify.py's rule before
# `commit`), `nanospec/rounds.py` (the `Loop` it inherits: `step` and the two drivers, `run`
# and `rounds`) and `nanospec/cache.py` (rollback).
#
# A round of γ drafts emits n + 1 tokens: the n accepted drafts and one more — the residual's
# draw after a rejection, or, when all γ were accepted, a *bonus* token from p_{γ+1}, which the
# verify pass computed anyway. The target's KV cache then holds the block's keys and values
# for every position it saw, rejected drafts included; instead of copying anything, the loop
# sets the cache's length back (rollback). The stale slots stay in the buffer until a later
# block overwrites them, and every pass still runs them through attention's arithmetic (a
# pass works over the whole buffer, lesson 01): model.py's mask sets their scores to −∞, so
# their softmax weight is exactly zero and they add nothing to any query. That needs their
# values finite: 0 · NaN is NaN, so a NaN there would poison every query (the trap
# nanospec/drafters.py's `DraftModel` docstring describes).
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax
import numpy as np

from nanospec.generate import pad_prompts
from nanospec.model import forward
from nanospec.reference import speculative_sampling
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams
from nanospec.speculative import Speculator
from nanospec.teach import claim, console, shipped, table

bundle = shipped("target", "draft")
tok = bundle.tok
cfg, graphdef, params = target = bundle.models["target"]
drafter, dparams = bundle.drafter("draft")
PROMPT, GAMMA, N, SEED = "The population of Peru is about", 4, 32, 3
T1 = SamplingParams.make(1.0)
ids = tok.encode_prompt(PROMPT)
tokens, lengths = pad_prompts([ids], cfg.n_ctx)
loop = Speculator(graphdef=graphdef, cfg=cfg, drafter=drafter, gamma=GAMMA, eos_id=tok.eos_id)

# %% [markdown]
# ## Round by round (the step-wise driver)
#
# ★ marks a bonus token, ↻ the residual's draw. A round emits its accepted drafts and that
# token, except where the run ends: the last round stops at N tokens (or EOS), whatever it drew.
# A token in [brackets] was drawn but cut there: it never reached the text.

# %%
rows, counts, last, invariant = [], [], None, True
for i, rnd in enumerate(loop.rounds(params, dparams, tokens, lengths, jax.random.key(SEED), T1, N)):
    trace, v = rnd.trace, rnd.trace.verdict
    n, k = int(v.n_accepted[0]), int(trace.n_emitted[0])
    counts.append((n, k))  # drafts accepted, tokens emitted
    drafts = [tok.token_str(int(x)) for x in trace.drafts[0]]
    shown = [repr(d) if j < k else f"[{d!r}]" for j, d in enumerate(drafts[:n])]  # cut: [..]
    extra = repr(tok.token_str(int(v.token[0])))
    rows.append(
        [
            i + 1,
            " ".join(shown) or "—",
            repr(drafts[n]) if n < GAMMA else "—",
            ("★ " if bool(v.is_bonus[0]) else "↻ ") + (extra if k > n else f"[{extra}]"),
            k,
        ]
    )
    # The cache invariant: every committed token but the last (it leads the next block).
    invariant &= int(rnd.state.cache.length[0]) == int(rnd.state.length[0]) - 1
    last = rnd
table(
    f"{PROMPT!r}, γ = {GAMMA}, T = 1",
    ["round", "accepted", "rejected", "extra token", "emitted"],
    rows,
)
console.print(  # `commit` rolls the cache back to exactly this: a fact, printed
    f"after every round the target's cache held the committed length − 1 tokens: {invariant}"
)

# %% [markdown]
# ## Two loops, one text
#
# The same key gives the reference loop (plain Python; its target re-reads the whole text every
# round, with no KV cache) and the loop object the same tokens: the key schedule
# (`rounds.round_keys`) depends only on the run's key and the round number. (The step-wise
# driver above runs the very functions that `loop.run` fuses into one `lax.while_loop`;
# tests/test_reference.py checks all three against each other.)

# %%
state, stats = last.state, last.stats
fast = generated(state, lengths)[0]
reference = speculative_sampling(
    target, drafter, dparams, ids, GAMMA, T1, jax.random.key(SEED), N, tok.eos_id
)
console.print(PROMPT + tok.decode(x for x in fast if x != tok.eos_id), markup=False)
claim(
    reference == fast, f"the reference loop and the loop object wrote the same {len(fast)} tokens"
)

# %% [markdown]
# ## Rollback left nothing visible
#
# After the run, the cache's first length − 1 slots must equal a fresh pass over the committed
# text: every rejected draft's keys and values were overwritten or lie past the length.

# %%
n = int(state.cache.length[0])
_, _, fresh = forward(graphdef, params, state.seq[:, :n], np.arange(n)[None])
gap = max(
    float(np.max(np.abs(np.asarray(mine[i][:, :n]) - np.asarray(theirs[i]))))  # (H, n, Dh)
    for mine, theirs in ((state.cache.k, fresh.k), (state.cache.v, fresh.v))
    for i in range(cfg.n_layer)
)
hist = [int(x) for x in stats.hist[0]]
console.print(
    f"rounds by drafts accepted: {hist}; rounds that accepted all {GAMMA} and drew "
    f"a bonus: {hist[GAMMA]} (the last round's may have been cut before its bonus); the cache "
    f"holds every committed token but the last: {n == int(state.length[0]) - 1}"
)
claim(
    gap < 1e-3,
    f"its keys and values equal a fresh pass over the text (largest difference {gap:.1e})",
)
(n_last, k_last), full = counts[-1], all(k == n + 1 for n, k in counts[:-1])
last_one = f"the last cut to {k_last} of its {n_last + 1}" if k_last <= n_last else "the last too"
claim(
    full and k_last <= n_last + 1,
    f"every round emitted its accepted drafts + 1 token, {last_one}",
)
console.print(  # n_new is the sum of the rounds' emitted counts: a fact, printed
    f"the 'emitted' column adds up to the {sum(k for _, k in counts)} tokens written"
)
