"""The engine on a device mesh (serving/mesh.py): 4 CPU devices as a 2 × 2 (data, model) mesh
— slots split over data, the target's weights tensor-parallel over model — give the greedy
tokens of one device, for AR, the draft model and SSD, and serving compiles nothing new.

The devices are made with XLA_FLAGS=--xla_force_host_platform_device_count=4, which must be
set before JAX starts: so the mesh runs in a subprocess."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from nanospec.compat import get_value
from nanospec.errors import UserError
from nanospec.serving.engine import Engine
from nanospec.serving.mesh import check_slots, make_mesh, weight_spec
from tests.statistical.laws import tiny_pair
from tests.test_engine import REQUESTS, loops, serve

REPO = Path(__file__).resolve().parent.parent
GREEDY = [r._replace(temperature=0.0) for r in REQUESTS]


def agreement(method: str) -> tuple[bool, int, tuple, tuple]:
    """(the mesh's tokens == one device's, programs compiled while serving on the mesh,
    a target weight's and the KV cache's placement)."""
    pair = tiny_pair()
    (_, _, p), draft = pair
    arrivals = {0: GREEDY[:3], 2: GREEDY[3:]}
    alone = serve(Engine(loops(pair)[method], p, draft[2], slots=4), arrivals)
    engine = Engine(loops(pair)[method], p, draft[2], slots=4, mesh=make_mesh(2, 2))
    engine.warm([len(r.prompt) for r in GREEDY])
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: (
            compiles.append(event)
            if event == "/jax/core/compile/backend_compile_duration"
            else None
        )
    )
    spread = serve(engine, arrivals)
    kernel = get_value(engine.params["h"][0]["mlp"]["c_fc"]["kernel"])
    return (
        spread == alone,
        len(compiles),
        tuple(kernel.sharding.spec),  # a tuple: jax 0.4.38 and 0.10 print a spec differently
        tuple(engine.state.cache.k[0].sharding.spec),
    )


def test_on_a_2x2_mesh_greedy_tokens_equal_one_devices():
    script = textwrap.dedent("""
        from tests.test_mesh import agreement
        print([agreement(m) for m in ("ar", "draft", "ssd")])
    """)
    env = {
        **os.environ,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for same, compiles, kernel, cache in eval(done.stdout.strip().splitlines()[-1]):
        assert same and compiles == 0
        assert kernel == (None, "model")
        assert cache == ("data",)


def test_megatron_placement_by_module_name():
    (_, _, p), _ = tiny_pair()
    specs = {
        jax.tree_util.keystr(path): weight_spec(path, x)
        for path, x in jax.tree_util.tree_leaves_with_path(p)
    }
    layer, P = "['h'][0]", jax.sharding.PartitionSpec
    assert specs[f"{layer}['attn']['c_attn']['kernel'].value"] == P(None, "model")  # columns
    assert specs[f"{layer}['attn']['c_attn']['bias'].value"] == P("model")
    assert specs[f"{layer}['mlp']['c_proj']['kernel'].value"] == P("model", None)  # rows
    assert specs[f"{layer}['mlp']['c_proj']['bias'].value"] == P()
    assert specs["['wte']['embedding'].value"] == P()


def test_a_mesh_too_big_or_slots_that_do_not_split_are_one_sentence():
    with pytest.raises(UserError, match="needs 8 devices"):
        make_mesh(4, 2, devices=jax.devices()[:1])

    class TwoDataDevices:  # all check_slots reads of a mesh
        shape = {"data": 2, "model": 2}

    with pytest.raises(UserError, match="3 slots do not split evenly over 2 data devices"):
        check_slots(3, TwoDataDevices())
