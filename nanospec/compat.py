"""The one place where nanospec meets two JAX stacks: the newest, and the Intel Macs' last.

nanospec is tested on two sets of pins (docs/install.md, "Intel Macs"):

    constraints.txt             jax 0.10, flax 0.12: every laptop but an Intel Mac, and CI
    constraints-intel-mac.txt   jax 0.4.38, flax 0.10.4: the last jaxlib built for macOS x86-64

The code is written in what both support. Where they differ and no common spelling exists, the
difference lives here, one entry each, with the versions it is about; no other module asks
which version it runs on. Every entry is decided once, at import, by what the installed
library has (or, for a flag that cannot be probed, by its version).

What this file deliberately leaves out: the JAX versions between the two pins (0.5 to 0.6,
flax 0.11), which nothing tests.
"""

import os
from importlib.metadata import version

import jax
import jax.experimental
from flax import nnx

from nanospec.machine import vector_extension


def _release(package: str) -> tuple[int, int]:
    """(major, minor) of an installed package: "0.4.38" -> (0, 4)."""
    return tuple(int(part) for part in version(package).split(".")[:2])


# The random numbers a seed gives. jax 0.5 made "partitionable" threefry the default, which
# draws other numbers from the same key than jax 0.4.38 does by default; every seeded number in
# the lessons, the exercises and the tests is the newer one. So on jax 0.4 it is switched on,
# the first time any nanospec module that draws or models is imported (this one), before any
# key is used. subtle: a key drawn from before that import would give the old numbers.
if _release("jax") < (0, 5):
    jax.config.update("jax_threefry_partitionable", True)

# A list of sub-modules as a module's attribute (a GPT's blocks, a head's layers). flax 0.12
# treats a plain list as static data and wants `nnx.List`, which it added; flax 0.10 has no
# `nnx.List` and takes a plain list of modules as part of the graph. Both name the state the
# same way (h.0.attn..., h.1...), so a checkpoint loads into either.
ModuleList = getattr(nnx, "List", list)


def get_value(variable):
    """A variable's array (or its shape, under `nnx.eval_shape`), from a module or a state.
    flax 0.12 spells it `get_value()` and deprecates `.value`; flax 0.10 has only `.value`,
    and its states (`nnx.split`) hold `VariableState`s, which have nothing else."""
    return variable.get_value() if hasattr(variable, "get_value") else variable.value


def set_value(variable, value) -> None:
    """Replace a variable's array in place: `set_value` in flax 0.12, the `.value` setter in
    flax 0.10 (the same two spellings as `get_value`)."""
    if hasattr(variable, "set_value"):
        variable.set_value(value)
    else:
        variable.value = value


# float64 inside a `with` block: `jax.enable_x64(True)` in jax 0.10, which dropped the older
# spelling; jax 0.4.38 has only `jax.experimental.enable_x64(True)`.
enable_x64 = jax.enable_x64 if hasattr(jax, "enable_x64") else jax.experimental.enable_x64


def out_info(program):
    """The outputs of a compiled program (`jitted.lower(...).compile()`) as a pytree of
    `jax.ShapeDtypeStruct`s, to lower the next program of a chain without running this one.
    jax 0.10 gives `Compiled.out_info`; in jax 0.4.38 only `Lowered` has it, so it is built
    from the compiled program's output avals and shardings, as jax 0.10's property does."""
    if hasattr(program, "out_info"):
        return program.out_info
    avals = program._executable.out_avals  # flat, as is the list built from them
    shardings = program.out_tree.flatten_up_to(program.output_shardings)
    leaves = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(avals, shardings)]
    return jax.tree.unflatten(program.out_tree, leaves)


# XLA_FLAGS that make XLA:CPU compile quickly rather than well (tests/conftest.py). jaxlib
# 0.10 compiles fusions with XLA:CPU's new emitters, one kernel each, and the flag turns them
# off; jaxlib 0.4.38 predates them (its CPU backend compiles the old way) and aborts the
# process on a flag it does not know, so it gets none.
QUICK_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false" if _release("jaxlib") >= (0, 5) else ""

# XLA:CPU's vectors on a CPU with AVX-512: 512 bits wide, where it picks 256 by default. On the
# shipped target a one-token step took 0.99-1.07 ms against 1.22-1.28 (docs/results.md, "The
# verify pass: before and after"); the greedy tokens were the same. XLA reads XLA_FLAGS when its
# backend starts, which no import does, so set here it reaches every nanospec command and the
# processes they start; a width the user set is kept. Left to jaxlib 0.5 on (0.4.38 is the
# Intel Macs', which abort on a flag their XLA may not know) and to CPUs that have AVX-512.
WIDE = "--xla_cpu_prefer_vector_width"
if (
    vector_extension() == "AVX-512"
    and _release("jaxlib") >= (0, 5)
    and WIDE not in os.environ.get("XLA_FLAGS", "")
):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {WIDE}=512".strip()
