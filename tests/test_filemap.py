"""The file maps are made from the modules' own first docstring lines (tests/filemap.py)."""

import pytest

from tests.filemap import MAPS, ROOT, missing, summary


@pytest.mark.parametrize("name", MAPS)
def test_the_file_map_is_current(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert MAPS[name](text) == text, (
        f"{name}'s file map is out of date: run python -m tests.filemap"
    )


def test_every_module_is_in_the_full_map():
    assert missing() == [], "add these to docs/design.md §9, then run python -m tests.filemap"


def test_a_stale_entry_is_caught():
    text = (ROOT / "viz/__init__.py").read_text(encoding="utf-8")
    stale = text.replace(summary(ROOT / "viz/app.py"), "the App, as it was last year", 1)
    assert stale != text and MAPS["viz/__init__.py"](stale) == text


def test_every_summary_is_one_full_line():
    for base in ("nanospec", "viz"):
        for path in (ROOT / base).rglob("*.py"):
            if path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip():
                continue
            line = summary(path)
            assert line.endswith((".", ":")) and len(line) <= 92, (path, line)
