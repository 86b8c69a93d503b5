"""The suite's side of the exact laws: single rounds, engine rows, every other drafter.

The core (tiny models, the exact law of m tokens, N runs of the loop, the chi-square test) is
nanospec/measure/exact_law.py, shared with `python -m nanospec.measure.gpu_check`; it is
imported here under the names the suite's tests have always used.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nanospec.compat import get_value, set_value
from nanospec.drafters import DraftModel
from nanospec.generate import pad_prompts
from nanospec.measure.exact_law import (  # noqa: F401 (re-exported: the tests import them here)
    CHUNK,
    N_CTX,
    PROMPT,
    V,
    chi_square_pvalue,
    encode,
    exact_law,
    run_speculative,
    tiny_lm,
    tiny_pair,
)
from nanospec.model import forward
from nanospec.rounds import generated
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.serving.adaptive import Goodput
from nanospec.serving.steps import redraft, round_at, step_loops
from nanospec.speculative import Speculator

PROMPT_B = [4, 0, 2]  # a second prompt of another length, for batches of mixed rows
DRAFT_VOCAB = (0, 1, 2, 4)  # the heads' draft vocabulary: token 3 is never drafted
EAGLE_OUT_SCALE = 0.1


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
