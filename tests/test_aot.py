"""aot.py keeps programs while the process holds at most MAPPINGS memory mappings (KEEP programs
where it cannot count them), and dropping one gives back its memory mappings.

(Why it matters: on XLA's CPU backend each compiled program holds memory mappings, and a
process past Linux's 65,530 crashes inside XLA, so a table that only grows takes down a
long-running server or test worker; aot.py explains the numbers.)
"""

import gc
import sys
from functools import partial

import jax
import jax.numpy as jnp
import pytest

from nanospec import aot


@partial(jax.jit, static_argnames="k")
def _scaled(x, k):
    return jnp.tanh(x * k) + jnp.cos(x)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/maps")
def test_past_the_mapping_budget_the_least_recent_programs_are_dropped(monkeypatch, compile_afresh):
    aot.clear()
    monkeypatch.setattr(aot, "MAPPINGS", 10**9)
    x = jnp.ones(8)
    for k in range(4):
        aot.compiled(_scaled, dict(k=k), dict(x=x))
    assert len(aot._PROGRAMS) == 4  # under the budget every program is kept
    monkeypatch.setattr(aot, "MAPPINGS", 0)  # the process is past the budget, whatever it drops
    aot.compiled(_scaled, dict(k=99), dict(x=x))
    assert len(aot._PROGRAMS) == 1  # the older four were dropped, the newest kept (0 s)
    assert aot.compiled(_scaled, dict(k=99), dict(x=x))[1] == 0.0
    before = aot.programs_compiled(_scaled)
    aot.compiled(_scaled, dict(k=0), dict(x=x))
    assert aot.programs_compiled(_scaled) == before + 1
    aot.clear()


def test_where_mappings_cannot_be_counted_at_most_keep_programs_are_held(
    monkeypatch, compile_afresh
):
    aot.clear()
    monkeypatch.setattr(aot, "mappings", lambda: None)
    x = jnp.ones(8)
    for k in range(aot.KEEP + 5):
        aot.compiled(_scaled, dict(k=k), dict(x=x))
    assert len(aot._PROGRAMS) == aot.KEEP
    # k = 0..4 were dropped (compiling again takes time); the newest is still there (0 s).
    assert aot.compiled(_scaled, dict(k=aot.KEEP + 4), dict(x=x))[1] == 0.0
    before = aot.programs_compiled(_scaled)
    aot.compiled(_scaled, dict(k=0), dict(x=x))
    assert aot.programs_compiled(_scaled) == before + 1
    aot.clear()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/maps")
def test_a_kept_program_holds_mappings_until_the_table_drops_it(monkeypatch, compile_afresh):
    aot.clear()
    monkeypatch.setattr(aot, "MAPPINGS", 10**9)
    jax.clear_caches()
    gc.collect()
    x = jnp.ones(8)
    start = aot.mappings()
    for k in range(1000, 1000 + aot.KEEP):
        aot.compiled(_scaled, dict(k=k), dict(x=x))
    jax.clear_caches()  # JAX's caches let go; the table still holds every program
    gc.collect()
    held = aot.mappings()
    assert held - start >= aot.KEEP  # at least one mapping per program (measured: ~3 here)
    aot.clear()
    gc.collect()
    assert aot.mappings() - start < (held - start) / 2
