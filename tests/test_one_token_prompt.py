"""A one-token prompt (no start token before it) drafts as well as a longer one, by every method.

The draft model re-reads the last two committed tokens every round (drafters.DraftModel); a
one-token prompt has only one. Reading a "slot −1" for the missing one gave the draft NaN laws
in the first round, and for good: the NaN reached stale cache slots, and a stale slot's
0 · NaN leaks into every later query. The output stayed exact (the verify rule never accepts
from a NaN law) but nothing was ever accepted. The CLI and the server put <|endoftext|> first
(tokenizer.encode_prompt), so only callers of the loops with token ids met it.

Known answer: the first round's laws are the draft model's own laws over the prompt and the
drafts before, computed afresh without a cache (chains, trees, SSD's backup), in a batch
beside a longer prompt. Equivalence: every method in decode.METHODS, chains and trees, gives
the target's greedy text from one token; with a draft model identical to the target every
draft is accepted, in the loops and in the serving engine. Both layers of the tiny models
matter: with one layer the NaN never reached a second attention.
"""

from functools import cache, partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nanospec.decode import METHODS, Bundle, make_loop
from nanospec.drafters import DraftModel
from nanospec.generate import Decoder, pad_prompts
from nanospec.heads.drafters import DRAFTERS
from nanospec.heads.modules import KINDS, HeadConfig, build
from nanospec.model import forward
from nanospec.rounds import generated
from nanospec.sampling import GREEDY, SamplingParams, sampling_probs
from nanospec.serving.engine import Engine, Request
from nanospec.speculative import Speculator
from nanospec.ssd.loop import SSDSpeculator
from nanospec.trees.loop import TreeSpeculator
from nanospec.trees.tree import Tree
from tests.statistical.laws import PROMPT_B, tiny_pair

GAMMA = 3
TREE = Tree.from_branching((2, 2))
HOT = SamplingParams.make(1.0)


# -- known answer: the first round's laws -------------------------------------------------------


@partial(jax.jit, static_argnums=0)
def first_draft(loop, params, dparams, tokens, lengths, sp):
    """What `loop` drafts in its first round: a Proposal (a chain, SSD) or a Grown (a tree)."""
    state = jax.jit(loop.prefill)(params, dparams, tokens, lengths, jax.random.key(3))
    return jax.jit(loop.draft)(dparams, state, sp)[0]  # jitted: not a program per operation


def first_round(kind: str, target, draft):
    """(prompts, node tokens (B, N), node laws (B, N, V), parents (N,)) of the first round.

    A chain is a tree whose node i + 1 is draft x_{i+1}; node 0 is the last prompt token."""
    (cfg, g, p), (dcfg, dg, dp) = target, draft
    fixed = {"graphdef": g, "cfg": cfg, "drafter": DraftModel(dg, dcfg), "eos_id": -1}
    loop = {
        "chain": Speculator(**fixed, gamma=GAMMA),
        "ssd": SSDSpeculator(**fixed, gamma=GAMMA, fanout=(1,) * (GAMMA + 1)),
        "tree": TreeSpeculator(**fixed, tree=TREE, top=False),
    }[kind]
    prompts = [[PROMPT_B[0]], PROMPT_B]
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    drafted = first_draft(loop, p, dp, tokens, lengths, HOT)
    if kind == "tree":
        return prompts, drafted.tokens, drafted.node_q, np.asarray(TREE.parents)
    last = jnp.asarray([pr[-1] for pr in prompts])[:, None]
    nodes = jnp.concatenate([last, drafted.drafts], axis=1)  # (B, γ+1)
    laws = jnp.pad(drafted.q, ((0, 0), (1, 0), (0, 0)))  # node 0 (the root) has no law
    return prompts, nodes, laws, np.arange(-1, GAMMA)


@pytest.mark.parametrize("kind", ["chain", "tree", "ssd"])
def test_the_first_rounds_laws_are_the_draft_models_own_from_one_token(kind):
    """Node c's law is the draft model's law after the prompt and the drafted path to c's
    parent, recomputed from scratch; the one-token row and the three-token row alike."""
    target, draft = tiny_pair()
    prompts, nodes, laws, parents = first_round(kind, target, draft)
    _, dg, dp = draft
    nodes, laws = np.asarray(nodes), np.asarray(laws)
    assert np.isfinite(laws).all(), "the first round drafted from NaN laws"
    contexts, where = [], []  # every node's context, right-padded into one batch
    for b, prompt in enumerate(prompts):
        for c in range(1, len(parents)):
            path, a = [], parents[c]
            while a > 0:  # the drafted ancestors, nearest first; node 0 is the prompt's end
                path.insert(0, int(nodes[b, a]))
                a = parents[a]
            contexts.append(prompt + path)
            where.append((b, c))
    tokens, lengths = pad_prompts(contexts, draft[0].n_ctx)
    logits, _, _ = forward(
        dg, dp, tokens, jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    )
    expected = sampling_probs(logits[jnp.arange(len(contexts)), lengths - 1], HOT)  # (n, V)
    for (b, c), law in zip(where, np.asarray(expected)):
        np.testing.assert_allclose(
            laws[b, c], law, atol=2e-5, err_msg=f"row {b} (prompt {prompts[b]}), node {c}"
        )


# -- equivalence: every method, through the library's own registry ------------------------------


@pytest.fixture(scope="module")
def bundle(tiny_tokenizer, tiny_model):
    """The tiny target, a draft model that IS the target, and untrained heads on it."""
    cfg = tiny_model[0]
    models = {"target": tiny_model, "draft": tiny_model}
    for kind in KINDS:
        hc = HeadConfig.for_target(kind, cfg)
        models[kind] = (hc, *nnx.split(build(hc)))
    return Bundle(tiny_tokenizer, models)


ONE = [[40]]  # one token of the tiny tokenizer's vocabulary, nothing before it
MAX_NEW = 10


@pytest.fixture(scope="module")
def greedy_text(bundle):
    loop, _ = make_loop(bundle, "ar")
    cfg, _, params = bundle.models["target"]
    tokens, lengths = pad_prompts(ONE, cfg.n_ctx)
    state, _ = loop.run(params, (), tokens, lengths, jax.random.key(0), GREEDY, MAX_NEW)
    return generated(state, lengths)


def cases():
    """(method, tree or None) for every speculative method, chains and (where grown) trees."""
    chains = [(m, None) for m in METHODS if m != "ar"]
    return chains + [(m, TREE) for m in ("draft", *KINDS)]  # ngram and SSD draft no trees


@pytest.mark.parametrize(
    "method,tree", cases(), ids=[f"{m}-{'tree' if t else 'chain'}" for m, t in cases()]
)
def test_every_method_from_one_token_is_the_targets_greedy_text(bundle, greedy_text, method, tree):
    """Exact at T = 0 (compared with `ar`); and the draft model, identical to the target here,
    has every draft accepted in every round (a NaN law accepts none). The first round's laws
    themselves are checked above (draft model, SSD) and below (the heads), exactly."""
    cfg, _, params = bundle.models["target"]
    loop, dparams = make_loop(bundle, method, GAMMA, tree, top=False)
    tokens, lengths = pad_prompts(ONE, cfg.n_ctx)
    state, stats = loop.run(params, dparams, tokens, lengths, jax.random.key(1), GREEDY, MAX_NEW)
    assert generated(state, lengths) == greedy_text
    if method in ("draft", "ssd"):
        hist = np.asarray(stats.hist)[0]  # rounds that accepted 0, 1, ..., depth drafts
        assert hist[-1] > 0 and hist[:-1].sum() == 0, f"acceptance histogram {hist.tolist()}"


def test_the_engine_accepts_a_one_token_requests_drafts(bundle, greedy_text):
    """The serving engine runs the same drafter code: a one-token request beside a longer one."""
    params = bundle.models["target"][2]
    loop, dparams = make_loop(bundle, "draft", GAMMA)
    engine = Engine(loop, params, dparams, slots=2)
    engine.insert(Request(ONE[0], MAX_NEW, temperature=0.0))
    engine.insert(Request([40, 41, 42], MAX_NEW, temperature=0.0))
    got, drafted, accepted = [], 0, 0
    while engine.busy:
        for out in engine.step():
            if out.slot == 0:
                got += out.tokens
                drafted, accepted = drafted + out.drafted, accepted + out.accepted
    assert got == greedy_text[0]
    assert drafted > 0 and accepted == drafted


# -- known answer: the heads' first round from one token ----------------------------------------
#
# A head drafts from the target's features: Medusa and MTP from h_{L−2} (whose output predicted
# the last token y), EAGLE from its pairs (f_i, token i+1) up to L−2. A one-token prompt [t] has
# only h₀, whose output is the target's law p₁ of the next token. So its first round is the
# two-token prompt [t, x₁]'s round, behind a draft x₁ drawn from p₁ itself: below, both rows'
# laws are recomputed from a plain forward pass of the target and the heads' own modules.


def shaken_heads(kind: str, cfg, seed: int = 5):
    """A head with random weights (untrained Medusa heads are all alike: they would not tell
    which head drafted which token)."""
    hc = HeadConfig.for_target(kind, cfg)
    hg, hp = nnx.split(build(hc, seed=seed))
    noise = lambda x, k: x + 0.3 * jax.random.normal(k, x.shape)
    leaves, treedef = jax.tree.flatten(hp)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return hc, hg, jax.tree.unflatten(treedef, [noise(x, k) for x, k in zip(leaves, keys)])


@partial(jax.jit, static_argnames=("kind", "hg", "g"))  # one program per kind and length
def head_law(kind: str, hg, hp, g, p, prompt, path) -> jax.Array:
    """The law a head drafts the token after `prompt + path` (int arrays) from, in a round that
    starts after `prompt` (L = len(prompt) ≥ 2), recomputed without the drafter: (V,)."""
    heads, target = nnx.merge(hg, hp), nnx.merge(g, p)
    L, tokens = prompt.shape[0], prompt[None]
    _, hidden, _ = target(tokens, jnp.arange(L)[None])  # (1, L, C)
    law = lambda f: sampling_probs(f @ target.wte.embedding[...].T, HOT)[0]  # f (1, C)
    if kind == "medusa":  # head m + 1 reads ln_f(h_{L−2}) for the token m + 1 after y
        return law(heads(target.ln_f(hidden[:, L - 2]))[:, path.shape[0]])
    if kind == "mtp":  # module j reads the representation before it and token j (y first)
        h, out = hidden[:, L - 2], None
        for j, token in enumerate([prompt[-1], *path]):
            h, out = heads.layers[j](h, target.wte(token[None]))
        return law(out)
    # EAGLE: the real pairs (f_i, token i+1) for i ≤ L−2, then its own f̂ with each draft
    pairs = [target.ln_f(hidden[:, : L - 1]), target.wte(tokens[:, 1:])]
    f_hat, cache = heads(*pairs, jnp.arange(L - 1)[None], heads.empty_cache(1, 32))
    f_hat = f_hat[:, -1]  # (1, C)
    for j, token in enumerate(path):
        f_hat, cache = heads(
            f_hat[:, None], target.wte(token[None, None]), jnp.asarray([[L - 1 + j]]), cache
        )
        f_hat = f_hat[:, 0]
    return law(f_hat)


@cache  # both tests below read it: the first round once per head and shape
def head_first_round(kind: str, shape: str):
    """((g, p), (hg, hp), loop, dparams, prompts, nodes (B, N), laws (B, N, V), parents (N,))
    of the first round of a one-token prompt beside a longer one (as `first_round` above)."""
    target, _ = tiny_pair()
    cfg, g, p = target
    hc, hg, hp = shaken_heads(kind, cfg)
    drafter = DRAFTERS[kind](hg, hc, g)
    fixed = {"graphdef": g, "cfg": cfg, "drafter": drafter, "eos_id": -1}
    loop = (
        TreeSpeculator(**fixed, tree=TREE, top=False)
        if shape == "tree"
        else Speculator(**fixed, gamma=GAMMA)
    )
    prompts = [[PROMPT_B[0]], PROMPT_B]
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    dparams = drafter.prepare(hp, p)
    drafted = first_draft(loop, p, dparams, tokens, lengths, HOT)
    parts = (g, p), (hg, hp), loop, dparams, prompts
    if shape == "tree":
        return *parts, drafted.tokens, drafted.node_q, TREE.parents
    last = jnp.asarray([pr[-1] for pr in prompts])[:, None]
    nodes = jnp.concatenate([last, drafted.drafts], axis=1)  # (B, γ+1)
    laws = jnp.pad(drafted.q, ((0, 0), (1, 0), (0, 0)))
    return *parts, nodes, laws, np.arange(-1, GAMMA)


@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_one_token_prompts_first_round_is_the_two_token_prompts_behind_the_targets_draft(
    kind, shape
):
    """Node c's law, drafted after the prompt and the path to c's parent: for [t], the
    target's own law p₁ at the root, below it the law the head drafts from [t, x₁] (x₁ the
    root's child on the path); for the longer prompt, the head's law as ever."""
    (g, p), (hg, hp), _, _, prompts, nodes, laws, parents = head_first_round(kind, shape)
    nodes, laws = np.asarray(nodes), np.asarray(laws)
    logits, _, _ = forward(g, p, jnp.asarray([prompts[0]]), jnp.zeros((1, 1), jnp.int32))
    p1 = np.asarray(sampling_probs(logits[0, 0], HOT))
    ids = lambda xs: jnp.asarray(xs, jnp.int32)
    for b, prompt in enumerate(prompts):
        for c in range(1, len(parents)):
            path, a = [], parents[c]
            while a > 0:
                path.insert(0, int(nodes[b, a]))
                a = parents[a]
            if len(prompt) > 1:
                expected = head_law(kind, hg, hp, g, p, ids(prompt), ids(path))
            elif not path:
                expected = p1
            else:
                expected = head_law(kind, hg, hp, g, p, ids(prompt + path[:1]), ids(path[1:]))
            np.testing.assert_allclose(
                laws[b, c],
                expected,
                atol=2e-5,
                err_msg=f"{kind} {shape}: row {b}, node {c}, path {path}",
            )


@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_heads_greedy_text_from_one_token_is_the_targets(kind, shape):
    """The same loops, run at T = 0 beside the longer prompt: the target's greedy text."""
    _, _, loop, dparams, prompts, *_ = head_first_round(kind, shape)
    cfg, g, p = tiny_pair()[0]
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    ar, _ = Decoder(graphdef=g, cfg=cfg, eos_id=-1).run(
        p, (), tokens, lengths, jax.random.key(0), GREEDY, MAX_NEW
    )
    state, stats = loop.run(p, dparams, tokens, lengths, jax.random.key(1), GREEDY, MAX_NEW)
    assert generated(state, lengths) == generated(ar, lengths)
