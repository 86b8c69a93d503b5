"""The Intel-Mac pins, tested on this machine: `make intel-mac` builds .venv-intel-mac from
constraints-intel-mac.txt (jax 0.4.38, flax 0.10.4: the last JAX built for macOS on x86-64),
and the tests of the lessons' and exercises' code paths run in it, in a process of its own.

No Mac takes part: the same versions on Linux x86-64 run the same Python code, and what differs
between the two JAX stacks is in nanospec/compat.py, which these tests cover on both. The venv
comes from PyPI (the first run installs it, about a minute; later runs reuse it until
pyproject.toml or the pins change), so a room installing from a wheelhouse, without network,
skips this test. Sorted to start first (conftest.py): it runs beside the rest of the suite.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv-intel-mac"
PINS = REPO / "constraints-intel-mac.txt"

# The lessons' and exercises' code paths: the model and its checkpoints, sampling and the
# verify rule, the loops and every drafter, the exercise checker, the lessons' own machinery (a
# notebook in a kernel; their fast layer), and four lessons run whole as scripts, claims checked.
SUBSET = [
    "tests/test_compat.py",
    "tests/test_model.py",
    "tests/test_checkpoint.py",
    "tests/test_sampling.py",
    "tests/statistical/test_verify_identity.py",
    "tests/test_generate.py",
    "tests/test_speculative.py",
    "tests/test_lookup.py",
    "tests/test_heads.py",
    "tests/test_tree.py",
    "tests/test_exercises.py",
    "tests/test_lessons.py",
]
# Training the heads is `make retrain`'s, not the course's: 20 s of CPU left out.
TRAINING = "tests/test_heads.py::test_heads_learn_from_a_frozen_target"
LESSONS = ["04_one_token_exactly", "05_exactness_proven", "07_the_whole_loop"]
LESSONS += ["16_testing_a_sampler"]
# One sampled speculative generation from the shipped models: the same tokens on both stacks.
GENERATE = ["-m", "nanospec", "generate", "--prompt", "The capital of France is", "--json"]
GENERATE += ["--max-new-tokens", "24", "--temperature", "1", "--seed", "0", "--method", "draft"]


def pinned(name: str) -> str:
    """The version constraints-intel-mac.txt pins for `name`."""
    for line in PINS.read_text(encoding="utf-8").splitlines():
        if line.split("==")[0] == name:
            return line.split("==")[1]
    raise AssertionError(f"{PINS.name} pins no {name}")


def own_environment() -> dict:
    """This environment less what ties a process to this run: the xdist worker's identity and
    the run's compile log (the inner run keeps its own), so it is a pytest run of its own."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("PYTEST_") or name == "NANOSPEC_COMPILE_LOG":
            del env[name]
    return env


def run(argv: list, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=REPO, env=own_environment(), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="the Intel-Mac venv is built by make")
def test_the_intel_mac_pins_run_the_lessons_and_exercises(as_users_compile):
    if os.environ.get("WHEELHOUSE"):
        pytest.skip("installing from a wheelhouse: the Intel-Mac venv needs PyPI (make intel-mac)")
    built = run(["make", "intel-mac"], timeout=1200)
    assert built.returncode == 0, f"make intel-mac failed:\n{built.stdout[-3000:]}{built.stderr}"
    python = str(VENV / "bin" / "python")

    versions = run(
        [python, "-c", "import jax, flax; print(jax.__version__, flax.__version__)"], 300
    )
    assert versions.stdout.split() == [pinned("jax"), pinned("flax")], versions.stderr

    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not repeat"]
    ran = run([*argv, *SUBSET, "--deselect", TRAINING], timeout=1800)
    assert ran.returncode == 0, f"on jax {pinned('jax')}:\n{ran.stdout[-6000:]}{ran.stderr[-3000:]}"

    for lesson in LESSONS:  # as `python -m nanospec.teach` runs each
        told = run([python, f"lessons/{lesson}.py"], timeout=600)
        assert told.returncode == 0 and "✗" not in told.stdout, told.stdout[-3000:] + told.stderr

    there, here = run([python, *GENERATE], 600), run([sys.executable, *GENERATE], 600)
    assert there.returncode == 0 and here.returncode == 0, there.stderr + here.stderr
    tokens = [json.loads(done.stdout)["tokens"] for done in (there, here)]
    assert tokens[0] == tokens[1], f"jax {pinned('jax')} drew {tokens[0]}, this stack {tokens[1]}"
