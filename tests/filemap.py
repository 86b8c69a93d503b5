"""The file maps, made from each module's first docstring line: `python -m tests.filemap`.

Three maps list modules with what they do: docs/design.md §9 (every module of nanospec/ and
viz/), the README's short list, and viz/__init__.py's. The order of each map, and which
entries the README keeps, are the author's; each entry's words are the module's own first
docstring line (a package's: its __init__.py's), so a map cannot drift from the code.
`python -m tests.filemap` rewrites the maps in place; tests/test_filemap.py fails while one
is out of date, or while a module is missing from the full map.
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def summary(path: Path) -> str:
    """The first line of a module's docstring (a package directory: its __init__.py's)."""
    if path.is_dir():
        path = path / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    if not doc:
        raise ValueError(f"{path.relative_to(ROOT)} has no docstring to put in the file map")
    return doc.strip().splitlines()[0].strip()


def entry(indent: str, name: str, column: int, path: Path) -> str:
    """One map line: the name padded to `column`, then the module's summary."""
    head = f"{indent}{name}"
    return f"{head:<{column - 1}} {summary(path)}"


def design_map(text: str) -> str:
    """docs/design.md with §9's entries under nanospec/ and viz/ made from the modules."""
    start = text.index("## 9. Every file")
    block = text.index("```\n", start) + 4
    end = text.index("```", block)
    out, base = [], None
    for line in text[block:end].splitlines():
        top = re.match(r"^(\S+/)\s", line)
        if top:
            base = top.group(1) if top.group(1) in ("nanospec/", "viz/") else None
        elif not line.startswith(" "):
            base = None
        name = re.match(r"^  (\S+\.py)\s", line)
        if base and name:
            line = entry("  ", name.group(1), 26, ROOT / base / name.group(1))
        out.append(line)
    return text[:block] + "\n".join(out) + "\n" + text[end:]


def readme_map(text: str) -> str:
    """The README's file list with each module's or package's summary."""
    start = text.index("## Files")
    block = text.index("```\n", start) + 4
    end = text.index("```", block)
    out = []
    for line in text[block:end].splitlines():
        name = re.match(r"^((?:nanospec|viz)/(?:\S*?(?:\.py|/))?)\s", line)
        if name:
            line = entry("", name.group(1), 30, ROOT / name.group(1))
        out.append(line)
    return text[:block] + "\n".join(out) + "\n" + text[end:]


def viz_map(text: str) -> str:
    """viz/__init__.py with its map's entries made from the modules."""
    out = []
    for line in text.splitlines():
        name = re.match(r"^    (\w+\.py)\s", line)
        if name:
            line = entry("    ", name.group(1), 21, ROOT / "viz" / name.group(1))
        out.append(line)
    return "\n".join(out) + "\n"


MAPS = {"docs/design.md": design_map, "README.md": readme_map, "viz/__init__.py": viz_map}


def missing() -> list[str]:
    """Modules of nanospec/ and viz/ that docs/design.md §9 does not list (packages' own
    __init__.py aside: the map lists the package)."""
    text = (ROOT / "docs/design.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^  (\S+\.py)\s", text, flags=re.M))
    return [
        str(p.relative_to(ROOT))
        for base in ("nanospec", "viz")
        for p in sorted((ROOT / base).rglob("*.py"))
        if p.name != "__init__.py" and str(p.relative_to(ROOT / base)) not in listed
    ]


def main() -> int:
    for name, render in MAPS.items():
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {name}")
    for module in missing():
        print(f"{module} is not in docs/design.md §9: add a line for it where it belongs")
    return 1 if missing() else 0


if __name__ == "__main__":
    sys.exit(main())
