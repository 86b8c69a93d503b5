"""The code's shape, checked by reading it (ast; nothing is imported or run).

Every .py file under nanospec/ and viz/: at most MAX_FILE_LINES lines, every function at most
MAX_FUNCTION_LINES statements and comments (ruff format chooses how many lines a statement
takes, so a function is measured by what it says, not by how its calls wrap); no module imports another's private (single-underscore) names; and no
drafter is asked what it can do by hasattr — what a drafter offers is its declared interface.
Tests (this folder) may reach into private names; they are not checked. And the README, the
learner's front door: at most 12 KB, and every file it links to is in the repository.
"""

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("nanospec", "viz")
MAX_FILE_LINES = 400  # STYLE.md: one concept a file, readable in one sitting (≈300–400 lines)
MAX_FUNCTION_LINES = 50  # lines that start a statement or hold a comment
MAX_README_BYTES = 12 * 1024


def sources() -> list[Path]:
    """Every .py file of the checked packages."""
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


@cache
def files() -> list[tuple[str, str, ast.Module]]:
    """(path relative to the repository, text, syntax tree) of every checked file."""
    out = []
    for path in sources():
        text = path.read_text(encoding="utf-8")
        out.append((path.relative_to(REPO).as_posix(), text, ast.parse(text, filename=str(path))))
    return out


def report(what: str, offenders: list[str]) -> str:
    """An assertion message naming every offender, one a line."""
    return f"{len(offenders)} {what}:\n  " + "\n  ".join(offenders)


def test_the_packages_are_found():
    names = {name for name, _, _ in files()}
    assert "nanospec/cli/__init__.py" in names and any(n.startswith("viz/") for n in names), sorted(
        names
    )


def test_no_file_is_longer_than_the_limit():
    offenders = [
        f"{name}: {len(text.splitlines())} lines"
        for name, text, _ in files()
        if len(text.splitlines()) > MAX_FILE_LINES
    ]
    assert not offenders, report(f"files over {MAX_FILE_LINES} lines", offenders)


def said_lines(text: str, tree: ast.Module) -> set[int]:
    """The lines on which a statement starts or a comment stands: what a function says."""
    starts = {node.lineno for node in ast.walk(tree) if isinstance(node, ast.stmt)}
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return starts | {t.start[0] for t in tokens if t.type == tokenize.COMMENT}


def test_no_function_is_longer_than_the_limit():
    offenders = []
    for name, text, tree in files():
        said = sorted(said_lines(text, tree))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = sum(node.lineno <= line <= node.end_lineno for line in said)
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not offenders, report(f"functions over {MAX_FUNCTION_LINES} lines", offenders)


def private_imports(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, module, name) of every `from nanospec/viz... import _name` (dunders allowed)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] in PACKAGES
        ):
            found += [
                (node.lineno, node.module, alias.name)
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_the_readme_is_short_and_its_links_resolve():
    readme = (REPO / "README.md").read_bytes()
    assert len(readme) <= MAX_README_BYTES, f"README.md is {len(readme):,} bytes, over 12 KB"
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme.decode("utf-8"))
    local = [t for t in targets if "://" not in t]
    assert local, "no relative links found: the pattern is broken"
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, report("README links to missing files", missing)


def test_no_module_imports_another_modules_private_names():
    offenders = [
        f"{name}:{line} from {module} import {imported}"
        for name, _, tree in files()
        for line, module, imported in private_imports(tree)
    ]
    assert not offenders, report("imports of private names", offenders)


def drafter_hasattr_calls(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, source) of every hasattr(x, ...) whose x is a name mentioning a drafter."""
    return [
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "hasattr"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and "drafter" in node.args[0].id.lower()
    ]


def test_no_drafter_is_probed_with_hasattr():
    offenders = [
        f"{name}:{line} {call}"
        for name, _, tree in files()
        for line, call in drafter_hasattr_calls(tree)
    ]
    assert not offenders, report("hasattr probes of a drafter", offenders)


@pytest.mark.parametrize(
    "source, found",
    [
        (
            "from nanospec.speculative import _fused, check_room",
            [(1, "nanospec.speculative", "_fused")],
        ),
        ("from viz.app import _Pane as P", [(1, "viz.app", "_Pane")]),
        ("from nanospec import __version__\nfrom jax import _src\nfrom . import _x", []),
    ],
)
def test_private_imports_are_recognised(source, found):
    assert private_imports(ast.parse(source)) == found


@pytest.mark.parametrize(
    "source, found",
    [
        ("hasattr(drafter, 'propose_tree')", [(1, "hasattr(drafter, 'propose_tree')")]),
        ("hasattr(self.drafter, 'x') or hasattr(tree, 'x') or getattr(drafter, 'x', None)", []),
        ("ok = hasattr(draft_model, 'x') + hasattr(Drafter, 'y')", [(1, "hasattr(Drafter, 'y')")]),
    ],
)
def test_drafter_probes_are_recognised(source, found):
    assert drafter_hasattr_calls(ast.parse(source)) == found
