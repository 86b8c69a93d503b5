"""Token trees through the whole loop (trees/loop.py): a chain-shaped tree IS the chain,
greedy trees reproduce the target, and only the accepted path survives in the cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nanospec.aot import programs_compiled
from nanospec.cache import rows
from nanospec.drafters import DraftModel, PromptLookup
from nanospec.errors import UserError
from nanospec.generate import generate, pad_prompts
from nanospec.model import forward
from nanospec.rounds import _fused, generated
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator
from nanospec.trees.loop import TreeSpeculator
from nanospec.trees.tree import Tree
from tests.statistical.laws import PROMPT, PROMPT_B, tiny_drafters, tiny_pair

PROMPTS = [PROMPT, PROMPT_B, [2, 2, 2, 1]]


def tree_generate(
    g, p, cfg, drafter, dparams, tokens, lengths, key, sp, max_new, eos_id, tree, top
):
    """The fused tree loop's (state, stats)."""
    spec = TreeSpeculator(graphdef=g, cfg=cfg, drafter=drafter, tree=tree, top=top, eos_id=eos_id)
    return spec.run(p, dparams, tokens, lengths, key, sp, max_new)


def check_tree(cfg, drafter, lengths, max_new, tree):
    TreeSpeculator(graphdef=None, cfg=cfg, drafter=drafter, tree=tree, eos_id=-1).check(
        lengths, max_new
    )


M = 6  # the tiny models hold 16 tokens: a 7-node tree needs 7 free slots per round


@pytest.fixture(scope="module")
def setup():
    target, draft = tiny_pair()
    drafters = {"draft": (DraftModel(draft[1], draft[0]), draft[2])}
    drafters.update({k: v for k, v in tiny_drafters(target).items() if k != "ngram"})
    tokens, lengths = pad_prompts(PROMPTS, target[0].n_ctx)
    return target, drafters, tokens, lengths


@pytest.mark.parametrize("name", ["draft", "medusa", "eagle", "mtp"])
def test_a_chain_shaped_tree_is_the_chain(setup, name):
    """Greedy, so both are deterministic: same tokens AND the same acceptance histogram."""
    (cfg, g, p), drafters, tokens, lengths = setup
    drafter, dparams = drafters[name]
    chain, chain_stats = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=3, eos_id=-1).run(
        p, dparams, tokens, lengths, jax.random.key(0), GREEDY, M
    )
    tree, tree_stats = tree_generate(
        g,
        p,
        cfg,
        drafter,
        dparams,
        tokens,
        lengths,
        jax.random.key(0),
        GREEDY,
        M,
        -1,
        Tree.chain(3),
        True,
    )
    assert generated(tree, lengths) == generated(chain, lengths)
    np.testing.assert_array_equal(tree_stats.hist, chain_stats.hist)


def tree_cases():
    """Each drafter with top-k siblings on a (2, 2) tree and sampled siblings on (2, 1, 1) in
    `make test`; the two other pairings are the same code on another tree: `make test-all`."""
    repeat = pytest.mark.repeat(reason="the same siblings' rule on another tree")
    return [
        pytest.param(
            name,
            widths,
            top,
            marks=repeat if top == (widths == (2, 1, 1)) else (),
            id=f"{name}-{'top' if top else 'sample'}-{'x'.join(map(str, widths))}",
        )
        for name in ("draft", "medusa", "eagle", "mtp")
        for top in (True, False)
        for widths in ((2, 2), (2, 1, 1))
    ]


@pytest.mark.parametrize("name,widths,top", tree_cases())
def test_greedy_trees_reproduce_the_target(setup, name, widths, top):
    (cfg, g, p), drafters, tokens, lengths = setup
    drafter, dparams = drafters[name]
    ar, _ = generate(g, p, cfg, tokens, lengths, jax.random.key(0), GREEDY, M, -1)
    state, _ = tree_generate(
        g,
        p,
        cfg,
        drafter,
        dparams,
        tokens,
        lengths,
        jax.random.key(1),
        GREEDY,
        M,
        -1,
        Tree.from_branching(widths),
        top,
    )
    assert generated(state, lengths) == ar


def test_only_the_accepted_path_survives_in_the_cache(setup):
    """After sampled tree rounds, the target's cache equals a fresh pass over the committed
    text: every accepted node's K/V was moved to its position, nothing else is visible.

    (A row that stopped because the context was full may have junk written over its last
    slots by later rounds of other rows — harmless, it never runs again; the sizes here keep
    every row clear of that.)"""
    (cfg, g, p), drafters, tokens, lengths = setup
    drafter, dparams = drafters["draft"]
    state, stats = tree_generate(
        g,
        p,
        cfg,
        drafter,
        dparams,
        tokens,
        lengths,
        jax.random.key(3),
        SamplingParams.make(1.0),
        M,
        -1,
        Tree.from_branching((3, 1)),
        False,
    )
    assert int(jnp.sum(stats.hist[:, 1:])) > 0  # some rounds did accept tree nodes
    for b in range(len(PROMPTS)):
        n = int(state.cache.length[b])
        assert n == int(state.length[b]) - 1
        _, _, fresh = forward(g, p, state.seq[b : b + 1, :n], jnp.arange(n)[None])
        for layer in range(cfg.n_layer):
            for mine, theirs in ((state.cache.k, fresh.k), (state.cache.v, fresh.v)):
                row = rows(mine[layer], len(PROMPTS))[b]  # (H, S, Dh)
                np.testing.assert_allclose(row[:, :n], theirs[layer], atol=1e-5)


def test_changing_the_temperature_does_not_recompile(setup, compile_afresh):
    (cfg, g, p), drafters, tokens, lengths = setup
    drafter, dparams = drafters["medusa"]
    tree = Tree.from_branching((2, 1))
    run = lambda t: tree_generate(
        g,
        p,
        cfg,
        drafter,
        dparams,
        tokens,
        lengths,
        jax.random.key(0),
        SamplingParams.make(t),
        M,
        -1,
        tree,
        True,
    )
    run(1.0)
    before = programs_compiled(_fused)
    run(0.5)
    run(0.0)
    assert programs_compiled(_fused) == before


def test_trees_refuse_what_they_cannot_do(setup):
    (cfg, g, p), drafters, tokens, lengths = setup
    with pytest.raises(UserError, match="single continuation"):
        check_tree(cfg, PromptLookup(5), lengths, M, Tree.chain(2))
    with pytest.raises(UserError, match="at most 3 deep"):  # the tiny heads have depth 3
        check_tree(cfg, drafters["medusa"][0], lengths, M, Tree.chain(4))
    with pytest.raises(UserError, match="no room"):
        check_tree(cfg, drafters["draft"][0], [cfg.n_ctx], M, Tree.from_branching((2, 2)))


@pytest.mark.parametrize("name", ["draft", "medusa", "eagle", "mtp"])
def test_top_k_siblings_are_the_drafters_real_guesses_whatever_the_sampling(setup, name):
    """Top-k siblings are point masses, so they may be chosen by any rule; they are ranked by
    the drafter's law at T = 1. Ranked by the sampling law, greedy decoding (a one-hot law)
    made every second sibling an arbitrary zero-probability token, and trees accepted no more
    than chains. So: the same siblings greedy, at T = 1 and at T = 0.7 with top-k 1."""
    (cfg, g, p), drafters, tokens, lengths = setup
    drafter, dparams = drafters[name]
    tree = Tree.from_branching((3, 1))
    spec = TreeSpeculator(graphdef=g, cfg=cfg, drafter=drafter, tree=tree, top=True, eos_id=-1)
    state = jax.jit(spec.prefill)(p, dparams, tokens, lengths, jax.random.key(0))
    draft = jax.jit(spec.draft)  # one program for the three settings (traced), not one per op
    grown = {
        t: draft(dparams, state, sp)[0].tokens
        for t, sp in (
            ("greedy", GREEDY),
            ("T1", SamplingParams.make(1.0)),
            ("cut", SamplingParams.make(0.7, 1, 1.0)),
        )
    }
    np.testing.assert_array_equal(grown["greedy"], grown["T1"])
    np.testing.assert_array_equal(grown["cut"], grown["T1"])
    first = np.asarray(grown["greedy"])[:, 1:4]  # the root's three children
    assert all(len(set(row)) == 3 for row in first.tolist())
