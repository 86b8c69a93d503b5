"""Scale-out with XLA SPMD: the engine's slots and the target's weights split over devices.

The engine's slots are split over a `data` axis of devices, the target's weights
tensor-parallel over a `model` axis.

    mesh = make_mesh(data=2, model=2)          # 4 devices
    engine = Engine(loop, params, dparams, slots=8, mesh=mesh)

Nothing in the loop changes. JAX's `jit` compiles one program for the whole mesh (GSPMD): we
say where each array lives — `NamedSharding(mesh, PartitionSpec(...))` — and XLA partitions
the computation to match and inserts the collectives. The placement follows Megatron-LM:

- every attention and MLP block's first matrix (c_attn, c_fc: C -> 3C, 4C) is split by
  columns over `model`, its second (c_proj: back to C) by rows, so each device holds 1/model
  of every block and one all-reduce closes it; embeddings and layer norms are replicated;
- the engine's state (caches, tokens, keys: every leaf's first axis is the slot, a cache's
  the slot's heads) is split by slot over `data`, so each data group decodes its own slots;
- the drafter's parameters are replicated (a small model: copying it is cheaper than talking).

Greedy output is the same as on one device (tests/test_mesh.py, on 4 CPU devices made with
XLA_FLAGS=--xla_force_host_platform_device_count=4): the partitioned program computes the same
sums, in an order that can differ in the last bits — so a near-tie between two tokens could
in principle flip; the test's prompts have none.

On a multi-host TPU slice or GPU cluster the same code runs once per host after
`jax.distributed.initialize()`: `jax.devices()` then lists every host's devices, the mesh
spans them (`model` kept within a host, where the interconnect is fastest; `data` across
hosts), and each host feeds and reads only its own slots (`jax.make_array_from_process_local_data`
instead of device_put) — the engine's host-side bookkeeping (which slot holds which request)
would then be per host, which this file does not build.
"""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nanospec.errors import UserError

SPLIT_COLUMNS = ("c_attn", "c_fc")  # C -> wider: split the output features over `model`
SPLIT_ROWS = ("c_proj",)  # back to C: split the input features over `model`


def make_mesh(data: int, model: int, devices=None) -> Mesh:
    """A (data, model) mesh over the first data·model devices."""
    devices = jax.devices() if devices is None else devices
    if data * model > len(devices):
        raise UserError(
            f"A {data}×{model} mesh needs {data * model} devices; JAX sees {len(devices)}."
        )
    return Mesh(np.asarray(devices[: data * model]).reshape(data, model), ("data", "model"))


def weight_spec(path, x) -> P:
    """Where one target weight lives: by its module name, Megatron's split (module docstring)."""
    names = [getattr(k, "key", getattr(k, "name", None)) for k in path]
    if x.ndim == 0:
        return P()
    if any(n in SPLIT_COLUMNS for n in names):
        return P(None, "model") if x.ndim == 2 else P("model")  # kernel (C, 3C) / bias (3C,)
    if any(n in SPLIT_ROWS for n in names) and x.ndim == 2:
        return P("model", None)  # kernel (4C, C); its bias (C,) is added once, replicated
    return P()


def weight_shardings(params, mesh: Mesh):
    """The target's parameters' shardings, leaf for leaf."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: NamedSharding(mesh, weight_spec(path, x)), params
    )


def slot_shardings(state, mesh: Mesh):
    """The engine state's shardings: every array split by slot (its first axis) over `data`.

    The target's KV cache too: a buffer is (B·H, S, Dh) (cache.py), so its first axis splits
    into whole rows, each with all its heads, and every `model` device keeps its rows' copy.
    (Laid out (B, S, H, Dh), it was split by head over `model` as well, where c_attn's columns
    compute them; split over both axes, the merged axis made XLA give the other per-row
    arrays that split too, and the next step refused them: the cache's layout won.)"""
    return jax.tree.map(lambda x: NamedSharding(mesh, P("data") if x.ndim else P()), state)


def replicated(tree, mesh: Mesh):
    return jax.tree.map(lambda x: NamedSharding(mesh, P()), tree)


def place(engine, mesh: Mesh) -> None:
    """Spread an engine over `mesh`: its slots over `data`, the target's weights tensor-
    parallel over `model`, the drafter's replicated. Its jitted programs then compile for the
    mesh, and their results stay where their inputs are."""
    put = jax.device_put
    engine.params = put(engine.params, weight_shardings(engine.params, mesh))
    engine.dparams = put(engine.dparams, replicated(engine.dparams, mesh))
    engine.state, engine.sp, engine.max_new = (
        put(x, slot_shardings(x, mesh)) for x in (engine.state, engine.sp, engine.max_new)
    )


def check_slots(slots: int, mesh: Mesh) -> None:
    data = mesh.shape["data"]
    if slots % data:
        raise UserError(
            f"{slots} slots do not split evenly over {data} data devices; use a multiple of {data}."
        )
