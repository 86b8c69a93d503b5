"""How the modules depend on one another, read from their source (every `import`, the ones
inside functions included), and what importing them costs.

The layers point one way (docs/design.md §2):

    core (the loops, drafters, methods: ssd, trees, heads)  <-  serving, measure, load  <-  apps

where the apps are the command line (nanospec/cli/), the course's tools (exercises, training,
teach, slides) and the visualiser (viz/). So the core imports neither serving, measurement
(measure/, load/) nor an app; serving and measurement import no app, and serving no
measurement; and the
autoregressive baseline (generate.py) does not import the speculative loop it is the
baseline of.

Importing a module starts no JAX backend (no arrays built at import time): a learner's
`import nanospec...` is instant and picks no device before they choose one.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = (
    "nanospec.cli",
    "nanospec.exercises",
    "nanospec.training",
    "nanospec.teach",
    "nanospec.slides",
    "nanospec.__main__",
    "viz",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, set[str]]:
    """{module: the nanospec and viz modules it imports (`from a import b`: a and a.b)}."""
    graph = {}
    for path in sorted([*ROOT.glob("nanospec/**/*.py"), *ROOT.glob("viz/**/*.py")]):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module_name(path)] = {m for m in found if m.split(".")[0] in ("nanospec", "viz")}
    return graph


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> str:
    if within(module, *APPS):
        return "app"
    if within(module, "nanospec.serving"):
        return "serving"
    if within(module, "nanospec.measure", "nanospec.load"):
        return "measure"
    return "core"


# (importer's layer, imported layer) pairs that point the wrong way
WRONG = {
    ("core", "serving"),
    ("core", "measure"),
    ("core", "app"),
    ("serving", "app"),
    ("measure", "app"),
    ("serving", "measure"),
}


def test_the_layers_point_one_way():
    graph = modules()
    assert len(graph) > 60 and "nanospec.cli" in graph and "nanospec.serving.engine" in graph
    wrong = sorted(
        f"{m} ({layer(m)}) imports {t} ({layer(t)})"
        for m, targets in graph.items()
        for t in targets
        if (layer(m), layer(t)) in WRONG
    )
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
    assert not {t for t in graph["nanospec.generate"] if within(t, "nanospec.speculative")}


def test_the_check_catches_an_arrow_the_wrong_way():
    assert ("core", "measure") in WRONG and layer("nanospec.decode") == "core"
    assert layer("nanospec.measure.samples") == "measure" and layer("nanospec.cli.args") == "app"
    assert layer("nanospec.serving.engine") == "serving" and layer("viz.app") == "app"


def test_importing_any_module_starts_no_jax_backend():
    """Every module imported in turn, in a fresh process; after each, no backend is up."""
    names = sorted(m for m in modules() if not within(m, "nanospec.__main__"))
    script = (
        "import importlib, sys\n"
        "from jax._src import xla_bridge\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "    if xla_bridge._backends:\n"
        "        sys.exit(f'importing {name} started a JAX backend')\n"
        "print('imported', len(" + repr(names) + "))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"imported {len(names)}" in done.stdout
