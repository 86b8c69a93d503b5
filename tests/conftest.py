"""Shared fixtures: tiny models built in seconds, so only shipped-checkpoint tests load weights."""

import gc
import hashlib
import json
import os
import time
from pathlib import Path

# The suite compiles its programs quickly rather than well: XLA's backend optimizations off (JAX's
# own switch) and XLA:CPU's one-kernel-per-fusion emitters off. Measured on a 2-core CPU, a
# speculative loop then compiles in 0.27-0.42 of the CPU seconds and runs 1.4-2.3 times as long
# (`python -m nanospec.measure.quick_compile`, docs/results.md). Most tests compile more than they
# run, so the suite takes this trade; XLA is given the same program either way. Tests whose time is
# in their rows (the large-N law tests, the longest 20,000-row smoke and power tests, the shipped
# models' fact test) are marked `optimized` and compile as every command does, and the lessons'
# kernels get the settings the suite was started with (their timings are claims). Set before JAX
# is imported, so that every CLI and server process the tests start inherits them.
AS_GIVEN = {name: os.environ.get(name) for name in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"  # read when JAX is imported: before compat

# The emitters' flag exists only in newer XLA (compat.py); XLA reads XLA_FLAGS when its backend
# starts, which no import does (tests/test_imports.py).
from nanospec.compat import QUICK_XLA_FLAGS

# One thread per program's run: the workers already share the cores, and XLA's thread pool per
# worker only made them take turns (two 40,000-row law runs side by side: 7% faster without it).
QUICK_FLAGS = f"{QUICK_XLA_FLAGS} --xla_cpu_multi_thread_eigen=false"
os.environ["XLA_FLAGS"] = f"{AS_GIVEN['XLA_FLAGS'] or ''} {QUICK_FLAGS}".strip()

import jax
import jaxlib
import pytest
from flax import nnx

from nanospec import aot, compile_cache
from nanospec.checkpoint import record_file, save_model
from nanospec.heads.modules import KINDS, HeadConfig, build, save_head
from nanospec.model import GPT, ModelConfig
from nanospec.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "checkpoints"


def suite_cache() -> Path:
    """The run's compilation cache: runs/test-xla/<key>, the key made of what decides a
    compiled program (jax, jaxlib, every pinned version). A clean clone starts cold; a second
    run on the same machine finds the first one's programs. Never the user's own cache."""
    key = hashlib.sha256(
        f"{jax.__version__} {jaxlib.__version__}\n".encode()
        + (REPO / "constraints.txt").read_bytes()
    ).hexdigest()[:16]
    return REPO / "runs" / "test-xla" / key


# One compilation cache for every process of a run (compile_cache.py): both xdist workers and
# every CLI, server and lesson kernel they start (the environment is inherited) load what any
# of them compiled before. NANOSPEC_TEST_COMPILE_CACHE=off (or a folder) overrides it. The
# controller also makes the run's compile log, which the workers inherit: make test's last
# line sums it (pytest_terminal_summary below).
os.environ["NANOSPEC_COMPILE_CACHE"] = os.environ.get(
    "NANOSPEC_TEST_COMPILE_CACHE", str(suite_cache())
)
# No size limit on the run's cache (JAX's default), so no lock: under a limit JAX stats and reads
# a file per entry of the folder on every program it writes, which in a cold run's 4,000 programs
# is quadratic (1,200 small programs written: 46 s with the limit, 17 s without). The folder is
# the run's own; a reader that catches an entry half-written is warned and compiles it again.
os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = "-1"
if "PYTEST_XDIST_WORKER" not in os.environ and compile_cache.LOG_ENV not in os.environ:
    os.environ[compile_cache.LOG_ENV] = str(
        REPO / "runs" / "test-compile-log" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    )
compile_cache.enable()

TINY_TEXT = [
    "The capital of France is Paris. The capital of Spain is Madrid.",
    "Repeat after me: the quick brown fox. The quick brown fox.",
    "def capital_of(country):\n    return capitals[country]\n",
]


def pytest_collection_modifyitems(config, items):
    """The slow tests first, the lesson notebooks (the longest, 10-45 s each) first among them
    (stable: file order within each group), so that the workers of `make test` (pytest-xdist)
    finish on short tests instead of one waiting out a long one. First of all, the Intel-Mac
    pins' run (test_intel_mac.py, minutes in a process of its own): it overlaps the rest."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("slow") is None,
            not item.nodeid.startswith("tests/test_intel_mac.py::"),
            not item.nodeid.startswith("tests/test_lessons.py::"),
        )
    )


# Past this many memory mappings after a module, JAX's and aot.py's compiled programs are
# dropped (Linux allows 65,530, and a decode program holds 500-1,300: the 35,000 left hold
# 27 of the largest compiled within one module); below it they are kept, so that later
# modules reuse what earlier ones compiled.
MAPPINGS_HIGH = 30_000


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop compiled programs after a test module, but only when the process holds many.

    subtle: XLA's CPU backend maps memory for every executable it compiles (a decode program
    holds 500-1,300 mappings), and one process running the whole suite compiles well over a
    thousand; at Linux's default limit of 65,530 mappings per process, compiling then crashes
    inside XLA (a segfault or an abort, not an exception; jax-ml/jax#27201). aot.py bounds its
    own table by mappings; JAX's jit caches are bounded here. A program dropped is loaded again
    from the run's compilation cache, not compiled. Tests that count compilations do so within
    one test.
    """
    yield
    if (aot.mappings() or 0) > MAPPINGS_HIGH:
        jax.clear_caches()
        aot.clear()
        gc.collect()


@pytest.fixture(autouse=True)
def _optimized_when_marked(request):
    """A test marked `optimized` compiles with XLA's optimizations on, as every command does
    (its time is in running rows); the others compile quickly (the settings at the top)."""
    if request.node.get_closest_marker("optimized") is None:
        yield
        return
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(pytest-xdist, in the process that starts the workers.) subtle: a worker inherits this
    process's environment, where the top of this file has already put the quick settings, and
    would take them for the user's: so it is told what this process was given."""
    node.workerinput["nanospec_as_given"] = json.dumps(AS_GIVEN)


@pytest.fixture
def as_users_compile(monkeypatch, request):
    """For a test that starts a process whose timings are claims (a lesson's kernel): the
    process gets the compiler settings the suite was started with, not the suite's quick ones."""
    given = getattr(request.config, "workerinput", {}).get("nanospec_as_given")
    for name, value in (json.loads(given) if given else AS_GIVEN).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


@pytest.fixture
def compile_afresh():
    """For a test that watches compiling (counts programs, or sees the app's "compiling…"):
    the run's disk cache is off while it runs, so that a program it needs is compiled there
    and then, not loaded in a blink from what another test compiled."""
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_enable_compilation_cache", True)
    compilation_cache.reset_cache()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.compile_start = compile_cache.seconds_so_far()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each test's report carries the seconds its process spent compiling during it
    (fixtures included): xdist sends it to the controller, which lists the costliest."""
    report = (yield).get_result()
    if call.when == "teardown" and hasattr(item, "compile_start"):
        spent = compile_cache.seconds_so_far() - item.compile_start
        report.user_properties.append(("compile_s", spent))


_COMPILE_S: dict = {}  # nodeid -> seconds compiling (the controller's copy)
_TOOK_S: dict = {}  # nodeid -> seconds in all (setup, call and teardown)


def pytest_runtest_logreport(report):
    _TOOK_S[report.nodeid] = _TOOK_S.get(report.nodeid, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == "compile_s" and report.when == "teardown":
            _COMPILE_S[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The run's compiling, summed over every process that logged it: the cost the suite
    drives down (issue 41). Printed by the controller only, after --durations' table."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    log = Path(os.environ[compile_cache.LOG_ENV])
    costliest = sorted(_COMPILE_S.items(), key=lambda kv: -kv[1])
    if costliest and log.is_dir():  # every test's seconds compiling and in all
        lines = (f"{s:.2f}\t{_TOOK_S.get(nodeid, 0):.2f}\t{nodeid}\n" for nodeid, s in costliest)
        (log / "tests.tsv").write_text("".join(lines), encoding="utf-8")
    costliest = costliest[:15]
    if costliest and costliest[0][1] > 0:
        terminalreporter.write_sep("=", "most seconds compiling (tracing, lowering, XLA)")
        for nodeid, seconds in costliest:
            terminalreporter.write_line(f"{seconds:8.1f}s {nodeid}")
    total = compile_cache.summarize(log)
    if total["processes"]:
        terminalreporter.write_line(
            f"compiling: {total.get('programs', 0)} programs in {total['processes']} processes "
            f"({total.get('compiled', 0)} compiled, {total.get('loaded', 0)} loaded from "
            f"{os.environ['NANOSPEC_COMPILE_CACHE']}): {total.get('xla_s', 0):.0f} s in XLA, "
            f"{total.get('trace_s', 0) + total.get('lower_s', 0):.0f} s tracing and lowering"
        )
        by = sorted(total.get("xla_by_function", {}).items(), key=lambda kv: -kv[1][1])
        if by:  # which jitted functions those XLA seconds went to
            top = ", ".join(f"{name} {n}× {s:.0f} s" for name, (n, s) in by[:8])
            terminalreporter.write_line(f"XLA's seconds by function: {top}")


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Tokenizer:
    return Tokenizer.train(TINY_TEXT, vocab_size=300)


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    """(cfg, graphdef, params) of an untrained 2-layer model over the tiny tokenizer."""
    cfg = ModelConfig.tiny(vocab_size=tiny_tokenizer.vocab_size, n_ctx=64)
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(0)))
    return cfg, graphdef, params


@pytest.fixture
def tiny_ckpt_dir(tmp_path, tiny_tokenizer, tiny_model) -> Path:
    """A checkpoints/ folder shaped like the shipped one: tokenizer, target and draft, MANIFEST."""
    cfg, graphdef, params = tiny_model
    tiny_tokenizer.save(tmp_path / "tokenizer.json")
    record_file(tmp_path, "tokenizer.json", {"vocab_size": tiny_tokenizer.vocab_size})
    for name in ("target", "draft"):
        named = ModelConfig.from_dict({**cfg.to_dict(), "name": name})
        save_model(tmp_path, named, params, {"note": "untrained test model"})
    for kind in KINDS:  # Medusa, EAGLE and MTP heads on the tiny target
        hc = HeadConfig.for_target(kind, cfg)
        save_head(tmp_path, hc, nnx.split(build(hc))[1], {"note": "untrained test head"})
    return tmp_path
