# %% [markdown]
# # Lesson 06 — Wrong ways to speculate
#
# **You will see** four tempting simplifications of the verify rule, each one's output law
# computed exactly, and how far it drifts from the target's law p (total-variation distance).
# Then the real rule and one broken rule are sampled and put through the same chi-square test.
#
# **It explains** why `nanospec/verify.py` is written exactly as it is, and what
# `tests/statistical/test_power.py` checks: that the law tests catch such mistakes injected
# into the real loop — two of these four among them (a residual replaced by p, and a draft
# sampled at one temperature but reported at another), beside others of rollback and bonus.
#
# One drafted token, as in lesson 04. The draft *samples* x from a law s and *reports* a law r
# to the rule (they should be the same q). The rule accepts x with probability a(x) and, after
# a rejection, draws from a resampling law. Then
#
#     P(y) = s(y)·a(y) + [Σ_z s(z)·(1 − a(z))] · resample(y)

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
q_cold = np.exp(2 * logq) / np.exp(2 * logq).sum()  # the same draft at T = 0.5


def output_law(s, accept, resample):
    """The law of the token a one-draft round emits: drafted from s, accepted with `accept`
    (a vector over tokens), else drawn from `resample`."""
    return s * accept + (s * (1 - accept)).sum() * resample


res = lambda p, r: np.asarray(residual(jnp.asarray(p), jnp.asarray(r)))
ways = {
    "verify rule": output_law(q, np.minimum(1, p / q), res(p, q)),
    "accept iff p ≥ q": output_law(q, (p >= q).astype(float), res(p, q)),
    "resample from p": output_law(q, np.minimum(1, p / q), p),
    "q at wrong T": output_law(q, np.minimum(1, p / q_cold), res(p, q_cold)),
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
# - **q at the wrong temperature**: exactness needs the q in the ratio to be the law x was drawn
#   from. A draft sampled at T = 1 but reported at T = 0.5 says it is surer than it was where it
#   is sure (token 1: it reports .64 for the .45 it drew with), so p/q there is smaller and the
#   draft is *under*-trusted: token 1 is accepted less often and comes out less often than p
#   says. Where it is unsure it reports less than it drew with, and is over-trusted: token 4 is
#   now always accepted, and comes out more than twice as often as p says.
# - **no resampling** (accept, or emit nothing) makes the round emit nothing on a rejection:
#   what does come out is biased towards what both models like.

# %%
a_right, a_wrong = np.minimum(1, p / q), np.minimum(1, p / q_cold)
wrong_t = ways["q at wrong T"]
table(
    "q at the wrong T, token by token (a: the chance of acceptance)",
    ["y", "p(y)", "q drawn", "q reported", "a right", "a wrong", "P(y) wrong"],
    [
        [
            y,
            f"{p[y]:.2f}",
            f"{q[y]:.2f}",
            f"{q_cold[y]:.3f}",
            f"{a_right[y]:.3f}",
            f"{a_wrong[y]:.3f}",
            f"{wrong_t[y]:.3f}",
        ]
        for y in range(5)
    ],
)
claim(
    a_wrong[1] < a_right[1] and wrong_t[1] < p[1] and wrong_t[4] > p[4],
    f"reported at T = 0.5, the sure token 1 is accepted less ({a_right[1]:.3f} → "
    f"{a_wrong[1]:.3f}) and comes out less ({p[1]:.3f} → {wrong_t[1]:.3f}); the unsure "
    f"token 4 comes out more ({p[4]:.3f} → {wrong_t[4]:.3f})",
)

# %%
exact = ways.pop("verify rule")
claim(tv(exact, p) < 1e-6, "the verify rule's law is p (exactly, up to float32 rounding)")
for name, law in ways.items():
    claim(tv(law, p) > 0.03, f"{name!r} is off by TV {tv(law, p):.3f}")

# %% [markdown]
# ## Would a test notice?
#
# Sample 20,000 rounds of the real rule and of "resample from p" (the real rule with its
# residual swapped for p), and test each against p with a chi-square goodness-of-fit test at
# threshold 1e-4: an exact rule fails it one run in 10,000; this broken one, with the TV of
# the table above, fails it essentially always (its expected chi-square statistic is in the
# thousands).

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
