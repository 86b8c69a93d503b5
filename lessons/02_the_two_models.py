# %% [markdown]
# # Lesson 02 — The two models: what the target and the draft know
#
# **You will see** the shipped target (6 layers, 11.5 M parameters) and the shipped draft
# (2 layers, 0.7 M parameters) side by side: their next-token laws after "The capital of
# France is", and how often each gets facts and grammar right.
#
# **It explains** `nanospec/model.py` (both are the same GPT-2 code, two sizes),
# `checkpoints/MANIFEST` (how they were trained) and `nanospec/measure/evaluate.py`.
#
# Speculation pays when the draft agrees with the target often: at every position the chance
# that a draft is accepted is Σ_x min(p(x), q(x)) (lesson 04). Small models learn grammar —
# the function words that make up much of any text — long before they learn facts. So a tiny
# draft can be right most of the time, and the target is left to decide the hard tokens.

# %%
import jax.numpy as jnp
import numpy as np

from nanospec.measure.evaluate import fact_accuracy, fact_probes, next_token_accuracy
from nanospec.model import count_params, forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.teach import bar, claim, console, shipped, table

bundle = shipped("target", "draft")
tok = bundle.tok
models = {name: bundle.models[name] for name in ("target", "draft")}
for name, (cfg, _, params) in models.items():
    console.print(f"{name}: {cfg.n_layer} layers, width {cfg.d_model}, "
                  f"{count_params(params):,} parameters")

# %% [markdown]
# ## Their laws after "The capital of France is" (T = 1)

# %%
PROMPT = "The capital of France is"
ids = tok.encode_prompt(PROMPT)
laws = {}
for name, (cfg, graphdef, params) in models.items():
    logits, _, _ = forward(graphdef, params, jnp.asarray([ids]), jnp.arange(len(ids))[None])
    laws[name] = np.asarray(sampling_probs(logits[0, -1], SamplingParams.make(1.0)))
p, q = laws["target"], laws["draft"]
top = np.argsort(-(p + q))[:6]
table(f"next token after {PROMPT!r}", ["token", "target p", "", "draft q", ""],
      [[repr(tok.token_str(int(t))), f"{p[t]:.3f}", bar(p[t], 1, 12), f"{q[t]:.3f}",
        bar(q[t], 1, 12)] for t in top])
overlap = float(np.minimum(p, q).sum())
console.print(f"Σ min(p, q) = {overlap:.3f}: the chance that a draft from q is accepted here")

# %%
claim(int(np.argmax(p)) == int(np.argmax(q)), "both models' likeliest next token is the same: "
      f"{tok.token_str(int(np.argmax(p)))!r}")
claim(overlap > 0.5, f"a draft here is accepted with probability {overlap:.2f}, more often than not")

# %% [markdown]
# ## Facts and grammar, measured
#
# Facts: the greedy answer to "X shares a border with" for every country of the fact table
# that has a neighbour — a rarer fact than a capital, which the corpus states hundreds of times
# and even the draft memorises. Grammar: teacher-forced top-1 accuracy on held-out text, for
# function words ("the", "of", ".", ...) and for every other token.

# %%
rows, scores = [], {}
for name, (cfg, graphdef, params) in models.items():
    facts, _ = fact_accuracy(tok, cfg, graphdef, params, fact_probes()["neighbour"])
    nta = next_token_accuracy(tok, cfg, graphdef, params, n_windows=16)
    scores[name] = (facts, nta["function_word_accuracy"], nta["other_token_accuracy"])
    rows.append([name, *(f"{100 * s:.1f}%" for s in scores[name])])
table("facts versus grammar (greedy)", ["model", "neighbours", "function words", "other tokens"], rows)

# %%
t, d = scores["target"], scores["draft"]
claim(t[0] > d[0] + 0.1, f"the target knows far more neighbours than the draft "
      f"({100 * t[0]:.0f}% vs {100 * d[0]:.0f}%)")
claim(abs(t[1] - d[1]) < 0.03, f"on function words they are level ({100 * t[1]:.1f}% vs "
      f"{100 * d[1]:.1f}%): much of the text is easy, and that is where speculation wins")
