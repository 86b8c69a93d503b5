"""SSD's two-device driver (ssd/devices.py) and its timeline model (measure/ssd_timeline.py).

The driver is a different schedule of the same computation, so it must emit exactly the
tokens of the fused loop with the same key — on two devices (a separate process: JAX's
device count is fixed when it starts) and with both sides on one device — and count the same
cache hits. The timeline model is checked by hand and its probes on the tiny models."""

import doctest
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import nanospec.measure.ssd_timeline as timeline
from nanospec.drafters import DraftModel
from nanospec.generate import pad_prompts
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams
from nanospec.ssd.devices import Timed, run_two_devices
from nanospec.ssd.loop import SSDSpeculator
from tests.conftest import REPO
from tests.statistical.laws import PROMPT, PROMPT_B, tiny_pair

CASES = [(0.0, "neural", (2, 1, 1, 1), 1.0), (1.0, "fast", (1, 2, 1, 1), 0.6)]


def agreement(devices, cases=CASES) -> list[tuple[bool, int, int]]:
    """For each (T, backup, fan-out, C): (same tokens as the fused loop, its cache hits, the
    driver's)."""
    (cfg, g, p), draft = tiny_pair()
    tokens, lengths = pad_prompts([PROMPT if i % 2 else PROMPT_B for i in range(16)], cfg.n_ctx)
    out = []
    for t, backup, fanout, c in cases:
        loop = SSDSpeculator(
            graphdef=g,
            cfg=cfg,
            drafter=DraftModel(draft[1], draft[0]),
            gamma=3,
            eos_id=-1,
            fanout=fanout,
            saguaro_c=c,
            backup=backup,
        )
        sp, key = SamplingParams.make(t), jax.random.key(4)
        state, stats = loop.run(p, draft[2], tokens, lengths, key, sp, 10)
        s2, st2 = run_two_devices(loop, p, draft[2], tokens, lengths, key, sp, 10, devices)
        out.append(
            (
                generated(state, lengths) == generated(s2, lengths),
                stats.cached_rounds(),
                st2.cached_rounds(),
            )
        )
    return out


def test_on_two_devices_the_driver_emits_the_fused_loops_tokens():
    script = textwrap.dedent("""
        import jax
        from tests.test_ssd_devices import agreement
        assert len(jax.devices()) == 2, jax.devices()
        print(agreement(jax.devices()[:2]))
    """)
    env = {
        **os.environ,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for same, hits, driver_hits in eval(done.stdout.strip().splitlines()[-1]):
        assert same and hits == driver_hits > 0


def test_on_one_device_the_timed_driver_is_the_sequential_algorithm():
    """Both sides on one device, each program waited for: the fused loop's tokens and hits,
    and a clock reading for every round."""
    (cfg, g, p), draft = tiny_pair()
    tokens, lengths = pad_prompts([PROMPT], cfg.n_ctx)
    loop = SSDSpeculator(
        graphdef=g,
        cfg=cfg,
        drafter=DraftModel(draft[1], draft[0]),
        gamma=3,
        eos_id=-1,
        fanout=(2, 2, 2, 2),
    )
    device, sp, key = jax.devices()[0], SamplingParams.make(1.0), jax.random.key(0)
    fused, fused_stats = loop.run(p, draft[2], tokens, lengths, key, sp, 12)
    state, stats, clock = run_two_devices(
        loop, p, draft[2], tokens, lengths, key, sp, 12, (device, device), timed=True
    )
    assert generated(state, lengths) == generated(fused, lengths)
    assert stats.cached_rounds() == fused_stats.cached_rounds() > 0
    rounds = int(np.sum(stats.hist))
    assert all(len(x) == rounds for x in clock)
    assert sum(clock.tokens) == int(state.n_new[0]) == 12
    assert not clock.all_hit[0] and sum(clock.all_hit) == stats.cached_rounds()
    assert min(clock.verify_s + clock.build_s) > 0


def test_the_timeline_model_by_hand():
    assert doctest.testmod(timeline).failed == 0
    # Half the rounds hit: a miss pays the backup (2) before the verify, a hit the lookup (0).
    c = dict(T_v=4.0, T_c=3.0, T_h=0.0, T_b=2.0, T_ar=1.5, p=0.5, E_hit=3.0, E_miss=2.0, E_sd=2.5)
    pred = timeline.predict(c)
    assert pred["ssd_parallel"] == pytest.approx((0.5 * 4 + 0.5 * 6) / 2.5)
    assert pred["ssd_sequential"] == pytest.approx((4 + 3 + 1) / 2.5)
    assert pred["sd"] == pytest.approx(6 / 2.5)
    assert pred["ssd_parallel_build_as_one_round"] == pred["ssd_parallel"]  # both hidden
    # A build slower than the verify is on the critical path, hit or miss.
    assert timeline.predict({**c, "T_c": 5.0})["ssd_parallel"] == pytest.approx(6 / 2.5)
    clocks = [
        Timed([0.1] * 3, [False, True, False], [1.0] * 3, [1.0] * 3, [4, 3, 2]),
        Timed([0.1] * 2, [False, True], [1.0] * 2, [1.0] * 2, [1, 5]),
    ]
    assert timeline.hits_from_rounds(clocks) == {
        "p": 2 / 3,
        "E_hit": 4.0,
        "E_miss": 2.0,
        "rounds": 3,
    }


def test_the_cost_probes_time_each_step_of_a_round():
    (cfg, g, p), draft = tiny_pair()
    tokens, lengths = pad_prompts([PROMPT], cfg.n_ctx)
    loop = SSDSpeculator(
        graphdef=g,
        cfg=cfg,
        drafter=DraftModel(draft[1], draft[0]),
        gamma=3,
        eos_id=-1,
        fanout=(1, 1, 1, 1),
    )
    probes = timeline.probe(
        loop, p, draft[2], tokens, lengths, jax.random.key(0), SamplingParams.make(1.0), 8
    )
    costs = timeline.probe_costs(probes, 1)
    assert set(costs) == {"T_v", "T_c", "T_h", "T_b"} and min(costs.values()) > 0
