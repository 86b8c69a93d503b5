"""A compilation cache on disk, so that a repeated command does not compile again.

Every program nanospec runs is compiled by XLA first (aot.py): on a 2-core CPU that is several
seconds per `nanospec generate`, more than the generation itself. JAX can keep each compiled
program on disk, keyed by the program, its shapes and the backend, and load it the next time
instead of compiling. `enable()` turns that on for every nanospec command:

    NANOSPEC_COMPILE_CACHE unset     $XDG_CACHE_HOME/nanospec/xla (or ~/.cache/nanospec/xla)
    NANOSPEC_COMPILE_CACHE=DIR       that folder
    NANOSPEC_COMPILE_CACHE=off       no disk cache: compile afresh every time

It must run before JAX compiles anything. It sets JAX's own environment variables, so a command
that never imports JAX (replaying a trace) still never imports it; if JAX is already loaded
(a test calling `nanospec.cli.main`), it updates JAX's configuration instead. Every program is
kept, however quick to compile (JAX's default keeps only those over a second).

JAX runs whatever it finds in the cache: keep the folder your own (the default is in your home).

What this file deliberately leaves out: evicting old entries (delete the folder to start over).
"""

import os
import sys
from pathlib import Path

ENV = "NANOSPEC_COMPILE_CACHE"
OFF = ("off", "0", "no", "false", "none")
# JAX's options (each is also read from its upper-case environment variable when JAX loads).
OPTIONS = {
    "jax_compilation_cache_dir": None,  # the folder, filled in by enable()
    "jax_persistent_cache_min_compile_time_secs": 0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}


def cache_dir(environ=os.environ) -> Path | None:
    """The folder the cache lives in, or None when NANOSPEC_COMPILE_CACHE turns it off.

    >>> cache_dir({"NANOSPEC_COMPILE_CACHE": "off"}) is None
    True
    >>> cache_dir({"XDG_CACHE_HOME": "/tmp/c"})
    PosixPath('/tmp/c/nanospec/xla')
    """
    value = environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in OFF else Path(value).expanduser()
    base = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "nanospec" / "xla"


def enable() -> Path | None:
    """Point JAX's compilation cache at `cache_dir()` (nothing when it is off); returns it."""
    folder = cache_dir()
    if folder is None:
        return None
    options = {**OPTIONS, "jax_compilation_cache_dir": str(folder)}
    for name, value in options.items():
        os.environ[name.upper()] = str(value)
    if "jax" in sys.modules:
        import jax

        for name, value in options.items():
            jax.config.update(name, value)
    return folder
