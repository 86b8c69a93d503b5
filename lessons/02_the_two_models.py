# %% [markdown]
# # Lesson 02 — The two models: what the target and the draft know
#
# **You will see** the shipped target (6 layers, 11.5 M parameters) and the shipped draft
# (2 layers, 0.7 M parameters) side by side: how they were trained, their next-token laws
# after "The capital of France is", how often each gets a rare fact and running text right, and
# how often the draft agrees with the target, which is what speculation needs.
#
# **It explains** `nanospec/model.py` (both are the same GPT-2 code, two sizes),
# `checkpoints/MANIFEST` (how they were trained) and `nanospec/measure/evaluate.py`.
#
# Speculation pays when the draft agrees with the target often: at every position the chance
# that a draft is accepted is Σ_x min(p(x), q(x)), with p the target's next-token law and q the
# draft's (lesson 04). Both models read the same text, the draft for more tokens (the table's
# "tokens seen"); it has about a sixteenth of the parameters. What it loses is shown below: on
# held-out running text — function words ("the", "of", "."; a few word pieces such as the "an"
# of "Chilean" count too) make up about a third of it — it
# is nearly as often right as the target, but on a rare fact it falls far behind. Being right
# is not yet agreeing (the two can be right at different positions), so the lesson then measures
# agreement itself: on running text the draft mostly agrees with the target, and the target
# is left to decide the hard tokens.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax.numpy as jnp
import numpy as np

from nanospec.checkpoint import read_manifest
from nanospec.measure.evaluate import (
    agreement,
    capital_accuracy,
    fact_accuracy,
    fact_probes,
    next_token_accuracy,
)
from nanospec.model import count_params, forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.teach import SHIPPED, bar, claim, console, shipped, table

bundle = shipped("target", "draft")
tok = bundle.tok
models = {name: bundle.models[name] for name in ("target", "draft")}
manifest = read_manifest(SHIPPED)["models"]  # what `nanospec train` recorded for each file
rows = []
for name, (cfg, _, params) in models.items():
    m = manifest[f"{name}.safetensors"]
    rows.append(
        [
            name,
            cfg.n_layer,
            cfg.d_model,
            f"{count_params(params):,}",
            m["train"]["steps"],
            f"{m['tokens_seen']:,}",
            f"{m['final_val_loss']:.3f}",
        ]
    )
table(
    "the two shipped models (checkpoints/MANIFEST)",
    ["model", "layers", "width", "parameters", "steps", "tokens seen", "val loss"],
    rows,
)
corpus = {name: manifest[f"{name}.safetensors"]["train_tokens_in_corpus"] for name in models}
machine = {name: manifest[f"{name}.safetensors"]["machine"] for name in models}
console.print(
    f"training corpus, in tokens: {', '.join(f'{k} {v:,}' for k, v in corpus.items())}; "
    f"machine: {', '.join(f'{k} {v!r}' for k, v in machine.items())}; val loss: mean "
    "cross-entropy per token (nats) on 8 held-out batches at the end of training, before the "
    "weights were rounded to float16 for shipping"
)

# %% [markdown]
# ## Their laws after "The capital of France is" (T = 1)
#
# T is the sampling temperature; T = 1 is each model's own softmax, with no top-k or top-p cut
# (lesson 10 varies them).

# %%
PROMPT = "The capital of France is"
ids = tok.encode_prompt(PROMPT)
laws = {}
for name, (cfg, graphdef, params) in models.items():
    logits, _, _ = forward(graphdef, params, jnp.asarray([ids]), jnp.arange(len(ids))[None])
    laws[name] = np.asarray(sampling_probs(logits[0, -1], SamplingParams.make(1.0)))
p, q = laws["target"], laws["draft"]
top = np.argsort(-(p + q))[:6]
table(
    f"next token after {PROMPT!r}",
    ["token", "target p", "", "draft q", ""],
    [
        [
            repr(tok.token_str(int(x))),
            f"{p[x]:.3f}",
            bar(p[x], 1, 12),
            f"{q[x]:.3f}",
            bar(q[x], 1, 12),
        ]
        for x in top
    ],
)
overlap = float(np.minimum(p, q).sum())
console.print(f"Σ min(p, q) = {overlap:.3f}: the chance that a draft from q is accepted here")

# %%
claim(
    int(np.argmax(p)) == int(np.argmax(q)),
    f"both models' likeliest next token is the same: {tok.token_str(int(np.argmax(p)))!r}",
)
claim(
    overlap > 0.5, f"a draft here is accepted with probability {overlap:.2f}, more often than not"
)

# %% [markdown]
# ## A rare fact and running text, measured
#
# Facts: the greedy answer to "X shares a border with" for every country of the fact table that
# has a neighbour — a rarer fact than a capital, which the corpus states hundreds of times (the
# capitals column: the same greedy test on "The capital of X is"). Running text: teacher-forced
# top-1 accuracy on held-out text (does the model's likeliest next token match the text's?), for
# function words ("the", "of", ".", ...) and for every other token.

# %%
WINDOWS = 16  # held-out windows of n_ctx = 256 tokens each
rows, scores, capitals = [], {}, {}
for name, (cfg, graphdef, params) in models.items():
    facts, _ = fact_accuracy(tok, cfg, graphdef, params, fact_probes()["neighbour"])
    capitals[name], _ = capital_accuracy(tok, cfg, graphdef, params)
    nta = next_token_accuracy(tok, cfg, graphdef, params, n_windows=WINDOWS)
    share = nta["function_word_fraction"]  # the same text for both models
    scores[name] = (facts, nta["function_word_accuracy"], nta["other_token_accuracy"])
    rows.append([name, f"{100 * capitals[name]:.1f}%", *(f"{100 * s:.1f}%" for s in scores[name])])
table(
    "a common fact, a rare one, and running text (greedy top-1)",
    ["model", "capitals", "neighbours", "function words", "other tokens"],
    rows,
)
console.print(
    f"function words are {100 * share:.0f}% of the {WINDOWS * cfg.n_ctx:,} held-out tokens scored"
)

# %%
t, d = scores["target"], scores["draft"]
gap = [100 * (a - b) for a, b in zip(t, d)]  # points the draft is behind: facts, fw, other
claim(
    t[0] > d[0] + 0.1,
    f"the target knows far more neighbours than the draft ({100 * t[0]:.0f}% vs {100 * d[0]:.0f}%)",
)
claim(
    max(gap[1], gap[2]) < 5,
    f"on running text the draft is nearly as often right ({gap[1]:.1f} points "
    f"behind on function words, {gap[2]:.1f} on other tokens)",
)
claim(
    gap[1] < gap[2] < gap[0],
    f"the draft's gap is smallest on function words ({gap[1]:.1f} "
    f"points), larger on other tokens ({gap[2]:.1f}), largest on the rare fact ({gap[0]:.0f})",
)

# %% [markdown]
# ## Right is not the same as agreeing
#
# Acceptance asks whether the draft agrees with the *target*, not with the text: the two models
# can be right at different positions, and where both are wrong they can guess differently, so
# an accuracy gap of a few points can hide a larger share of disagreement. So, on the same
# held-out tokens, how often the draft's likeliest token is the target's, and the mean of Σ
# min(p, q) at T = 1 — the chance that a draft sampled from q is accepted there
# (`evaluate.agreement`).

# %%
agree = agreement(tok, models["target"], models["draft"], n_windows=WINDOWS)
table(
    "does the draft agree with the target? (the same held-out tokens, teacher-forced)",
    ["", "function words", "other tokens"],
    [
        [
            label,
            *(f"{agree[f'{what}_{kind}']:.3f}" for kind in ("function_words", "other_tokens")),
        ]
        for label, what in (
            ("likeliest token the same", "argmax_agreement"),
            ("Σ min(p, q), T = 1", "mean_overlap"),
        )
    ],
)
everywhere = [agree[k] for k in agree]
claim(
    min(everywhere) > 0.8,
    f"on running text the draft mostly agrees with the target: the same likeliest token on "
    f"{agree['argmax_agreement_function_words']:.0%} of function words and "
    f"{agree['argmax_agreement_other_tokens']:.0%} of other tokens, and a sampled draft "
    f"accepted with probability {agree['mean_overlap_other_tokens']:.2f} on the other tokens: "
    "most text is easy, and that is where speculation wins",
)
