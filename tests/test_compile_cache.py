"""The compilation cache on disk (nanospec/compile_cache.py): a repeated command loads its
programs instead of compiling them, and the cache can be moved or turned off.

Wall-clock times are never asserted (the machine is shared); what is checked is the cache's
content: the first command writes its compiled programs, an identical second command finds
every one of them and writes nothing new. The speed-up this buys is measured in
docs/results.md.
"""

import doctest
import os
import subprocess
import sys

import nanospec.compile_cache
from nanospec.compile_cache import cache_dir


def test_doctests():
    assert doctest.testmod(nanospec.compile_cache).failed == 0


def test_the_folder_follows_the_environment(tmp_path, monkeypatch):
    assert cache_dir({"NANOSPEC_COMPILE_CACHE": str(tmp_path)}) == tmp_path
    for off in ("off", "OFF", "0", " none "):
        assert cache_dir({"NANOSPEC_COMPILE_CACHE": off}) is None
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir({}) == tmp_path / ".cache" / "nanospec" / "xla"


def generate(ckpt, env) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "nanospec",
        "--checkpoints",
        str(ckpt),
        "generate",
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-new-tokens",
        "4",
    ]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


def limit_seen_by_jax(env) -> str:
    code = "from nanospec import compile_cache; compile_cache.enable(); import jax; "
    code += "print(jax.config.jax_compilation_cache_max_size)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_users_cache_is_limited_and_locked_unless_jaxs_own_variable_says_otherwise(tmp_path):
    env = {**os.environ, "NANOSPEC_COMPILE_CACHE": str(tmp_path)}
    env.pop("JAX_COMPILATION_CACHE_MAX_SIZE", None)
    assert limit_seen_by_jax(env) == str(4 << 30)
    assert limit_seen_by_jax({**env, "JAX_COMPILATION_CACHE_MAX_SIZE": "-1"}) == "-1"
    assert os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == "-1"  # this suite's (conftest.py)


def test_a_repeated_command_loads_every_program_from_the_cache(tiny_ckpt_dir, tmp_path):
    cache = tmp_path / "xla"
    env = {**os.environ, "NANOSPEC_COMPILE_CACHE": str(cache)}
    env.pop("JAX_COMPILATION_CACHE_MAX_SIZE", None)  # as a user runs it: limited, locked
    first = generate(tiny_ckpt_dir, env)
    assert first.returncode == 0, first.stderr
    written = sorted(p.name for p in cache.iterdir())
    assert written  # the first command compiled, and kept what it compiled
    assert any(name.endswith("-atime") for name in written)  # JAX's LRU bookkeeping: limited
    second = generate(tiny_ckpt_dir, env)
    assert second.returncode == 0, second.stderr
    assert sorted(p.name for p in cache.iterdir()) == written  # all found: nothing compiled anew
    assert second.stdout == first.stdout.replace(
        first.stdout.splitlines()[-1], second.stdout.splitlines()[-1]
    )


def test_off_writes_no_cache(tiny_ckpt_dir, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "NANOSPEC_COMPILE_CACHE": "off",
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HOME": str(home),
    }
    result = generate(tiny_ckpt_dir, env)
    assert result.returncode == 0, result.stderr
    assert list(home.rglob("*")) == []
