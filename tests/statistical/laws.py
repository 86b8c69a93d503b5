"""Exact laws by enumeration, and the machinery to compare the real implementation against them.

Tiny random transformers (vocabulary V = 5) make every continuation enumerable: the exact
target law of m new tokens is the chain rule over all V^m sequences, computed with the same
`sampling_probs` the samplers use. The implementation is then run N times (the rows of batches
of CHUNK are independent draws: row b of batch c is keyed by fold_in(fold_in(key, c), b)) and
compared with a chi-square test.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import stats

from nanospec.compat import get_value, set_value
from nanospec.drafters import DraftModel
from nanospec.generate import pad_prompts
from nanospec.model import GPT, ModelConfig, forward
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.serving.adaptive import Goodput
from nanospec.serving.steps import redraft, round_at, step_loops
from nanospec.speculative import Speculator
from nanospec.trees.loop import TreeSpeculator

V = 5  # vocabulary of the tiny models
N_CTX = 16
PROMPT = [1, 3]  # two tokens (tests/test_one_token_prompt.py covers one)
PROMPT_B = [4, 0, 2]  # a second prompt of another length, for batches of mixed rows
DRAFT_VOCAB = (0, 1, 2, 4)  # the heads' draft vocabulary: token 3 is never drafted
EAGLE_OUT_SCALE = 0.1
# Rows per batch of the law tests. Small batches run faster: on a 2-core CPU 20,000 rows of a
# 2,2,1 tree took 2.9 s in batches of 1,000 and 6.9 s in one batch of 20,000 (a γ = 5 chain:
# 1.15 s and 1.78 s), because a small batch's KV caches stay in the CPU's caches.
CHUNK = 1_000


def tiny_lm(seed: int, n_layer: int = 2, d_model: int = 16, scale: float = 12.0):
    """A random GPT whose next-token laws are peaked and depend on the context.

    GPT-2's init (std 0.02) gives near-uniform outputs; scaling every matrix makes the laws
    sharp enough that target and draft disagree often — so rejections, residuals and bonus
    tokens all happen many times in N runs.
    """
    cfg = ModelConfig(
        name=f"tiny{seed}", vocab_size=V, n_ctx=N_CTX, n_layer=n_layer, n_head=2, d_model=d_model
    )
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(seed)))
    params = jax.tree.map(lambda x: x * scale if x.ndim >= 2 else x, params)
    return cfg, graphdef, params


def tiny_pair():
    """(target, draft): the draft is the target's weights blended half-way with another
    random model's, so it agrees often but not always — with γ = 3, about 25% of first rounds
    reject the first draft and 36% accept all three (then a bonus token is drawn)."""
    target, other = tiny_lm(0), tiny_lm(1)
    cfg = ModelConfig.from_dict({**target[0].to_dict(), "name": "tiny-draft"})
    blended = jax.tree.map(lambda a, b: 0.5 * a + 0.5 * b, target[2], other[2])
    return target, (cfg, target[1], blended)


def exact_law(
    model, prompt: list[int], m: int, sp: SamplingParams, held=(), min_new: int = 0
) -> np.ndarray:
    """P(next m tokens = s) for every s in V^m (index: base-V number), float64.

    With `held` tokens, vLLM's min_tokens written out on its own: their logits are −∞ at the
    first `min_new` new positions, before `sp` (which must hold nothing itself) is applied."""
    cfg, g, p = model
    assert sp.held is None, "the hold is written out here, independently of sampling.hold"
    seqs = np.array(list(itertools.product(range(V), repeat=m)), np.int32)  # (V^m, m)
    full = np.concatenate([np.tile(prompt, (len(seqs), 1)), seqs], axis=1)  # (V^m, L+m)
    T, L = full.shape[1], len(prompt)
    logits, _, _ = forward(g, p, jnp.asarray(full), jnp.broadcast_to(jnp.arange(T), full.shape))
    banned = np.zeros((T, V), bool)
    banned[L - 1 : L - 1 + min_new, list(held)] = True  # position L-1+i: the law of new token i
    logits = jnp.where(banned, -jnp.inf, logits)
    probs = np.asarray(sampling_probs(logits, sp), np.float64)  # (V^m, T, V)
    step_p = probs[np.arange(len(seqs))[:, None], L - 1 + np.arange(m)[None, :], seqs]  # (V^m, m)
    law = step_p.prod(axis=1)
    return law / law.sum()


def encode(seqs: list[list[int]]) -> np.ndarray:
    """Sequences of equal length m -> base-V integers (the cell index of exact_law)."""
    arr = np.asarray(seqs)
    return (arr * V ** np.arange(arr.shape[1] - 1, -1, -1)).sum(axis=1)


def run_speculative(
    target,
    drafter,
    dparams,
    prompts: list[list[int]],
    m: int,
    sp: SamplingParams,
    gamma: int,
    seed: int,
    chunk: int = CHUNK,
    tree=None,
    top: bool = True,
    max_new: int | None = None,
    loop=None,
):
    """Generate m tokens for every prompt row; returns {prompt: list of sequences}.

    `max_new` (default m) above m: the context's end, not max_new_tokens, stops the rows.

    With `tree`, rounds draft that token tree (top-k siblings if `top`, else sampled) instead
    of a chain of γ; `loop` runs that loop object instead (its drafter drafts).

    Rows run `chunk` at a time, the last chunk filled up with copies whose draws are dropped:
    every test at every N runs one program shape."""
    cfg, g, p = target
    out: dict[int, list] = {}
    for c, start in enumerate(range(0, len(prompts), chunk)):
        rows = prompts[start : start + chunk]
        tokens, lengths = pad_prompts(rows + [rows[0]] * (chunk - len(rows)), cfg.n_ctx)
        key = jax.random.fold_in(jax.random.key(seed), c)
        if loop is not None:
            spec = loop
        elif tree is None:
            spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=gamma, eos_id=-1)
        else:
            spec = TreeSpeculator(
                graphdef=g, cfg=cfg, drafter=drafter, tree=tree, top=top, eos_id=-1
            )
        state, _ = spec.run(p, dparams, tokens, lengths, key, sp, max_new or m)
        for row, seq in zip(rows, generated(state, lengths)):
            out.setdefault(tuple(row), []).append(seq)
    return out


_redraft = jax.jit(redraft, static_argnums=0)


def run_engine_rows(
    pair, sp: SamplingParams, n: int, m: int, gamma: int, schedule, seed: int
) -> list[list[int]]:
    """n serving-engine rows of PROMPT (a key and round counter each, `sp` copied to every row
    in the engine's per-row form), every
    step at `schedule`'s γ (repeated; 0: a plain step, then the draft cache is rebuilt with
    `steps.redraft` when drafting resumes), until all have m tokens: their tokens.
    CHUNK rows at a time, like run_speculative."""
    (cfg, g, p), (dcfg, dg, dparams) = pair
    loop = Speculator(graphdef=g, cfg=cfg, drafter=DraftModel(dg, dcfg), gamma=gamma, eos_id=-1)
    loops = step_loops(loop, Goodput(gammas=tuple(range(gamma + 1))))
    tokens, lengths = pad_prompts([PROMPT] * CHUNK, cfg.n_ctx)
    prefill = jax.jit(loops[gamma].prefill)
    rounds = {k: jax.jit(round_at(k, spec)) for k, spec in loops.items()}
    rows_sp = sp.per_row(CHUNK)
    out: list[list[int]] = []
    for c, start in enumerate(range(0, n, CHUNK)):
        state = prefill(p, dparams, tokens, lengths, jax.random.key(0))
        keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), c), CHUNK)
        state = state._replace(key=keys, step=jnp.zeros(CHUNK, jnp.int32))
        paused = False
        for k in itertools.cycle(schedule):
            if bool(jnp.all(state.done)):
                break
            if k and paused:
                state = _redraft(loops[gamma], dparams, state)
            paused = k == 0
            state = rounds[k](p, dparams, state, rows_sp, jnp.full(CHUNK, m, jnp.int32))[0]
        out += generated(state, lengths)[: n - start]
    return out


def chi_square_pvalue(
    observed_cells: np.ndarray, law: np.ndarray, min_expected: float = 5.0
) -> float:
    """Pearson chi-square goodness of fit, pooling cells whose expected count is below 5."""
    n = len(observed_cells)
    counts = np.bincount(observed_cells, minlength=len(law)).astype(np.float64)
    expected = law * n
    if counts[expected == 0].sum() > 0:
        return 0.0  # a sequence the target can never produce was produced: certainly wrong
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


def first_round_law(target, draft, prompt: list[int], gamma: int, sp: SamplingParams) -> dict:
    """Exact law of what ONE round emits from `prompt`: {(x₁, .., x_n, y): probability}.

    Enumerates every draft path x₁..x_γ (V^γ of them) and reads p and q at each prefix:
    P(x₁..x_n accepted, then y) = Π_{j≤n} min(q_j, p_j)(x_j) · max(0, p_{n+1} − q_{n+1})(y)
    for n < γ, and Π_{j≤γ} min(q_j, p_j)(x_j) · p_{γ+1}(y) when all γ are accepted.
    Unlike the law of the final text, this also pins down *how* tokens arrive — dropping the
    bonus token leaves the text's law intact but changes this one.
    """
    paths = np.array(list(itertools.product(range(V), repeat=gamma)), np.int32)  # (V^γ, γ)
    full = np.concatenate([np.tile(prompt, (len(paths), 1)), paths], axis=1)
    T, L = full.shape[1], len(prompt)

    def laws_of(model):
        _, g, params = model
        logits, _, _ = forward(
            g, params, jnp.asarray(full), jnp.broadcast_to(jnp.arange(T), full.shape)
        )
        return np.asarray(sampling_probs(logits, sp), np.float64)[:, L - 1 :]  # (V^γ, γ+1, V)

    p, q = laws_of(target), laws_of(draft)
    law: dict[tuple, float] = {}
    for i, path in enumerate(paths):
        reach = 1.0  # probability that x₁..x_n were drafted and accepted
        for n in range(gamma + 1):
            if n == gamma:
                extra = p[i, gamma]
            else:
                extra = np.maximum(p[i, n] - q[i, n], 0.0)
            for y in range(V):
                key = tuple(path[:n]) + (y,)
                # every path sharing the same first n drafts gives the same term: count it once
                law[key] = reach * extra[y]
            if n < gamma:
                reach *= min(q[i, n, path[n]], p[i, n, path[n]])
    return law


def run_first_round(
    target, drafter, dparams, prompt: list[int], n: int, sp: SamplingParams, gamma: int, seed: int
) -> list[tuple]:
    """What the real implementation emits in its first round, for n independent rows
    (CHUNK at a time, like run_speculative)."""
    cfg, g, p = target
    tokens, lengths = pad_prompts([prompt] * CHUNK, cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=gamma, eos_id=-1)

    @jax.jit
    def one_round(key):
        state = spec.prefill(p, dparams, tokens, lengths, key)
        _, trace = spec.step(p, dparams, state, sp, jnp.int32(1000))
        return trace.emitted, trace.n_emitted

    out = []
    for c, start in enumerate(range(0, n, CHUNK)):
        key = jax.random.fold_in(jax.random.key(seed), c)
        emitted, count = map(np.asarray, one_round(key))
        out += [tuple(e[:k]) for e, k in zip(emitted[: n - start], count)]
    return out


def chi_square_categorical(observed: list, law: dict, min_expected: float = 5.0) -> float:
    """chi_square_pvalue for outcomes that are arbitrary hashable keys of `law`."""
    index = {k: i for i, k in enumerate(law)}
    if any(o not in index for o in observed):
        return 0.0
    cells = np.array([index[o] for o in observed])
    probs = np.array(list(law.values()))
    return chi_square_pvalue(cells, probs / probs.sum(), min_expected)


def tiny_drafters(target, depth: int = 3) -> dict:
    """Every other drafter on the tiny target: {name: (drafter, dparams)}.

    The heads get random weights (scaled like tiny_lm's, Medusa's zero init replaced), so their
    laws are peaked and disagree with the target often: accepts, rejections, residuals and
    bonus tokens all happen many times in N runs. Exactness must not depend on head quality.
    Shaped as shipped: EAGLE's layer and the MTP modules are half the target's width (projected
    back), and EAGLE and MTP draft from a draft vocabulary that leaves token 3 out (only the
    residual can supply it), while Medusa reads the whole output layer — both paths through
    `draft_logits` are covered.
    """
    from nanospec.drafters import PromptLookup
    from nanospec.heads.drafters import DRAFTERS
    from nanospec.heads.modules import KINDS, HeadConfig, build

    cfg, g, p = target
    out = {"ngram": (PromptLookup(V, max_ngram=2), ())}
    for i, kind in enumerate(KINDS):
        hc = HeadConfig(
            kind,
            d_model=cfg.d_model,
            vocab_size=V,
            n_ctx=N_CTX,
            depth=depth,
            n_head=cfg.n_head,
            width=0 if kind == "medusa" else cfg.d_model // 2,
            draft_vocab=() if kind == "medusa" else DRAFT_VOCAB,
        )
        graphdef, params = nnx.split(build(hc, seed=10 + i))
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(jax.random.key(20 + i), len(leaves))
        leaves = [
            jax.random.normal(k, x.shape) * (3.0 / x.shape[0] ** 0.5) if x.ndim >= 2 else x
            for k, x in zip(keys, leaves)
        ]
        params = jax.tree.unflatten(treedef, leaves)
        if kind == "eagle":  # its projection back to the target's width, scaled like the
            # rest, makes f̂ so large that q is one-hot (a head that never samples, which the
            # wrong-temperature power test cannot tell from a right one): soften it.
            kernel = params["out"]["kernel"]
            set_value(kernel, get_value(kernel) * EAGLE_OUT_SCALE)
        drafter = DRAFTERS[kind](graphdef, hc, g)
        out[kind] = (drafter, drafter.prepare(params, p))
    return out
