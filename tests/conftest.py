"""Shared fixtures: tiny models built in seconds, so only shipped-checkpoint tests load weights."""

import gc
import os
from pathlib import Path

import jax
import pytest
from flax import nnx

from nanospec import aot
from nanospec.checkpoint import record_file, save_model
from nanospec.heads.modules import KINDS, HeadConfig, build, save_head
from nanospec.model import GPT, ModelConfig
from nanospec.tokenizer import Tokenizer

# The suite compiles afresh and never writes the user's compilation cache (compile_cache.py);
# tests/test_compile_cache.py gives its own commands a cache of their own.
os.environ["NANOSPEC_COMPILE_CACHE"] = "off"

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "checkpoints"

TINY_TEXT = [
    "The capital of France is Paris. The capital of Spain is Madrid.",
    "Repeat after me: the quick brown fox. The quick brown fox.",
    "def capital_of(country):\n    return capitals[country]\n",
]


def pytest_collection_modifyitems(config, items):
    """The slow tests first (stable: file order within each group), so that the workers of
    `make test` (pytest-xdist) finish on short tests instead of one waiting out a long one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# aot.py's table is emptied only past this many memory mappings (Linux allows 65,530), so
# later modules reuse the shipped models' programs that earlier ones compiled.
MAPPINGS_HIGH = 30_000


def _mappings() -> int:
    """This process's memory mappings (0 where there is no /proc)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop JAX's compiled programs after each test module, and aot.py's when they get many.

    subtle: XLA's CPU backend maps memory for every executable it compiles (a decode program
    holds 500-1,300 mappings), and one process running the whole suite compiles well over a
    thousand; at Linux's default limit of 65,530 mappings per process, compiling then crashes
    inside XLA (a segfault or an abort, not an exception; jax-ml/jax#27201). aot.py's table
    holds up to aot.KEEP programs that jax.clear_caches() does not reach. Tests that count
    compilations do so within one test.
    """
    yield
    jax.clear_caches()
    if _mappings() > MAPPINGS_HIGH:
        aot.clear()
    gc.collect()


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
