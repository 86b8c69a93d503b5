"""Token-tree rounds traced: the same tokens as the fused tree loop, and verdicts that follow
the walk (known answers for the verdict rule, invariants on real traced rounds)."""

import doctest

import pytest

import nanospec.trees.trace
from nanospec.decode import Bundle, decode
from nanospec.trees.tree import Tree

PROMPT = "The capital of"


def test_doctests():
    assert doctest.testmod(nanospec.trees.trace).failed == 0


def test_verdicts_of_a_walk_that_stopped_halfway():
    # 2,2 tree: root -> {1, 2}; 1 -> {3, 4}; 2 -> {5, 6}. Node 2 accepted after 1 was
    # rejected; then both of node 2's children were tried and rejected.
    tree = Tree.from_branching((2, 2))
    verdicts = nanospec.trees.trace.tree_verdicts(tree.parents, [0, 2], 1, tree.children.tolist())
    assert verdicts == ["root", "reject", "accept", "skip", "skip", "reject", "reject"]


@pytest.fixture
def bundle(tiny_ckpt_dir):
    return Bundle.load(tiny_ckpt_dir, ["target", "draft", "medusa"])


@pytest.mark.parametrize("method,top", [("draft", False), ("medusa", True)])
def test_traced_tree_rounds_emit_what_the_fused_tree_loop_emits(bundle, method, top):
    tree = Tree.from_branching((2, 2, 1))
    kw = dict(method=method, temperature=1.0, max_new=12, seed=4, tree=tree, top=top)
    fused, traced = decode(bundle, PROMPT, **kw), decode(bundle, PROMPT, **kw, with_events=True)
    assert traced.tokens == fused.tokens
    rounds = [e for e in traced.events if e["type"] == "tree"]
    ends = [e for e in traced.events if e["type"] == "round_end"]
    assert rounds and len(rounds) == len(ends)
    for r, end in zip(rounds, ends):
        on_path = [n["node"] for n in r["nodes"] if n["verdict"] == "accept"]
        assert on_path == r["path"][1:] and len(on_path) == end["accepted"]
        assert len(r["nodes"]) == tree.size - 1 and end["drafted"] == tree.size - 1
        # the path's tokens are what was emitted, then the resampled or bonus token
        path_tokens = [n["token"] for n in r["nodes"] if n["verdict"] == "accept"]
        assert end["emitted"][: len(path_tokens)] == path_tokens[: len(end["emitted"])]
