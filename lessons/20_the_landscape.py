# %% [markdown]
# # Lesson 20 — The landscape
#
# **You will see** two lossy acceptance rules of the kind other systems offer — a lenient ratio
# and Medusa's typical acceptance — written here in a few lines each and run beside the exact
# rule on 384 real positions of the shipped pair: how far each one's output is from the
# target's law, and how many more tokens per target pass that buys. Then Leviathan et al.'s
# condition α > c and their count of arithmetic operations, with the α measured here; and where
# lookahead decoding, self-speculation and suffix decoding sit, with the paper for each.
#
# **It explains** why `nanospec/verify.py` has one rule and no knob to loosen it, and where
# nanospec's drafters sit among the published methods.
#
# Every rule here has the same shape as in the wrong-ways lesson: the draft proposes x ~ q,
# the rule keeps it with probability a(x), and otherwise emits a token from a fallback law f.
# The emitted token then has the law
#
#     P(y) = q(y)·a(y) + (1 − A)·f(y),      A = Σ_z q(z)·a(z), the rule's chance of acceptance
#
# (For the exact rule, A = α, NOTATION.md's acceptance probability; for the other rules A is
# their acceptance, not Σ min(p, q), and the table and claims below write A for every rule.)
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from nanospec.generate import generate, pad_prompts
from nanospec.measure.bench import expected_tokens
from nanospec.measure.workloads import workload_prompts
from nanospec.model import count_params, forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.teach import bar, claim, console, shipped, table, tv
from nanospec.verify import residual as verify_residual
from nanospec.verify import verify_row

bundle = shipped("target", "draft")
tok, T1 = bundle.tok, SamplingParams.make(1.0)
cfg, graphdef, params = bundle.models["target"]
dcfg, dgraphdef, dparams = bundle.models["draft"]
GAMMA, N_NEW = 4, 48

# %% [markdown]
# ## Real laws: the target's p and the draft's q at 384 positions
#
# The target writes 48 tokens at T = 1 after each of 4 facts and 4 code prompts (EOS off).
# One uncached pass of each model over the texts gives, before every written token, the
# target's law p and the draft's law q: what the verify rule would judge a draft with there.

# %%
ids = [tok.encode_prompt(s) for s in workload_prompts("facts", 4) + workload_prompts("code", 4)]
tokens, lengths = pad_prompts(ids, cfg.n_ctx)
written, _ = generate(
    graphdef, params, cfg, tokens, lengths, jax.random.key(0), T1, N_NEW, eos_id=-1
)
texts = [a + list(w) for a, w in zip(ids, written)]
seq = np.array([t + [0] * (max(map(len, texts)) - len(t)) for t in texts], np.int32)  # (B, W)


@partial(jax.jit, static_argnums=0)
def laws(graphdef, params, seq):  # (B, W) -> (B, W, V): the law of the token after each
    logits, _, _ = forward(graphdef, params, seq, jnp.arange(seq.shape[1])[None])
    return sampling_probs(logits, T1)


at = [(b, i) for b, a in enumerate(ids) for i in range(len(a) - 1, len(texts[b]) - 1)]
rows, cols = np.array(at).T
p = np.asarray(laws(graphdef, params, seq), np.float64)[rows, cols]  # (n, V)
q = np.asarray(laws(dgraphdef, dparams, seq), np.float64)[rows, cols]  # (n, V)
p, q = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)  # sum to 1 in float64 too
console.print(f"{len(p)} positions, vocabulary {p.shape[1]}: p and q from sampling_probs, T = 1")

# %% [markdown]
# ## Four rules, each a pair (a, f)
#
# - **exact**: a = min(1, p/q), f = the residual norm(max(0, p − q)). Its α is Σ min(p, q).
# - **lenient ratio** (λ = 0.5): a = min(1, p/(λq)), the same residual. Token y now arrives
#   by acceptance with probability min(q(y), p(y)/λ), which overshoots p(y) wherever
#   q(y) > p(y), and the residual only adds mass where p > q: the output leans towards q.
# - **typical acceptance**, from Medusa (Cai et al., 2024, "Medusa: Simple LLM Inference
#   Acceleration Framework with Multiple Decoding Heads"): keep x if p(x) > min(ε, η·e^(−H(p))),
#   H the target's entropy in nats, ε = 0.09 and η = 0.3 (the Medusa code's
#   `posterior_threshold` and `posterior_alpha`); else emit the target's argmax, as the
#   Medusa code's default path does. It never reads q(x): it keeps whatever the target finds
#   plausible enough, with a lower bar where the target is unsure. (Medusa's drafts come from
#   its heads; here all rules judge the draft model's.)
# - **accept every draft**: a = 1. The output is q — the draft model alone, the far end.
#
# A and the TV are computed exactly at each position and averaged over the 384. Tokens per
# target pass come from the mean A by the i.i.d. model, E = (1 − A^(γ+1)) / (1 − A) at
# γ = 4, which the tokens-per-round lesson found within 10% of the rounds measured.


# %%
def residual(p, q):  # norm(max(0, p − q)) per row; p ≠ q at every real position here
    r = np.maximum(p - q, 0.0)
    return r / r.sum(-1, keepdims=True)


def exact(p, q):
    return np.minimum(1.0, p / q), residual(p, q)


def lenient(p, q, lam=0.5):
    return np.minimum(1.0, p / (lam * q)), residual(p, q)


def typical(p, q, eps=0.09, eta=0.3):
    cut = np.minimum(eps, eta * np.exp(-special.entr(p).sum(-1, keepdims=True)))  # (n, 1)
    return (p > cut).astype(float), np.eye(p.shape[-1])[p.argmax(-1)]


def output_law(rule, p, q):
    """(the law of the emitted token (n, V), A per position (n,)) for one drafted position."""
    a, f = rule(p, q)
    alpha = (q * a).sum(-1, keepdims=True)
    return q * a + (1 - alpha) * f, alpha[:, 0]


rules = {
    "exact": exact,
    "lenient, λ = 0.5": lenient,
    "typical (Medusa)": typical,
    "every draft": lambda p, q: (np.ones_like(q), p),
}  # its fallback is never used
out = {name: output_law(rule, p, q) for name, rule in rules.items()}
alpha = {name: float(a.mean()) for name, (_, a) in out.items()}
gap = {name: np.array([tv(x, y) for x, y in zip(law, p)]) for name, (law, _) in out.items()}
E = {name: expected_tokens(a, GAMMA) for name, a in alpha.items()}
table(
    f"{len(p)} positions of the target's text, T = 1, γ = {GAMMA}",
    ["rule", "A (acceptance)", "tokens / pass", "vs exact", "TV from p", ""],
    [
        [
            name,
            f"{alpha[name]:.3f}",
            f"{E[name]:.2f}",
            f"{E[name] / E['exact'] - 1:+.1%}",
            f"{gap[name].mean():.4f}",
            bar(gap[name].mean(), gap["every draft"].mean(), 8),
        ]
        for name in rules
    ],
)

# %% [markdown]
# The lenient A can only be higher, Σ min(q, p/λ) ≥ Σ min(q, p), and accepting every draft
# gives A = 1 and γ + 1 tokens a pass: both by construction. So is the exact row's TV of 0:
# `exact` is the verify rule's formula, and lesson 05 proved that its law is p. (Whether
# nanospec's own verify code samples that law is a measurement: the last section runs it.)
# The rest is measured.

# %%
lib = verify_residual(jnp.asarray(p[:8], jnp.float32), jnp.asarray(q[:8], jnp.float32))
console.print(
    "by construction: the numpy residual is verify.residual's formula (largest difference on "
    f"the first 8 positions {np.abs(np.asarray(lib) - residual(p[:8], q[:8])).max():.0e}, "
    f"float32), and the exact rule's law is p at all {len(p)} positions (largest TV "
    f"{gap['exact'].max():.0e}, float64 rounding)"
)
lossy = ("lenient, λ = 0.5", "typical (Medusa)")
claim(
    all(gap[n].mean() > 0.01 for n in lossy),
    "both lossy rules move the law off p: mean TV "
    + " and ".join(f"{gap[n].mean():.3f}" for n in lossy),
)
claim(
    alpha["typical (Medusa)"] > alpha["exact"],
    f"typical acceptance accepts more than the "
    f"exact rule (A = {alpha['typical (Medusa)']:.3f} against α = {alpha['exact']:.3f})",
)
claim(
    all(E[n] / E["exact"] - 1 < 0.10 for n in lossy),
    "and what they buy is small: under 10% "
    f"more tokens per pass at γ = {GAMMA} (the exact rule already has α = "
    f"{alpha['exact']:.2f})",
)
claim(
    gap["typical (Medusa)"].mean() > gap["every draft"].mean() / 2,
    "typical "
    "acceptance gives away more than half the distance between the target and the draft "
    f"alone ({gap['typical (Medusa)'].mean():.3f} of {gap['every draft'].mean():.3f})",
)
unsure = p.max(-1) < 0.9  # (n,) the target gives its favourite less than 0.9
share = {n: gap[n][unsure].sum() / gap[n].sum() for n in lossy}
claim(
    all(x > 0.8 for x in share.values()),
    f"the {unsure.mean():.0%} of positions where the "
    "target gives its favourite token less than 0.9 hold "
    + " and ".join(f"{x:.0%}" for x in share.values())
    + " of the two rules' TV",
)
greedy_here = typical(p, q)[0].sum(-1) == 1  # (n,) only the argmax clears the bar
claim(
    greedy_here.mean() > 0.5,
    f"at {greedy_here.sum()} of {len(p)} positions only the "
    "target's argmax clears typical acceptance's bar: there it is greedy decoding, whatever "
    "the draft proposed, though at the least sure of them the target gives the other tokens "
    f"{1 - p.max(-1)[greedy_here].min():.0%} between them",
)

# %% [markdown]
# The damage is not spread evenly: where the target is sure, the two lossy rules emit almost
# what it would (most of their TV lies elsewhere, as claimed above). Where it hesitates,
# typical acceptance falls back to the argmax and makes the text greedier, and the lenient
# ratio leans it towards the draft.
#
# ## Would the statistical suite notice?
#
# At the position whose lenient-ratio TV is nearest that rule's mean, run the rule as a
# sampler 20,000 times (x ~ q, kept if u < min(1, p(x)/(λq(x))), else a residual draw), and
# test the tokens with a chi-square test at the suite's threshold, 1e-4 (tokens expected
# fewer than 5 times pooled): against the law computed above, and against p. Then the same
# test on nanospec's own rule: `verify_row` (nanospec/verify.py) as the sampler at the same
# position, 20,000 one-draft rounds with drafts x ~ q, each emitting its draft if accepted,
# else its residual draw, tested against p.

# %%
N, rng = 20_000, np.random.default_rng(20)
j = int(np.argmin(np.abs(gap["lenient, λ = 0.5"] - gap["lenient, λ = 0.5"].mean())))
a_j, f_j = lenient(p[j], q[j])
x = rng.choice(p.shape[1], N, p=q[j])
draws = np.where(rng.random(N) < a_j[x], x, rng.choice(p.shape[1], N, p=f_j))


def pvalue(draws, law):
    """Chi-square p-value; tokens expected < 5 times pooled, a pooled cell of 0 left out."""
    counts, expect = np.bincount(draws, minlength=len(law)), len(draws) * law
    big = expect >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expect[big], expect[~big].sum())
    return stats.chisquare(obs[exp > 0], exp[exp > 0]).pvalue


fits_law, fits_p = pvalue(draws, out["lenient, λ = 0.5"][0][j]), pvalue(draws, p[j])
console.print(
    f"position {j}: TV {gap['lenient, λ = 0.5'][j]:.3f}; p-value against the "
    f"computed law {fits_law:.3f}, against p {fits_p:.1e}"
)
claim(
    fits_law > 1e-4,
    "the sampled rule fits the law computed for it (false-failure probability 1e-4)",
)
claim(fits_p < 1e-4, "and against p, the law test the statistical suite runs rejects it")


@jax.jit
def verify_sampler(key, drafts, q_j, p_j):
    """nanospec's verify rule, one draft a round at one position: the token each round emits
    there (its draft if accepted, else the residual's draw)."""

    def one(key, x):  # p_j twice: the second law would be the bonus's, unused here
        v = verify_row(key, x[None], q_j[None], jnp.stack([p_j, p_j]))
        return jnp.where(v.n_accepted == 1, x, v.token)

    return jax.vmap(one)(jax.random.split(key, drafts.shape[0]), drafts)


f32 = lambda a: jnp.asarray(a, jnp.float32)
x = jnp.asarray(rng.choice(p.shape[1], N, p=q[j]), jnp.int32)
exact_fits_p = pvalue(np.asarray(verify_sampler(jax.random.key(20), x, f32(q[j]), f32(p[j]))), p[j])
claim(
    exact_fits_p > 1e-4,
    f"nanospec's verify_row, run as the sampler at position {j}, fits p there (p-value "
    f"{exact_fits_p:.3f} > 1e-4; a false failure one run in 10,000)",
)

# %% [markdown]
# ## Why nanospec ships none
#
# nanospec promises the target's law, and the statistical suite (`tests/statistical/`) checks
# that promise with law tests like the one above. A lossy rule fails them by design: it can only
# be judged by the quality of the text it writes, a judgement nanospec does not make. What it
# buys is in the table: a few percent more tokens per pass here, since the exact rule already
# accepts most drafts, and even accepting every draft adds only what the table's last row shows
# at γ = 4 (γ + 1 tokens a pass): the ceiling for any rule, lossy or not. More acceptance can be
# bought without giving up exactness: a better draft (1 − TV(p, q) is the ceiling for one draft,
# the exactness-proven lesson), or several drafts per position (the token-trees lesson). And at
# T = 0, with p one-hot and greedy drafts, the exact rule, the lenient ratio and typical
# acceptance are one: keep the draft if it is the target's argmax, else emit the argmax. They
# differ only when the user asked for the target's randomness, which is what a lossy rule
# changes.
#
# ## Leviathan's condition: α > c
#
# Leviathan, Kalman & Matias (2023), "Fast Inference from Transformers via Speculative
# Decoding", count time in target passes and assume that a pass over γ + 1 tokens takes as
# long as a pass over one. With c the time of a draft step over a target step, a round costs
# γc + 1 and emits E tokens, so the expected speedup (their Theorem 3.8) is
#
#     speedup = (1 − α^(γ+1)) / ((1 − α)(γc + 1))
#
# Their α is the exact rule's row above: Σ min(p, q) averaged over positions. Their
# corollary: if α > c, some γ speeds up — γ = 1 gives (1 + α)/(1 + c) > 1. The converse is
# one line: if α ≤ c, then 1 + α + … + α^γ ≤ 1 + γα ≤ 1 + γc for every γ, so none does.
#
# Their Theorem 3.11 counts arithmetic instead. A round runs γ draft steps, γĉ in units of
# one target token's arithmetic (ĉ: the draft's arithmetic per token over the target's),
# and scores γ + 1 tokens with the target; autoregressive decoding would spend E units on
# the same E tokens. So speculation multiplies the total arithmetic by
#
#     (γĉ + γ + 1) / E = (1 − α)(γĉ + γ + 1) / (1 − α^(γ+1))
#
# which exceeds 1 for every γ, since E ≤ γ + 1. Below, ĉ is counted from the two configs (the
# matrix products' multiply-adds), and the model's c is set to ĉ, as if time followed arithmetic;
# a step bound by reading weights would follow the models' sizes, printed beside it. Neither is
# this CPU's c (near ĉ or below it timed alone, as in the choosing-γ lesson; larger in place, as
# `nanospec bench` times it): the table is Leviathan's model, not a measurement.


# %%
def macs_per_token(cfg, context=128):
    """Multiply-adds for one token: per block 12·d² weights (q, k, v 3d², output d², MLP
    8d²) and 2·context·d for attention; d·V for the output layer."""
    d = cfg.d_model
    return cfg.n_layer * (12 * d * d + 2 * context * d) + d * cfg.vocab_size


c = macs_per_token(dcfg) / macs_per_token(cfg)
a = alpha["exact"]
speedup = lambda g, c: expected_tokens(a, g) / (g * c + 1)
more_math = lambda g: (g * c + g + 1) / expected_tokens(a, g)
sizes = count_params(dparams) / count_params(params)
console.print(
    f"multiply-adds per token at a context of 128: target {macs_per_token(cfg):,}, "
    f"draft {macs_per_token(dcfg):,}, so ĉ = {c:.4f}; parameters, draft over "
    f"target: {sizes:.4f}"
)
gammas = (1, 2, 4, 8, 16, 32)
table(
    f"Leviathan's model: α = {a:.3f} (exact rule), c set to ĉ = {c:.3f}, r = 1",
    ["γ", "tokens / pass", "speedup", "", "× arithmetic"],
    [
        [
            g,
            f"{expected_tokens(a, g):.2f}",
            f"{speedup(g, c):.2f}×",
            bar(speedup(g, c), 8, 16),
            f"{more_math(g):.2f}×",
        ]
        for g in gammas
    ],
)
best = max(range(1, 65), key=lambda g: speedup(g, c))
console.print(  # the model's arithmetic on fixed configs: printed, not claimed
    f"in Leviathan's model at α = {a:.3f} > ĉ = {c:.3f}, every γ in the table predicts a "
    f"speedup above 1; the best, γ = {best}, predicts {speedup(best, c):.2f}× for "
    f"{more_math(best):.2f}× the arithmetic (r = 1 and c = ĉ: a model, not a measurement)"
)

console.print(
    f"with a pass over γ + 1 tokens costing r(γ + 1) one-token passes (lessons/NOTATION.md), "
    f"a γ = {GAMMA} round pays while {GAMMA}c + r({GAMMA + 1}) < E(α, {GAMMA}) = "
    f"{expected_tokens(a, GAMMA):.2f}: at c = ĉ = {c:.3f}, for any r({GAMMA + 1}) below "
    f"{expected_tokens(a, GAMMA) - GAMMA * c:.2f}"
)

# %% [markdown]
# Faster on the clock while doing more arithmetic. Leviathan's model takes a pass over γ + 1
# tokens to cost what a pass over one does; the course's cost model (lessons/NOTATION.md)
# lets it cost r(γ + 1) one-token passes, and a round then pays whenever
#
#     E(α, γ) > γc + r(γ + 1)
#
# the tokens it brings outweigh what it costs, counted in target steps. The extra arithmetic may
# cost time, and how much depends on the CPU and the code. On a quiet 2-core AMD EPYC with AVX-512,
# r(8) was 1.44 to 1.54 in bench's probe before nanospec's cache fix, 2.14 to 2.20 after it and the
# wider vectors, 2.5 to 2.9 with one-token passes on both cores; on a 2-core EPYC without AVX-512
# issue 44 reported 2.3 to 2.7 before the fix (docs/results.md, "The verify pass: before and
# after"). By its factors the three changes made autoregressive decoding 1.7 to 2.3 times as fast,
# the speculative loop at most a quarter faster: speculation still paid there, less (1.5 to 1.7× at
# γ = 7 in the README's runs). So r is your machine's and build's: lesson 01 and the choosing-γ
# lesson print r(8) on yours, and it moves from run to run (2.18 to 2.61 on the first EPYC on
# 2026-12-07, mostly beside other jobs, before the one-row change), the token-trees lesson r(5), and
# `nanospec bench` ends by saying which term limits your speedup. The trade turns only where
# r(γ + 1) reaches E(α, γ) − γc (printed above for γ = 4), which a serving engine's large batch
# approaches once its spare compute runs out: the speculation-under-load lesson watches it.
#
# ## Where other methods fit
#
# **Lookahead decoding** — Fu, Bailis, Stoica & Zhang (2024), "Break the Sequential
# Dependency of LLM Inference Using Lookahead Decoding". No draft model at all: each target
# pass also runs Jacobi iterations on a window of guessed future tokens, harvests the
# n-grams they produce into a pool, and verifies pool n-grams that start with the last
# token in the same pass. It drafts by n-grams like the prompt-lookup lesson, but the
# n-grams come from the target's own parallel guesses, and it checks several candidates in
# one pass like the token-trees lesson: Leviathan's trade in its purest form, more
# arithmetic per pass for fewer passes.
#
# **Self-speculative decoding** — Zhang et al. (2024), "Draft & Verify: Lossless Large
# Language Model Acceleration via Self-Speculative Decoding": the draft is the target with
# some intermediate layers skipped (chosen once, by Bayesian optimisation), verified by the
# full target, and drafting stops early when the draft's confidence drops — still exact,
# for the reason `verify_row` gives for `n_draft`: the length is fixed before the target is
# consulted. LayerSkip (Elhoushi et al., 2024, "LayerSkip: Enabling Early Exit Inference and
# Self-Speculative Decoding") trains the model so that its first layers can exit early,
# drafts with them and verifies with the rest, reusing the first layers' work. As in the
# Medusa-heads and EAGLE lessons, the drafter lives inside the target.
#
# **Suffix decoding** — Oliaro, Jia, Campos & Qiao (2024), "SuffixDecoding: A Model-Free
# Approach to Speeding Up Large Language Model Inference". No model: suffix trees over the
# prompt and over earlier outputs find where the text's latest tokens occurred before, and
# propose a tree of the continuations seen there, ranked by how often, longer where the
# match is longer. It is the prompt-lookup lesson carried across requests, and verified as a
# token tree; it shines where outputs repeat, as in agent loops.
#
# All of them verify their drafts with the full target, as nanospec does: what differs is
# where the drafts come from and what they cost.
#
# ## What to take away
#
# A lossy rule raises A above α by moving the output off the target's law, and here it bought a few
# percent of tokens per pass for it. The exact rule's α, Σ min(p, q), is the most any exact
# scheme accepts from one draft; past it, only a better drafter or more drafts per position
# help. Leviathan et al.'s α > c says when a drafter can pay at all (in their model, where a
# wider pass costs what a one-token pass does), and their arithmetic count says what it
# costs: always more work, paid back whenever E(α, γ) > γc + r(γ + 1) — a pass over γ + 1
# tokens may cost more than one, as on this CPU, as long as the round costs less than the
# tokens it brings.
