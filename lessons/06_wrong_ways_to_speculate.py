# %% [markdown]
# # Lesson 06 — Wrong ways to speculate
#
# **You will see** four tempting simplifications of the verify rule, each one's output law
# computed exactly, and how far it drifts from the target's law p (TV, the total variation
# distance of lesson 05). Then the real rule and one broken rule are sampled and put through
# the same chi-square test.
#
# **It explains** why `nanospec/verify.py` is written exactly as it is, and what
# `tests/statistical/test_power.py` checks: that the law tests catch such mistakes injected
# into the real loop — two of these four among them (a residual replaced by p, and a draft
# sampled at one temperature but reported at another), beside others of rollback and bonus.
#
# One drafted token, as in lesson 04. The draft *samples* x from its law q and *reports* a law
# q′ to the rule, which should be q itself. The rule accepts x with probability a(x) (the
# verify rule's is min(1, p(x)/q′(x))) and, after a rejection, draws from a resampling law.
# Whatever q′ is, x was drawn from q, so
#
#     P(y) = q(y)·a(y) + [Σ_z q(z)·(1 − a(z))] · resample(y)
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from nanospec.teach import bar, claim, console, table, tv
from nanospec.verify import residual, verify_row

p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])  # the target's law
q = np.array([0.10, 0.45, 0.05, 0.30, 0.10])  # the draft's law at T = 1
logq = np.log(q)
q_rep = np.exp(2 * logq) / np.exp(2 * logq).sum()  # q′: the same draft's law at T = 0.5


def output_law(q, accept, resample):
    """The law of the token a one-draft round emits: drafted from q, accepted with `accept`
    (a vector over tokens), else drawn from `resample`."""
    return q * accept + (q * (1 - accept)).sum() * resample


res = lambda p, q_rep: np.asarray(residual(jnp.asarray(p), jnp.asarray(q_rep)))  # verify.py's
ways = {
    "verify rule": output_law(q, np.minimum(1, p / q), res(p, q)),
    "accept iff p ≥ q": output_law(q, (p >= q).astype(float), res(p, q)),
    "resample from p": output_law(q, np.minimum(1, p / q), p),
    "q at wrong T": output_law(q, np.minimum(1, p / q_rep), res(p, q_rep)),  # q′ reported
    # emits a token only when the draft is accepted: given that one came out, its law is
    # min(p, q) renormalised
    "no resampling": np.minimum(p, q) / np.minimum(p, q).sum(),
}

# %%
table(
    "the law of the emitted token, and its distance from p (TV)",
    ["rule", *[f"P({y})" for y in range(5)], "TV", ""],
    [
        [name, *(f"{x:.3f}" for x in law), f"{tv(law, p):.3f}", bar(tv(law, p), 0.4, 8)]
        for name, law in ways.items()
    ],
)
console.print(f"the target p: {'  '.join(f'{x:.3f}' for x in p)}")

# %% [markdown]
# ## Why each one is wrong
#
# - **accept iff p ≥ q** (accept when p(x) ≥ q(x), else reject) turns a probability
#   min(1, p/q) into a coin that always lands the same way: tokens the draft over-proposes
#   (q > p) are never accepted, though p(y) of them should come out, and the residual
#   max(0, p − q) is zero on exactly those tokens, so it cannot make up for it.
# - **resample from p** ignores what acceptance already delivered: acceptance gives each
#   token min(q, p), so after a rejection only the shortfall max(0, p − q) may be drawn.
#   Drawing from p instead gives every token another share of p: too much of what the draft
#   over-proposes (token 1: .250 → .362) and too little of the rest.
# - **q at the wrong temperature**: exactness needs the law in the ratio to be q, the law x
#   was drawn from. A draft sampled at T = 1 that reports q′, its law at T = 0.5, says it is
#   surer than it was where it is sure (token 1: q′ = .64 for the q = .45 it drew with), so
#   p/q′ there is smaller than p/q and the draft is *under*-trusted: token 1 is accepted less
#   often and comes out less often than p says. Where it is unsure, q′ is below q and the
#   draft is over-trusted: token 4 (q′ = .032 for q = .10) is now always accepted, and comes
#   out more than twice as often as p says. The residual, built from q′ too, fills in what q′
#   says acceptance left missing, not what it did.
# - **no resampling** (accept, or emit nothing) makes the round emit nothing on a rejection:
#   what does come out is biased towards what both models like.

# %%
a_right, a_wrong = np.minimum(1, p / q), np.minimum(1, p / q_rep)
wrong_t = ways["q at wrong T"]
table(
    "q′ reported instead of q, token by token (a: the chance of acceptance)",
    ["y", "p(y)", "q (drawn)", "q′ (reported)", "a with q", "a with q′", "P(y) with q′"],
    [
        [
            y,
            f"{p[y]:.2f}",
            f"{q[y]:.2f}",
            f"{q_rep[y]:.3f}",
            f"{a_right[y]:.3f}",
            f"{a_wrong[y]:.3f}",
            f"{wrong_t[y]:.3f}",
        ]
        for y in range(5)
    ],
)
console.print(  # arithmetic on the fixed p and q above: a fact, not a finding
    f"q′ reported at T = 0.5: the sure token 1 is accepted less ({a_right[1]:.3f} → "
    f"{a_wrong[1]:.3f}) and comes out less ({p[1]:.3f} → {wrong_t[1]:.3f}); the unsure "
    f"token 4 comes out more ({p[4]:.3f} → {wrong_t[4]:.3f})"
)

# %%
exact = ways.pop("verify rule")  # its residual is verify.py's: this could come out otherwise
claim(
    tv(exact, p) < 1e-6,
    "with acceptance min(1, p/q), verify.py's residual makes the output law p (exactly, up "
    "to float32 rounding)",
)
console.print(  # the four wrong laws are the formulas above on fixed numbers: facts
    "off by TV: " + ", ".join(f"{name!r} {tv(law, p):.3f}" for name, law in ways.items())
)

# %% [markdown]
# ## Would a test notice?
#
# Sample 20,000 rounds of the real rule and of "resample from p" (the real rule with its
# residual swapped for p), and test each against p with a chi-square goodness-of-fit test at
# threshold 1e-4: an exact rule fails it for one seed in 10,000 (the seed is fixed here); this
# broken one, with the TV of the table above, fails it essentially always (its expected
# chi-square statistic is in the thousands).

# %%
N = 20_000
P, Q = jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32)


def sample(broken: bool):
    def one(key):
        k1, k2, k3 = jax.random.split(key, 3)
        x = jax.random.choice(k1, 5, p=Q)
        v = verify_row(k2, x[None], Q[None], jnp.stack([P, P]))
        fallback = jax.random.choice(k3, 5, p=P) if broken else v.token
        return jnp.where(v.n_accepted == 1, x, fallback)

    out = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(5), N))
    return stats.chisquare(np.bincount(np.asarray(out), minlength=5), N * p).pvalue


good, bad = sample(False), sample(True)
console.print(f"chi-square p-values: the verify rule {good:.3f}, resample-from-p {bad:.1e}")
claim(good > 1e-4, "the real rule passes the test")
claim(bad < 1e-4, "the broken rule fails it")
