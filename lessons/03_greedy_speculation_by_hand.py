# %% [markdown]
# # Lesson 03 — Greedy speculation by hand
#
# **You will see** the reference loop (`nanospec/reference.py`) run at temperature 0 with the
# shipped draft model: it writes exactly the text that autoregressive greedy decoding writes,
# in far fewer target passes.
#
# **It explains** `nanospec/reference.py`, the whole algorithm in one screen — read it beside
# this lesson.
#
# At T = 0 both models are deterministic: the target's "law" p is a point mass on its argmax,
# and so is the draft's q. The verify rule then reduces to: accept a draft while it equals
# what the target would have chosen; at the first disagreement emit the target's choice; if
# every draft agreed, the target's next choice comes free (the bonus token). Nothing the
# target would not have written can get through, so the text cannot change — only the number
# of target passes.

# %%
import jax

from nanospec.generate import generate, pad_prompts
from nanospec.reference import speculative_sampling
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
console.print(f"[bold]autoregressive[/] ({len(ar)} tokens, {len(ar)} target passes):")
console.print(PROMPT + tok.decode(ar), markup=False)

# %% [markdown]
# ## The reference loop, γ = 4
#
# Each round: the draft model proposes 4 tokens, ONE target pass scores all of them, the
# verify rule keeps the agreeing prefix and adds one token of the target's own.

# %%
spec = speculative_sampling(target, drafter, dparams, ids, GAMMA, GREEDY, jax.random.key(0), N,
                            tok.eos_id)
console.print(f"[bold]speculative[/] ({len(spec)} tokens):")
console.print(PROMPT + tok.decode(spec), markup=False)

# %% [markdown]
# ## Counting target passes
#
# The reference loop makes one target pass per round. The fast loop object makes the same
# rounds and counts them (`RoundStats.hist`: rounds by how many drafts they accepted).

# %%
loop = Speculator(graphdef=graphdef, cfg=cfg, drafter=drafter, gamma=GAMMA, eos_id=tok.eos_id)
state, stats = loop.run(params, dparams, tokens, lengths, jax.random.key(0), GREEDY, N)
hist = [int(x) for x in stats.hist[0]]
rounds = sum(hist)
table("rounds by drafts accepted (γ = 4)", ["accepted", "rounds", "tokens each"],
      [[k, n, k + 1] for k, n in enumerate(hist)])
console.print(f"{len(spec)} tokens in {rounds} target passes instead of {len(ar)}: "
              f"{len(spec) / rounds:.2f} tokens per pass")

# %%
claim(spec == ar, "greedy speculation writes exactly the autoregressive text")
claim(rounds < len(ar) / 2, f"it needed {rounds} target passes for {len(ar)} tokens, "
                            f"fewer than half")
