"""The layering docs/design.md fixes: nanospec never imports textual or viz; viz consumes events.

Checked in fresh interpreters, because within the test session other tests have long since
imported everything.
"""

import re
import subprocess
import sys
from pathlib import Path

VIZ = Path(__file__).resolve().parents[2] / "viz"


def fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_importing_every_nanospec_module_loads_neither_textual_nor_viz():
    code = (
        "import importlib, pkgutil, sys, nanospec\n"
        "names = [m.name for m in pkgutil.walk_packages(nanospec.__path__, 'nanospec.')]\n"
        "assert len(names) > 10, names\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'viz'))\n"
        "assert not bad, bad\n"
    )
    result = fresh(code)
    assert result.returncode == 0, result.stderr


def test_registering_the_demo_command_stays_cheap():
    """Every `nanospec` command loads the demo's entry point; that must not pull in the UI or JAX."""
    code = (
        "import sys\n"
        "from nanospec.cli import build_parser\n"
        "parser = build_parser()\n"
        "assert parser.parse_args(['demo', '--gamma', '3']).gamma == 3\n"
        "heavy = sorted(m for m in ('textual', 'jax') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = fresh(code)
    assert result.returncode == 0, result.stderr


def test_only_the_live_producer_touches_the_loop():
    """viz reads events; the files that import the loop (or JAX) are the producers: live.py,
    and race_timing.py, with which race mode times the untraced loop end to end."""
    loop = re.compile(
        r"^\s*(from|import)\s+(jax|nanospec\.(speculative|drafters|verify|model|"
        r"sampling|generate|decode))\b",
        re.MULTILINE,
    )
    importers = sorted(
        p.name for p in VIZ.glob("*.py") if loop.search(p.read_text(encoding="utf-8"))
    )
    # cli.py: Bundle.load, inside the live branches only
    assert importers == ["cli.py", "live.py", "race_timing.py"]
