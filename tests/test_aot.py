"""aot.py keeps at most KEEP compiled programs, and dropping one gives back its memory mappings.

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


def _mappings() -> int:
    with open("/proc/self/maps", encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_the_table_holds_at_most_keep_programs_the_least_recent_dropped():
    aot.clear()
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
def test_a_kept_program_holds_mappings_until_the_table_drops_it():
    aot.clear()
    jax.clear_caches()
    gc.collect()
    x = jnp.ones(8)
    start = _mappings()
    for k in range(1000, 1000 + aot.KEEP):
        aot.compiled(_scaled, dict(k=k), dict(x=x))
    jax.clear_caches()  # JAX's caches let go; the table still holds every program
    gc.collect()
    held = _mappings()
    assert held - start >= aot.KEEP  # at least one mapping per program (measured: ~3 here)
    aot.clear()
    gc.collect()
    assert _mappings() - start < (held - start) / 2
