"""Layers 2 and 3 for adaptive speculation (serving/adaptive.py): γ changing every step, plain
steps in between, and the draft cache rebuilt on resume leave the law exact.

Same machinery as test_joint_law.py (tiny V = 5 transformers, the exact 4-token law by
enumeration, the rows of its batches as independent runs, Pearson chi-square with cells of
expected count < 5 pooled). The rows here are the serving engine's: each has its own key,
round counter and sampling settings (sampling.row_keys, sampling.sampling_probs per row), and
they all take the step's γ from a fixed schedule that mixes γ = 3, 2, 1 and plain steps
(γ = 0, `plain_round`), two plain steps in a row included, so the draft model resumes from a
cache rebuilt by `steps.redraft`.

Law tests: N = 20,000 per cell, threshold p-value > 1e-4, false-failure probability 1e-4 per
test (2 cells; fixed seeds keep CI deterministic): T = 1, and T = 0.7 with top-k 3 and top-p
0.9 (the cut branch of the per-row law).
Power test: the same N must reject, with p < 1e-12, a plain step that draws from the raw
softmax instead of the law the settings give (T = 0.7, top-k 3, top-p 0.9): one wrong
sampler on one kind of step, which the drafted rounds around it do not hide.
"""

import jax
import pytest

from nanospec.sampling import SamplingParams
from nanospec.serving import adaptive
from tests.statistical.laws import (
    PROMPT,
    chi_square_pvalue,
    encode,
    exact_law,
    run_engine_rows,
    tiny_pair,
)

N = 20_000
THRESHOLD = 1e-4
POWER = 1e-12
M, GAMMA = 4, 3
SCHEDULE = (0, 3, 0, 0, 2, 1, 3, 0)  # the γ of step 1, 2, ...; repeated
CELLS = {"T1": (1.0, 0, 1.0), "T0.7-topk3-topp0.9": (0.7, 3, 0.9)}


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def pvalue(pair, setting, n, seed) -> float:
    seqs = run_engine_rows(pair, SamplingParams.make(*setting), n, M, GAMMA, SCHEDULE, seed)
    assert {len(s) for s in seqs} == {M}
    return chi_square_pvalue(
        encode(seqs), exact_law(pair[0], PROMPT, M, SamplingParams.make(*setting))
    )


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.optimized
def test_adaptive_gamma_keeps_the_law(pair, cell):
    p = pvalue(pair, CELLS[cell], N, seed=11)
    assert p > THRESHOLD, f"{cell}: p-value {p:.3g}"


@pytest.mark.optimized
def test_power_a_plain_step_that_forgets_the_sampling_settings_is_caught(pair, break_with):
    break_with(
        adaptive, "sampling_probs", lambda logits, sp, made=None: jax.nn.softmax(logits, axis=-1)
    )
    p = pvalue(pair, CELLS["T0.7-topk3-topp0.9"], N, seed=11)
    assert p < POWER, f"p-value {p:.3g}: the broken plain step was not caught"
