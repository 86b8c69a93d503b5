"""The one fixture every power test shares: install a broken function into the real code."""

import jax
import pytest

from nanospec import aot


@pytest.fixture
def break_with(monkeypatch):
    """break_with(module, name, fn) replaces module.name by fn for one test.

    Every jit cache (and aot.py's programs) is cleared on the way in and out, so the loop is traced again with the
    broken function (and traced again without it afterwards).
    """

    def install(module, name, fn):
        jax.clear_caches()
        aot.clear()
        monkeypatch.setattr(module, name, fn)

    yield install
    monkeypatch.undo()
    jax.clear_caches()
    aot.clear()
