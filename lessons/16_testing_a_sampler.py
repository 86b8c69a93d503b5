# %% [markdown]
# # Lesson 16 — How to test a sampler
#
# **You will see** a chi-square test run 1,000 times on the verify rule and on four broken
# versions of it: how often it wrongly rejects the right one (its false-failure rate, which
# we choose) and how often it catches each wrong one (its power, which we must measure); then
# how the power against a subtle bug grows with N, and the N it takes to catch that bug.
#
# **It explains** `tests/statistical/` — the suite that shows speculation is exact, in the five
# layers of docs/design.md §5 — and how to choose an N and a threshold for a test of your own.
#
# A sampler cannot be tested like a function: two correct runs give different outputs. So we
# test its *law*, and every such test fails a correct sampler now and then (its false-failure
# probability, δ, set by the threshold) and misses a broken one now and then (1 − its power,
# set by N, by δ and by how broken the sampler is). nanospec's suite states both for every
# layer:
#
# 1. **Identity** (`test_verify_identity.py`, `test_tree_identity.py`): no sampling — the law
#    implied by the rule's own acceptance probabilities and residual equals p to 1e-9, for 300
#    random (p, q) pairs (150 for tree siblings). False failures: none. (`test_tree_identity.py`
#    also samples the jitted tree walk on synthetic laws: N = 200,000 rows a test, p-value
#    above 1e-6, and two broken walks rejected below 1e-12.)
# 2. **Joint law** (`test_joint_law.py`, `test_drafters_law.py`, `test_tree_law.py`,
#    `test_ssd.py`): tiny V = 5 models, so all 625 four-token continuations can be enumerated;
#    N = 100,000 runs of the real loop (SSD's: 50,000; each file also has a 20,000-row smoke
#    test, which runs without the slow tests) must fit with a chi-square p-value above 1e-4:
#    one false failure in 10,000 runs per test.
# 3. **Power** (`test_power.py` at N = 50,000; the drafter and tree files at 20,000, SSD's at
#    10,000): the same test must reject broken samplers with p-values below 1e-12 — eight
#    orders of magnitude past the threshold, not by luck. One break keeps the text's law
#    (dropping the bonus token: the next round samples it instead); only the law of a single
#    round catches it.
# 4. **Greedy identity** (`test_greedy_identity.py`): at T = 0, speculative text equals
#    autoregressive text token for token on the shipped models; near-ties are reported. No
#    randomness, no false failures.
# 5. **Two-sample** (`test_two_sample.py`): shipped models, 4,000 two-token continuations
#    with and 4,000 without speculation, a homogeneity test at 1e-4 (one false failure in
#    10,000 per drafter); the draft model's own samples must be rejected with a p-value below 1e-12.
#
# This lesson does layers 2 and 3 on one drafted token — lesson 04's p and q — where a test
# costs milliseconds, so we can repeat it a thousand times and *count* its errors.
#
# Notation: lessons/NOTATION.md (one meaning per symbol, course-wide).

# %%
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, stats

from nanospec.sampling import SamplingParams, sample, sampling_probs
from nanospec.teach import bar, claim, console, figure, table
from nanospec.verify import residual, verify

p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])  # the target's law (lessons 04 and 06)
q = np.array([0.10, 0.45, 0.05, 0.30, 0.10])  # the draft's law
V, TRIALS, N = 5, 1_000, 1_000


def at_temperature(law, temperature):
    """The same draft at temperature T: sampling_probs(log q, T) = norm(q^(1/T))."""
    return np.asarray(
        sampling_probs(jnp.log(jnp.asarray(law)), SamplingParams.make(temperature)), float
    )


# %% [markdown]
# ## A correct sampler and four broken ones
#
# One round of γ = 1: draw x from q, let `verify` judge it against p — but tell it the draft's
# law is q′ (`told` in the code; q′ = q is the right rule) — and on a rejection keep the rule's
# residual draw or, broken, draw from a `resample` law of our own. Two of the breaks are lesson
# 06's (resampling from p, q reported at T = 0.5); one is new — after a rejection, remove x from
# p and resample, which is the right residual for a *point-mass* draft (prompt lookup) and wrong
# for a sampled one; and one is lesson 06's temperature mistake made small: q reported at
# T = 0.9.


# %%
@partial(jax.jit, static_argnums=0)
def rounds(n, key, p, q, told, resample, own_residual):
    """n independent rounds -> the (n,) tokens they emit. p, q, told: (V,); resample (V, V):
    row x is the law drawn from after rejecting x, used unless `own_residual`.

    subtle: p and q are arguments, not globals: as constants, XLA would try to precompute
    every (n, V) broadcast of them while compiling (about a minute, for n = 2^20)."""
    k_draft, k_verify, k_broken = jax.random.split(key, 3)
    x = sample(k_draft, jnp.broadcast_to(q, (n, V)))  # (n,)
    v = verify(
        k_verify, x[:, None], jnp.broadcast_to(told, (n, 1, V)), jnp.broadcast_to(p, (n, 2, V))
    )
    return jnp.where(
        v.n_accepted == 1, x, jnp.where(own_residual, v.token, sample(k_broken, resample[x]))
    )


remove_x = (1 - np.eye(V)) * p / (1 - p[:, None])  # row x: p with x removed, renormalised
SAMPLERS = {  # name: (the law the rule is told, the law a rejected x is replaced from)
    "the verify rule": (q, None),
    "resample from p (06)": (q, np.tile(p, (V, 1))),
    "q′: q at T = 0.5 (06)": (at_temperature(q, 0.5), None),
    "point-mass residual": (q, remove_x),
    "q′: q at T = 0.9": (at_temperature(q, 0.9), None),
}


def draws(name, seed, trials, n):
    """`trials` independent samples of n tokens: (trials, n), in batches of about 2^20."""
    told, resample = SAMPLERS[name]
    block = -(-trials // -(-trials * n // 2**20))  # trials per batch, batches of equal size
    out = []
    for i in range(0, trials, block):
        broken = np.tile(p, (V, 1)) if resample is None else resample  # unused if None
        laws = [jnp.asarray(x, jnp.float32) for x in (p, q, told, broken)]
        tokens = rounds(block * n, jax.random.key(seed + i), *laws, resample is None)
        out.append(np.asarray(tokens).reshape(block, n))
    return np.concatenate(out)[:trials]


def exact_law(name):
    """By enumeration: x is accepted with min(1, p(x)/told(x)), else replaced."""
    told, resample = SAMPLERS[name]
    accept = np.minimum(1, p / told)
    rejected = q * (1 - accept)  # (V,) P(x drafted and then rejected)
    if resample is None:  # the rule's own residual
        return q * accept + rejected.sum() * np.asarray(residual(p, told))
    return q * accept + rejected @ resample


# %% [markdown]
# ## The test, and how often it rejects
#
# Count the N tokens of one sample and compute Pearson's statistic Σ (count − N·p)² / (N·p).
# If the sampler is right it follows (very nearly, at this N) a chi-square law with V − 1 = 4
# degrees of freedom, so the p-value is uniform on [0, 1] and "reject if p-value < δ" fails a
# correct sampler with probability δ. If the sampler's law is π ≠ p, the statistic follows a
# *noncentral* chi-square (approximately) with λ = N · Σ (π − p)² / p, and the power is the
# chance that it lands past the cut-off.


# %%
def pvalues(tokens, n=None):
    """The chi-square p-value of each row's first n tokens (default all) against p."""
    tokens = tokens[:, :n]
    rows, n = tokens.shape
    counts = np.bincount((np.arange(rows)[:, None] * V + tokens).ravel(), minlength=rows * V)
    counts = counts.reshape(rows, V)
    return stats.chi2.sf(((counts - n * p) ** 2 / (n * p)).sum(1), V - 1)


def predicted_power(law, n, delta):
    lam = n * ((law - p) ** 2 / p).sum()
    return float(stats.ncx2.sf(stats.chi2.isf(delta, V - 1), V - 1, lam)) if lam > 0 else delta


pv = {name: pvalues(draws(name, 100 * i, TRIALS, N)) for i, name in enumerate(SAMPLERS)}
first = pv["the verify rule"][0]
claim(
    first > 1e-4,
    f"one test of the verify rule at N = {N:,} passes: p-value {first:.3f} > 1e-4 "
    "(a false failure one run in 10,000)",
)
DELTA, result = 0.01, {}  # name: (TV from p, predicted power, measured power) at δ = 0.01
for name in SAMPLERS:
    law = exact_law(name)
    result[name] = (
        0.5 * np.abs(law - p).sum(),
        predicted_power(law, N, DELTA),
        float(np.mean(pv[name] < DELTA)),
    )
table(
    f"{TRIALS:,} tests at N = {N:,}, rejected when p-value < {DELTA}",
    ["sampler", "TV from p", "predicted", "rejected", ""],
    [
        [name, f"{tv:.3f}", f"{pred:.3f}", f"{power:.3f}", bar(power, 1, 12)]
        for name, (tv, pred, power) in result.items()
    ],
)

# %% [markdown]
# The right sampler is rejected about δ of the time — the false-failure rate we chose, not a
# defect — and each gross bug in (nearly) every test. The subtle one (TV 0.015) is caught in
# only a few tests in a hundred: at this N the test can hardly see it.
#
# The claims: the right sampler's number of rejections, at δ = 0.05 and at 0.01, lies in the
# range a binomial(1,000, δ) count falls outside with probability at most 1e-4 (so the two
# claims fail wrongly with probability ≤ 2e-4); every measured power lies within 4 standard
# errors, plus 0.03 for the noncentral approximation, of the predicted one; and a bug predicted
# to be caught always is caught in at least 99% of the tests.

# %%
right = pv["the verify rule"]
for delta in (0.05, 0.01):
    low, high = stats.binom.ppf(5e-5, TRIALS, delta), stats.binom.isf(5e-5, TRIALS, delta)
    count = int(np.sum(right < delta))
    claim(
        low <= count <= high,
        f"at δ = {delta} the right sampler was rejected {count} times "
        f"in {TRIALS:,}: expected {TRIALS * delta:.0f}, within [{low:.0f}, {high:.0f}]",
    )
for name, (tv, pred, power) in list(result.items())[1:]:
    claim(
        abs(power - pred) <= 4 * np.sqrt(pred * (1 - pred) / TRIALS) + 0.03
        and (pred < 0.9999 or power >= 0.99),
        f"{name}: power {power:.3f} (predicted {pred:.3f})",
    )


def draw_pvalues(ax):
    # Only these two: the gross bugs' p-values all fall in the first bin (power 1.000 above).
    for name in ("the verify rule", "q′: q at T = 0.9"):
        ax.hist(pv[name], bins=20, range=(0, 1), histtype="step", linewidth=2, label=name)
    ax.axhline(TRIALS / 20, color="grey", linestyle=":", label="a uniform p-value")
    ax.set_xlabel("p-value")
    ax.set_ylabel(f"tests (of {TRIALS:,})")
    ax.legend()


figure("16_pvalues", draw_pvalues)
low = {k: int(np.sum(pv[k] < 0.05)) for k in ("the verify rule", "q′: q at T = 0.9")}
expect = TRIALS * 0.05, TRIALS * predicted_power(exact_law("q′: q at T = 0.9"), N, 0.05)
console.print(
    f"p-values below 0.05 in {TRIALS:,} tests: "
    + ", ".join(f"{k!r} {c} (expected {e:.0f})" for (k, c), e in zip(low.items(), expect))
)

# %% [markdown]
# ## Power grows with N
#
# The same 4 degrees of freedom and λ = N·Σ (π − p)²/p: double N and λ doubles. For the
# subtle bug we draw 100 samples of 32,000 tokens and test the first N tokens of each at the
# suite's own threshold, δ = 1e-4 (each N's measured power has standard error at most 0.05).

# %%
SUBTLE, CURVE = "q′: q at T = 0.9", 100
subtle = exact_law(SUBTLE)
NS = [1_000 * 2**i for i in range(6)]
long = draws(SUBTLE, 7_000, CURVE, NS[-1])
curve = {n: float(np.mean(pvalues(long, n) < 1e-4)) for n in NS}
table(
    f"{SUBTLE!r}: power at δ = 1e-4",
    ["N", "predicted", "measured", ""],
    [
        [
            f"{n:,}",
            f"{predicted_power(subtle, n, 1e-4):.3f}",
            f"{curve[n]:.2f}",
            bar(curve[n], 1, 20),
        ]
        for n in NS
    ],
)


def draw_curve(ax):
    grid = np.geomspace(NS[0], NS[-1], 50)
    ax.plot(grid, [predicted_power(subtle, n, 1e-4) for n in grid], label="predicted")
    ax.plot(NS, [curve[n] for n in NS], "o", label=f"measured ({CURVE} samples each)")
    ax.set_xscale("log")
    ax.set_xlabel("N")
    ax.set_ylabel("power at δ = 1e-4")
    ax.legend()


figure("16_power_curve", draw_curve)

# %% [markdown]
# ## How many draws does it take?
#
# Solve predicted_power(N) = target for N. The suite asks for more than "reject at 1e-4": a
# broken sampler must reach a p-value below 1e-12 (test_power.py), which costs more N again.


# %%
def needed(law, delta, target):
    return int(np.ceil(optimize.brentq(lambda n: predicted_power(law, n, delta) - target, 1, 1e9)))


plans = [(0.01, 0.9), (1e-4, 0.99), (1e-12, 0.99)]
table(
    "catching the subtle bug",
    ["threshold δ", "power", "N needed"],
    [[f"{d:g}", f"{goal}", f"{needed(subtle, d, goal):,}"] for d, goal in plans],
)
n99 = needed(subtle, 1e-4, 0.99)
measured = float(np.mean(pvalues(long, n99) < 1e-4))
unlucky = stats.binom.cdf(0.9 * CURVE - 1, CURVE, 0.99)  # P(caught < 90 times | power 0.99)
claim(
    measured >= 0.9,
    f"at N = {n99:,} the test caught it in {measured:.0%} of {CURVE} samples "
    f"(planned: 99%; below 90% would happen with probability {unlucky:.0e})",
)
claim(
    curve[NS[0]] < 0.2 and curve[NS[-1]] > 0.9,
    f"power grew from {curve[NS[0]]:.2f} at N = {NS[0]:,} to {curve[NS[-1]]:.2f} at N = {NS[-1]:,}",
)
for n in (20_000, 100_000):  # lesson 06's N, and the suite's N spent on this one-token test
    console.print(
        f"predicted power against {SUBTLE!r} at N = {n:,}, δ = 1e-4: "
        f"{predicted_power(subtle, n, 1e-4):.3f}"
    )

# %% [markdown]
# ## What to take away
#
# Choose the threshold for the false failures you can live with (the suite: 1e-4 a test), then
# choose N for the smallest bug you must catch — and *measure* that the test catches it, as
# layer 3 does. Look at the first table: a test that passes a correct sampler is worth nothing
# until you have seen it fail a broken one. The last lines printed give this one-token test's
# power against the subtle bug at lesson 06's N and at the suite's 100,000: a test is only as
# sharp as its N. (The suite's own tests are mostly four-token joint laws on tiny models; their
# power against their own breaks is what test_power.py and the power tests in the other law
# files (drafters, trees, SSD, adaptive γ, min-tokens) measure.) With `--figures`,
# runs/lessons/16_pvalues.svg shows the right sampler's p-values spread evenly and the subtle
# bug's leaning towards 0 (about 3× as many below 0.05 as the right sampler's, as predicted; the
# line printed after the power claims gives this run's counts and the expected ones) — but
# mostly not below the first table's δ = 0.01 (its "rejected" column).
