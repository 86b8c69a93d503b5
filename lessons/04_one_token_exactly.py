# %% [markdown]
# # Lesson 04 — One token, exactly
#
# **You will see** the verify rule decide a single drafted token on a vocabulary of five,
# its output law worked out exactly from the rule's two routes (it is the target's p,
# whatever the draft's q), and 40,000 draws of the real rule agreeing with it.
#
# **It explains** `nanospec/verify.py`: `accept_reject`, `residual`, `verify_row`.
#
# The draft proposes x ~ q. The rule accepts it with probability min(1, p(x)/q(x)); if it is
# rejected, it draws a replacement from the residual norm(max(0, p − q)). A token y then comes
# out in one of two ways:
#
#     drafted and accepted:   q(y) · min(1, p(y)/q(y)) = min(q(y), p(y))
#     rejected, then drawn:   P(reject) · max(0, p(y) − q(y)) / Σ_z max(0, p(z) − q(z))
#
# P(reject) = 1 − Σ_z min(q(z), p(z)) = Σ_z max(0, p(z) − q(z)), so the second line is just
# max(0, p(y) − q(y)), and min(q, p) + max(0, p − q) = p. The output law is the target's.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from nanospec.teach import bar, claim, console, figure, table
from nanospec.verify import accept_reject, residual, verify_row

p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])  # the target's law
q = np.array([0.10, 0.45, 0.05, 0.30, 0.10])  # the draft's law: often wrong

# %% [markdown]
# ## The worked example of verify.py first
#
# p = [.6 .4], q = [.9 .1], draft x = 0: accepted with .6/.9 = 2/3. Rejected a third of the
# time, and then the residual max(0, p − q) = [0 .3] always gives token 1. So
# P(0) = .9 · 2/3 = .6 = p(0) (the residual never gives token 0 here, so a drafted 0 kept is
# its only route). Below, `accept_reject` decides x = 0 for 9,000 evenly spaced
# uniforms u (it accepts when u·q(x) < p(x)), and `residual` is asked for its law.

# %%
p2, q2 = np.array([0.6, 0.4]), np.array([0.9, 0.1])
u = (jnp.arange(9000) + 0.5) / 9000  # midpoints of 9,000 equal slices of [0, 1)
taken = float(jnp.mean(accept_reject(u, jnp.float32(p2[0]), jnp.float32(q2[0]))))
claim(
    np.isclose(taken, 2 / 3),
    f"accept_reject takes x = 0 for {taken:.4f} of the uniforms: the 2/3 of the rule",
)
console.print(f"so P(0) = .9 · {taken:.4f} = {q2[0] * taken:.2f} = p(0) (arithmetic)")
claim(
    np.allclose(np.asarray(residual(jnp.asarray(p2), jnp.asarray(q2))), [0.0, 1.0]),
    "its residual puts all its mass on token 1",
)

# %% [markdown]
# ## The law of the output token, by enumeration
#
# For every token y: the mass that arrives by acceptance, min(q, p), and the mass that arrives
# from the residual after a rejection.

# %%
accepted = np.minimum(q, p)
reject = 1 - accepted.sum()
from_residual = reject * np.asarray(residual(jnp.asarray(p), jnp.asarray(q)))
law = accepted + from_residual
table(
    "one drafted token, decided by the verify rule",
    ["token", "q", "p", "accepted: min(q, p)", "residual share", "output law", ""],
    [
        [
            y,
            f"{q[y]:.2f}",
            f"{p[y]:.2f}",
            f"{accepted[y]:.3f}",
            f"{from_residual[y]:.3f}",
            f"{law[y]:.3f}",
            bar(law[y], 0.4, 10),
        ]
        for y in range(5)
    ],
)
console.print(  # the algebra above on fixed numbers (only `residual` is verify.py's): a fact
    f"the output law equals p (largest difference {np.max(np.abs(law - p)):.0e}: float32 "
    "rounding in `residual`)"
)


def stacked(ax):  # for a slide: the two routes by which each token comes out, stacked up to p
    ax.bar(range(5), accepted, label="drafted and accepted: min(q, p)")
    ax.bar(range(5), from_residual, bottom=accepted, label="rejected, then the residual")
    ax.scatter(range(5), q, marker="_", s=400, color="k", label="the draft's q")
    ax.set(xlabel="token", ylabel="probability", title="Output law of one verified token = p")
    ax.legend()


figure("04_output_law", stacked)

# %% [markdown]
# ## Now the real rule, 40,000 times
#
# `verify_row` with γ = 1: draw x from q, decide it, and keep the token that comes out (x if
# accepted, else the residual's draw). Sampled counts almost never match N·p exactly, so how
# far off is too far? The *chi-square goodness-of-fit test* answers that. It sums
# (observed − expected)² / expected over the 5 tokens. If the rule is exact, that sum
# follows a known law approximately for large N: the chi-square law with 5 − 1 = 4 degrees
# of freedom. The test's p-value is the chance that an exact rule gives a sum at least this
# large. We fail the claim only below 1e-4, so an exact rule fails it for about one seed in
# 10,000: the claim's false-failure probability. A wrong rule shifts the expected counts, and
# the sum grows with N.
# Lesson 16 measures how large N must be to catch a given mistake.

# %%
N = 40_000
P, Q = jnp.asarray(p, jnp.float32), jnp.asarray(q, jnp.float32)


def one_round(key):
    k_draft, k_verify = jax.random.split(key)
    x = jax.random.choice(k_draft, 5, p=Q)
    v = verify_row(k_verify, x[None], Q[None], jnp.stack([P, P]))
    return jnp.where(v.n_accepted == 1, x, v.token), v.n_accepted


out, n_acc = jax.jit(jax.vmap(one_round))(jax.random.split(jax.random.key(4), N))
counts = np.bincount(np.asarray(out), minlength=5)
pvalue = stats.chisquare(counts, N * p).pvalue
table(
    f"{N:,} draws",
    ["token", "expected", "observed"],
    [[y, f"{N * p[y]:.0f}", counts[y]] for y in range(5)],
)
console.print(
    f"acceptance rate {float(np.mean(n_acc)):.3f} (expected: Σ min(q, p) = {accepted.sum():.3f})"
)
claim(pvalue > 1e-4, f"the sampled tokens fit p (chi-square p-value {pvalue:.3f} > 1e-4)")
claim(
    abs(float(np.mean(n_acc)) - accepted.sum()) < 4 * np.sqrt(0.25 / N),
    "the acceptance rate is Σ min(q, p), within 4 standard errors (false-failure probability 6e-5)",
)

# %% [markdown]
# ## What to take away
#
# The draft only decides how often we are *lucky* (the acceptance rate, Σ min(q, p) = 0.55
# here); the residual repairs every unlucky case so that the output is distributed exactly as
# p. Lesson 06 breaks the rule in four tempting ways and measures the damage.
