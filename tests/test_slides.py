"""`make figures` (nanospec/slides.py): one SVG per key idea, for an instructor's slides."""

import sys
import xml.dom.minidom

from nanospec import slides

NAMES = {"verify_block", "residual", "tree_mask", "eagle_pairs", "best_gamma", "crossover"}


def test_make_figures_writes_one_svg_per_key_idea(tmp_path):
    written = slides.make_all(tmp_path)
    assert {p.stem for p in written} == NAMES
    for path in written:
        assert xml.dom.minidom.parse(str(path)).documentElement.tagName == "svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.svg" for n in NAMES)


def test_the_figures_say_what_the_code_does(tmp_path):
    """The labels come from the library: the residual's rejection chance is lesson 04's
    1 − Σ min(p, q) = 0.45, and the tree's mask is Tree.ancestor_mask."""
    slides.make_all(tmp_path)
    assert "0.45" in (tmp_path / "residual.svg").read_text()
    tree = (tmp_path / "tree_mask.svg").read_text()
    assert "branching (2, 2)" in tree


def test_without_matplotlib_it_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert slides.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs matplotlib" in err
    assert not list(tmp_path.iterdir())
