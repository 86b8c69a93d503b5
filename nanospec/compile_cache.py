"""A compilation cache on disk, so that a repeated command does not compile again.

Every program nanospec runs is compiled by XLA first (aot.py): on a 2-core CPU that is several
seconds per `nanospec generate`, more than the generation itself. JAX can keep each compiled
program on disk, keyed by the program, its shapes and the backend, and load it the next time
instead of compiling. `enable()` turns that on for every nanospec command:

    NANOSPEC_COMPILE_CACHE unset     $XDG_CACHE_HOME/nanospec/xla (or ~/.cache/nanospec/xla)
    NANOSPEC_COMPILE_CACHE=DIR       that folder
    NANOSPEC_COMPILE_CACHE=off       no disk cache: compile afresh every time

JAX locks the folder while it reads or writes an entry (the size limit below turns that on), so
processes that share one — a server and a command beside it — never read a half-written
program; past 4 GiB the least recently used entries are dropped. JAX_COMPILATION_CACHE_MAX_SIZE,
when set, wins: the test suite sets -1 (no limit, no lock), because JAX looks at every entry
of the folder (a stat and a read each) on every write it makes under a limit, which in a cold
suite's thousands of programs cost more than the compiling (tests/conftest.py); a reader that
finds a half-written entry gets JAX's warning and compiles the program itself.

It must run before JAX compiles anything. It sets JAX's own environment variables, so a command
that never imports JAX (replaying a trace) still never imports it; if JAX is already loaded
(a test calling `nanospec.cli.main`), it updates JAX's configuration instead. Every program is
kept, however quick to compile (JAX's default keeps only those over a second).

JAX runs whatever it finds in the cache: keep the folder your own (the default is in your home).

With NANOSPEC_COMPILE_LOG=DIR, each process keeps count of its compiling (JAX's own timing
events) in DIR/<pid>.json, rewritten after every program, from the moment JAX is loaded and
`enable()` or aot.py's import runs: `make test` sums the files of all its processes into its
last line (`summarize`).

What this file deliberately leaves out: a cache shared between machines.
"""

import json
import os
import sys
from pathlib import Path

from nanospec.fileio import atomic_write

ENV = "NANOSPEC_COMPILE_CACHE"
LOG_ENV = "NANOSPEC_COMPILE_LOG"
OFF = ("off", "0", "no", "false", "none")
# JAX's options (each is also read from its upper-case environment variable when JAX loads).
OPTIONS = {
    "jax_compilation_cache_dir": None,  # the folder, filled in by enable()
    "jax_persistent_cache_min_compile_time_secs": 0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
    "jax_compilation_cache_max_size": 4 << 30,  # bytes; a limit makes JAX lock the folder
}
# JAX's timing events, and what `summarize` calls them.
SECONDS = {
    "/jax/core/compile/backend_compile_duration": "xla_s",  # compiled, or loaded from the cache
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",  # Python traced into a jaxpr
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",  # jaxpr lowered for XLA
}
COUNTS = {
    "/jax/compilation_cache/cache_hits": "loaded",  # programs found in the disk cache
    "/jax/compilation_cache/cache_misses": "compiled",  # programs XLA compiled afresh
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
    options = {**OPTIONS, "jax_compilation_cache_dir": str(folder)} if folder else {}
    limit = os.environ.get("JAX_COMPILATION_CACHE_MAX_SIZE")
    if options and limit:
        options["jax_compilation_cache_max_size"] = int(limit)
    for name, value in options.items():
        os.environ[name.upper()] = str(value)
    if "jax" in sys.modules:
        import jax

        for name, value in options.items():
            jax.config.update(name, value)
        log_if_asked()  # with the cache off too: the compiling is still counted
    return folder


def log_if_asked() -> None:
    """Start `log_to` NANOSPEC_COMPILE_LOG's folder, if it is set. Called once JAX is loaded
    (here, or by aot.py's import): logging never loads JAX itself (replaying a trace never
    imports it)."""
    if os.environ.get(LOG_ENV):
        log_to(Path(os.environ[LOG_ENV]))


_totals: dict = {}


def log_to(folder: Path) -> None:
    """Sum this process's compile events into folder/<pid>.json (once per process)."""
    if _totals:
        return
    import jax

    _totals.update({name: 0.0 for name in SECONDS.values()}, programs=0)
    _totals.update({name: 0 for name in COUNTS.values()}, xla_by_function={})
    path = folder / f"{os.getpid()}.json"

    def timed(event: str, seconds: float, fun_name: str = "?", **_):
        if event in SECONDS:
            _totals[SECONDS[event]] += seconds
            if SECONDS[event] == "xla_s":  # and which function's program it was
                _totals["programs"] += 1
                n, s = _totals["xla_by_function"].get(fun_name, (0, 0.0))
                _totals["xla_by_function"][fun_name] = (n + 1, s + seconds)
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(_totals))

    def counted(event: str, **_):
        if event in COUNTS:
            _totals[COUNTS[event]] += 1

    jax.monitoring.register_event_duration_secs_listener(timed)
    jax.monitoring.register_event_listener(counted)


def seconds_so_far() -> float:
    """This process's compiling so far (tracing, lowering and XLA), once `log_to` runs."""
    return sum(_totals.get(name, 0.0) for name in SECONDS.values())


def summarize(folder: Path) -> dict:
    """Every process's totals in `folder`, added up, with the number of processes.
    `xla_by_function` maps a jitted function's name to [programs, XLA seconds].

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> for pid, s in ((1, 2.5), (2, 1.0)):
    ...     by = {"_loop": [1, s - 0.5], "add": [2, 0.5]}
    ...     f = {"xla_s": s, "programs": 3, "xla_by_function": by}
    ...     _ = (d / f"{pid}.json").write_text(json.dumps(f))
    >>> summarize(d)
    {'xla_s': 3.5, 'programs': 6, 'xla_by_function': {'_loop': [2, 2.5], 'add': [4, 1.0]}, 'processes': 2}
    """
    total: dict = {}
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    for f in files:
        for name, value in json.loads(f.read_text(encoding="utf-8")).items():
            if isinstance(value, dict):
                into = total.setdefault(name, {})
                for key, (n, s) in value.items():
                    m, t = into.get(key, (0, 0.0))
                    into[key] = [m + n, t + s]
            else:
                total[name] = total.get(name, 0) + value
    return {**total, "processes": len(files)}
