"""Compile ahead of time, so that compiling is timed — and shown — apart from running.

`jax.jit` compiles on a function's first call, which folds seconds of XLA work into whatever
the first call was timing: round 1 of a traced run looked like a 5-second draft. Here a
program is lowered and compiled explicitly (`jitted.lower(...).compile()`), the seconds are
reported, and the compiled program is kept for the next run with the same static arguments
and the same shapes — so a second run (a new temperature, seed or prompt of the same bucket)
compiles nothing.

    program, seconds = compiled(_step_jit, dict(cfg=cfg, ...), dict(params=params, ...))
    out = program(**dynamic)          # only the traced arguments; donation is kept

The programs kept are bounded by the memory mappings they hold (`MAPPINGS`, the least
recently used dropped first), and a program is found again only for arguments of the same
shapes, dtypes *and shardings*: one compiled for arrays on one device, or split over a mesh,
is never handed arrays placed otherwise.

What this file deliberately leaves out: a persistent (on-disk) compilation cache
(compile_cache.py turns on JAX's own).
"""

import time
from collections import OrderedDict

import jax

from nanospec import compile_cache

# subtle: on XLA's CPU backend one compiled decode program holds some 500-1,300 memory mappings
# (measured on the shipped models: AR 530, a draft model 860, SSD 1,330), and Linux allows 65,530
# per process; past that, compiling crashes inside XLA (jax-ml/jax#27201). Only dropping a
# program frees its mappings (jax.clear_caches() does not reach this table), so programs are
# dropped while the process holds more than MAPPINGS: that leaves 25,000 for JAX's own caches and
# the compile in flight. Where there is no /proc to count them (macOS), KEEP programs are kept.
MAPPINGS = 40_000
KEEP = 32
compile_cache.log_if_asked()  # JAX is loaded now: count its compiling, if asked to
_PROGRAMS: OrderedDict = OrderedDict()  # (function, static args, arguments' layout) -> program
_COMPILED: dict = {}  # function -> programs compiled for it so far (eviction does not lower it)


def _signature(dynamic: dict):
    """The arguments' tree structure and, per leaf, shape, dtype and sharding (None for a
    ShapeDtypeStruct without one, or a Python scalar)."""
    leaves, treedef = jax.tree.flatten(dynamic)
    return treedef, tuple(
        (getattr(x, "shape", ()), str(getattr(x, "dtype", type(x))), getattr(x, "sharding", None))
        for x in leaves
    )


def compiled(jitted, static: dict, dynamic: dict, where: tuple = ()):
    """(program, compile seconds): `jitted` compiled for these static arguments and these
    shapes of the traced ones (which may be arrays or `jax.ShapeDtypeStruct`s); 0 seconds
    when an earlier call already compiled it. `where`: the devices the arrays are on, when a
    caller places them itself (ssd/devices.py) — a program is compiled for its device."""
    # JAX's switch for compiling quickly rather than well (the test suite turns it on for
    # tests that mostly compile): a program compiled one way is not handed out for the other.
    quick = jax.config.read("jax_disable_most_optimizations")
    key = (jitted, tuple(sorted(static.items())), _signature(dynamic), where, quick)
    if key in _PROGRAMS:
        _PROGRAMS.move_to_end(key)
        return _PROGRAMS[key], 0.0
    t0 = time.perf_counter()
    program = jitted.lower(**static, **dynamic).compile()
    _PROGRAMS[key] = program
    _COMPILED[jitted] = _COMPILED.get(jitted, 0) + 1
    seconds = time.perf_counter() - t0
    while len(_PROGRAMS) > 1 and (mappings() or 0) > MAPPINGS:
        _PROGRAMS.popitem(last=False)  # the last reference, unless a caller still holds it
    while mappings() is None and len(_PROGRAMS) > KEEP:
        _PROGRAMS.popitem(last=False)
    return program, seconds


def mappings() -> int | None:
    """This process's memory mappings, or None where there is no /proc to count them."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def programs_compiled(jitted=None) -> int:
    """How many programs have been compiled so far (of `jitted` only, if given): tests count
    them to prove that a new prompt length within a bucket, or a new temperature, reuses one."""
    return sum(_COMPILED.values()) if jitted is None else _COMPILED.get(jitted, 0)


def clear() -> None:
    """Forget every compiled program (benchmarks free memory between workloads)."""
    _PROGRAMS.clear()
