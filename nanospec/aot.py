"""Compile ahead of time, so that compiling is timed — and shown — apart from running.

`jax.jit` compiles on a function's first call, which folds seconds of XLA work into whatever
the first call was timing: round 1 of a traced run looked like a 5-second draft. Here a
program is lowered and compiled explicitly (`jitted.lower(...).compile()`), the seconds are
reported, and the compiled program is kept for the next run with the same static arguments
and the same shapes — so a second run (a new temperature, seed or prompt of the same bucket)
compiles nothing.

    program, seconds = compiled(_step_jit, dict(cfg=cfg, ...), dict(params=params, ...))
    out = program(**dynamic)          # only the traced arguments; donation is kept

What this file deliberately leaves out: a persistent (on-disk) compilation cache.
"""

import time

import jax

_PROGRAMS: dict = {}  # (function, static args, argument structure and shapes) -> compiled


def _signature(dynamic: dict):
    leaves, treedef = jax.tree.flatten(dynamic)
    return treedef, tuple((getattr(x, "shape", ()), str(getattr(x, "dtype", type(x))))
                          for x in leaves)


def compiled(jitted, static: dict, dynamic: dict, where: tuple = ()):
    """(program, compile seconds): `jitted` compiled for these static arguments and these
    shapes of the traced ones (which may be arrays or `jax.ShapeDtypeStruct`s); 0 seconds
    when an earlier call already compiled it. `where`: the devices the arrays are on, when a
    caller places them itself (ssd_devices.py) — a program is compiled for its device."""
    key = (jitted, tuple(sorted(static.items())), _signature(dynamic), where)
    if key in _PROGRAMS:
        return _PROGRAMS[key], 0.0
    t0 = time.perf_counter()
    program = jitted.lower(**static, **dynamic).compile()
    _PROGRAMS[key] = program
    return program, time.perf_counter() - t0


def programs_compiled(jitted=None) -> int:
    """How many programs have been compiled so far (of `jitted` only, if given): tests count
    them to prove that a new prompt length within a bucket, or a new temperature, reuses one."""
    return sum(1 for key in _PROGRAMS if jitted is None or key[0] is jitted)


def clear() -> None:
    """Forget every compiled program (benchmarks free memory between workloads)."""
    _PROGRAMS.clear()
