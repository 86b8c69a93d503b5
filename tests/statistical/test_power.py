"""Layer 3 — power: the same tests, at the same threshold, reject broken samplers.

A test that cannot fail proves nothing. Each broken variant below is a real mistake people
make, injected into the real loop by replacing one small named function (so everything else —
caches, drivers, batching — is the code under test). N = 50,000, half the law tests'
100,000 (so the power shown here understates theirs: it only grows with N), and the pass
threshold is p > 1e-4, exactly as in test_joint_law.py; a broken sampler must be rejected
with p < 1e-12, eight orders of magnitude beyond the threshold ("by a wide margin"). Measured
at seed 3: the off-by-one rollback gives p = 8e-43; the other three underflow to p = 0.

One lesson is built in: dropping the bonus token does NOT change the law of the text (the next
round simply samples that token itself, one target call later). The joint-law test therefore
passes it — asserted below — and it is the first-round law (how tokens arrive per round)
that catches it.
"""

import jax
import jax.numpy as jnp
import pytest

import nanospec.drafters
import nanospec.speculative
import nanospec.verify
from nanospec.cache import rollback
from nanospec.drafters import DraftModel
from nanospec.sampling import SamplingParams, sample_rows
from tests.statistical.laws import (
    PROMPT,
    chi_square_categorical,
    chi_square_pvalue,
    encode,
    exact_law,
    first_round_law,
    run_first_round,
    run_speculative,
    tiny_pair,
)

N = 50_000
THRESHOLD = 1e-4
POWER = 1e-12
M, GAMMA = 4, 3
SP = SamplingParams.make(1.0)


def _residual_is_p(p, q):
    return p  # forgets to subtract the draft's law: over-produces what the draft proposes


def _bonus_from_wrong_position(p, gamma):
    return p[gamma - 1]  # an off-by-one: the bonus re-uses the last draft's position


def _sample_at_other_temperature(key, q):
    return sample_rows(key, jax.nn.softmax(jnp.log(q) / 0.7))  # samples at T=0.7, reports q at T=1


def _rollback_off_by_one(self, state, cache, n_accepted, emitted, max_new):
    """Speculation.commit with the target cache rolled back to `length`, not `length - 1`."""
    new, n_emit = REAL_COMMIT(self, state, cache, n_accepted, emitted, max_new)
    kept = jnp.where(~state.done, new.length, new.cache.length)  # live rows: one slot too many
    return new._replace(cache=rollback(new.cache, kept)), n_emit  # a rejected draft stays visible


def _drop_bonus(n_accepted, emitted, limit, eos_id):
    n, hit_eos = REAL_EMIT_COUNT(n_accepted, emitted, limit, eos_id)
    gamma = emitted.shape[1] - 1
    return jnp.where(n_accepted == gamma, jnp.minimum(n, gamma), n), hit_eos


REAL_EMIT_COUNT = nanospec.speculative.emit_count
REAL_COMMIT = nanospec.speculative.Speculation.commit

BROKEN = {
    "residual_replaced_by_p": (nanospec.verify, "residual", _residual_is_p),
    "bonus_from_wrong_position": (nanospec.verify, "bonus_probs", _bonus_from_wrong_position),
    "q_from_the_wrong_temperature": (
        nanospec.drafters,
        "sample_rows",
        _sample_at_other_temperature,
    ),
    "rollback_off_by_one": (nanospec.speculative.Speculation, "commit", _rollback_off_by_one),
    "bonus_dropped": (nanospec.speculative, "emit_count", _drop_bonus),
}


@pytest.fixture
def pair():
    target, draft = tiny_pair()
    return target, draft, DraftModel(draft[1], draft[0])


def _joint_pvalue(pair, n, seed):
    target, draft, drafter = pair
    out = run_speculative(target, drafter, draft[2], [PROMPT] * n, M, SP, GAMMA, seed)
    return chi_square_pvalue(encode(out[tuple(PROMPT)]), exact_law(target, PROMPT, M, SP))


@pytest.mark.optimized
def test_the_fast_layer_can_fail_too(pair, break_with):
    """N = 20,000 (the default run's smoke size) already rejects a residual taken from p."""
    break_with(*BROKEN["residual_replaced_by_p"])
    assert _joint_pvalue(pair, 20_000, seed=100) < POWER


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in BROKEN if n != "bonus_dropped"])
@pytest.mark.optimized
def test_joint_law_test_rejects_a_broken_sampler(pair, break_with, name):
    break_with(*BROKEN[name])
    pvalue = _joint_pvalue(pair, N, seed=3)
    assert pvalue < POWER, f"{name} slipped through: p-value {pvalue:.3g}"


@pytest.mark.slow
@pytest.mark.optimized
def test_dropping_the_bonus_keeps_the_law_but_the_round_law_catches_it(pair, break_with):
    break_with(*BROKEN["bonus_dropped"])
    assert _joint_pvalue(pair, N, seed=3) > THRESHOLD  # the text's law is still exact...
    target, draft, drafter = pair
    observed = run_first_round(target, drafter, draft[2], PROMPT, N, SP, GAMMA, seed=23)
    law = first_round_law(target, draft, PROMPT, GAMMA, SP)
    assert chi_square_categorical(observed, law) < POWER  # ...but rounds emit one token short
