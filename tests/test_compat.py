"""nanospec.compat: each entry gives the same answer on both JAX stacks (jax 0.10 with flax 0.12,
and the Intel Macs' jax 0.4.38 with flax 0.10.4). The suite runs on the first; the same tests
run on the second inside tests/test_intel_mac.py, so every known answer here holds on both."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nanospec import compat
from nanospec.model import GPT, ModelConfig


def test_a_seed_draws_the_same_numbers_on_both_stacks():
    """Known answer: jax 0.10's numbers for key 0 (partitionable threefry, its default), which
    jax 0.4.38 draws too once compat is imported (it switches the same option on there)."""
    key = jax.random.key(0)
    np.testing.assert_allclose(
        jax.random.normal(key, (3,)), [1.6226422, 2.0252647, -0.43359444], rtol=1e-6
    )
    assert jax.random.randint(jax.random.fold_in(key, 3), (4,), 0, 100).tolist() == [67, 68, 1, 11]


def test_a_module_list_names_its_state_by_index():
    """GPT's blocks live in a ModuleList: state paths h.0..., h.1... as checkpoints name them."""
    cfg = ModelConfig.tiny(vocab_size=20, n_ctx=8)
    _, params = nnx.split(GPT(cfg, nnx.Rngs(0)))
    paths = {path[:2] for path, _ in nnx.to_flat_state(params) if path[0] == "h"}
    assert paths == {("h", i) for i in range(cfg.n_layer)}


def test_get_and_set_value_round_trip_on_a_split_state():
    _, params = nnx.split(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    kernel = params["kernel"]
    assert compat.get_value(kernel).shape == (2, 3)
    compat.set_value(kernel, jnp.ones((2, 3)))
    assert compat.get_value(params["kernel"]).tolist() == [[1.0] * 3] * 2


def test_out_info_describes_a_compiled_programs_outputs():
    def f(x):
        return {"double": x * 2, "first": x[:1].astype(jnp.int32)}

    program = jax.jit(f).lower(jnp.zeros(4)).compile()
    info = compat.out_info(program)
    assert jax.tree.structure(info) == jax.tree.structure(jax.eval_shape(f, jnp.zeros(4)))
    assert (info["double"].shape, info["double"].dtype) == ((4,), jnp.float32)
    assert (info["first"].shape, info["first"].dtype) == ((1,), jnp.int32)
    again = jax.jit(f).lower(info["double"]).compile()  # the next program lowers from it
    assert again(jnp.ones(4))["double"].tolist() == [2.0] * 4


def test_enable_x64_computes_in_float64_inside_the_block_only():
    with compat.enable_x64(True):
        assert jnp.ones(1).dtype == jnp.float64
    assert jnp.ones(1).dtype == jnp.float32


def test_the_quick_xla_flags_name_only_flags_this_xla_knows():
    """An unknown flag aborts XLA when its backend starts (jaxlib 0.4.38 has no fusion
    emitters); this process started its backend with the suite's flags (tests/conftest.py)."""
    assert jnp.ones(2).sum() == 2  # the backend is up, so the flags were accepted
    flags = compat.QUICK_XLA_FLAGS.split()
    assert all(flag.startswith("--xla_cpu_") for flag in flags)


def xla_flags_after_import(given: str | None) -> str:
    """XLA_FLAGS in a fresh process after `import nanospec.compat`, given XLA_FLAGS (or none)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if given is not None:
        env["XLA_FLAGS"] = given
    code = "import os, nanospec.compat; print(os.environ.get('XLA_FLAGS', ''))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_wide_vectors_on_avx512_only_and_never_over_the_users_width():
    """512-bit vectors where the CPU has AVX-512 and jaxlib is 0.5 or newer; a width the user
    gave is kept as given; other flags are kept beside it."""
    from nanospec.machine import vector_extension

    wide = vector_extension() == "AVX-512" and compat._release("jaxlib") >= (0, 5)
    assert xla_flags_after_import(None) == (f"{compat.WIDE}=512" if wide else "")
    mine = "--xla_cpu_prefer_vector_width=256"
    assert xla_flags_after_import(mine) == mine
    other = "--xla_cpu_multi_thread_eigen=false"
    assert xla_flags_after_import(other) == (f"{other} {compat.WIDE}=512" if wide else other)
