"""Timing probes for `nanospec bench`: what each piece of a speculative round costs here.

Each probe is a zero-argument function around one compiled program; `interleaved_samples`
times them round-robin (so a noisy neighbour slows them all alike) and keeps every pass, so
`paired_latency` can take ratios within a pass (TTFT, TPOT and the speedups over the
autoregressive runs); `paired_median_differences` times pairs back to back and takes the
median difference.

    decode_probe   prefill + n greedy decode steps of one model (T_ar from two n's)
    forward_probe  FORWARD_CALLS cached target passes over a block of γ+1 tokens (r)
    round_probe    FORWARD_CALLS drafting rounds *in place*, interleaved with target passes
                   (c: paired with forward_probe over the same block)
    extra_cost     parameters and memory a method adds beside the target (not a timing): the
                   head's parameters, what it derives from them at load, its per-row state

What this file deliberately leaves out: any assertion about time (tests never make one).
"""

import statistics
import time

import jax
import jax.numpy as jnp

from nanospec.cache import init_cache, rollback
from nanospec.generate import Decoder, pad_prompts
from nanospec.heads.modules import KINDS
from nanospec.model import count_params, forward
from nanospec.rounds import prefill_program
from nanospec.sampling import GREEDY, SamplingParams
from nanospec.speculative import Speculator


def _timed(fn) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def interleaved_samples(probes: dict, repeats: int) -> dict:
    """{k: [seconds in pass 1, pass 2, …]}: every probe timed once per pass, round-robin.

    Sample i of every probe comes from the same pass, so a ratio of two probes can be taken
    pass by pass (see paired_latency) instead of as a ratio of two separate medians.
    """
    for fn in probes.values():  # compile and warm up
        jax.block_until_ready(fn())
    samples: dict = {k: [] for k in probes}
    for _ in range(repeats):
        for k, fn in probes.items():
            samples[k].append(_timed(fn))
    return samples


def paired_median_differences(pairs: dict, repeats: int) -> dict:
    """{k: median over `repeats` passes of T(a) − T(b)} for pairs {k: (a, b)} of probes.

    Within a pass the two halves of each pair run back to back, so both see the machine in the
    same state: a small difference of two large times (a drafter's round with its target pass,
    minus the pass alone) is far steadier this way than as a difference of two medians taken
    at different moments (timed that way, the draft model's c at one γ once came out a quarter
    below its neighbours').
    """
    for a, b in pairs.values():  # compile and warm up
        jax.block_until_ready(a())
        jax.block_until_ready(b())
    samples: dict = {k: [] for k in pairs}
    for _ in range(repeats):
        for k, (a, b) in pairs.items():
            samples[k].append(_timed(a) - _timed(b))
    return {k: statistics.median(v) for k, v in samples.items()}


def paired_latency(
    full: list[float],
    first: list[float],
    ar_full: list[float],
    ar_first: list[float],
    n_prompts: int,
    n_after_first: int,
) -> dict:
    """TTFT, TPOT and the speedups of one method, from the passes that timed it and the
    autoregressive runs (sample i of each list comes from pass i).

    TTFT is a run that stops at the first token, prefill included; TPOT (vLLM's) is the rest
    of the run over the tokens after the first: (end to end − TTFT) / (tokens − 1). Both
    speedups are taken pass by pass, autoregressive over speculative, and then the median of
    those ratios — a ratio of two medians timed in different passes once put a TPOT speedup of
    54× beside 2× end to end.

    >>> r = paired_latency([2.0, 4.0], [1.0, 2.0], [4.0, 8.0], [1.0, 1.0], 1, 9)  # pass 2: slower
    >>> r["measured_speedup"], r["tpot_speedup"], r["decode_share"]
    (2.0, 3.25, 0.5)
    """
    decode = [f - t for f, t in zip(full, first)]  # seconds after the first token, per pass
    ar_decode = [f - t for f, t in zip(ar_full, ar_first)]
    tpot = statistics.median(a / d if d > 0 else float("inf") for a, d in zip(ar_decode, decode))
    return {
        "ttft_ms": 1e3 * statistics.median(first) / n_prompts,
        "tpot_ms": 1e3 * statistics.median(decode) / n_after_first,
        "measured_speedup": statistics.median(a / f for a, f in zip(ar_full, full)),
        "tpot_speedup": tpot if tpot != float("inf") else None,  # None: nothing left to time
        "decode_share": statistics.median(d / f for d, f in zip(decode, full)),
    }


def decode_probe(model, prompt: list[int], n: int):
    """Prefill + n greedy decode steps at batch 1 (EOS disabled): the autoregressive loop."""
    cfg, g, p = model
    tokens, lengths = pad_prompts([prompt], cfg.n_ctx)
    decoder = Decoder(graphdef=g, cfg=cfg, eos_id=-1)
    return lambda: decoder.run(p, (), tokens, lengths, jax.random.key(0), GREEDY, n)


FORWARD_CALLS = 32


def forward_probe(model, block: int, context: int = 64):
    """FORWARD_CALLS cached forward passes over `block` tokens, `context` tokens cached.

    The cache is a traced argument carried through the loop (written, then rolled back), as in
    the real loops — a cache baked in as a constant lets XLA precompute parts of attention.
    """
    cfg, g, p = model

    @jax.jit
    def loop(params, cache, tok):
        def body(i, carry):  # each pass feeds on the previous pass's argmax: nothing to hoist
            cache, tok = carry
            logits, _, cache = forward(g, params, tok, context + jnp.arange(block)[None], cache)
            return rollback(cache, cache.length - block), jnp.argmax(logits, -1).astype(jnp.int32)

        return jax.lax.fori_loop(0, FORWARD_CALLS, body, (cache, tok))

    cache = rollback(
        init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, 1, cfg.n_ctx), jnp.array([context])
    )
    tok = jnp.zeros((1, block), jnp.int32)
    return lambda: loop(p, cache, tok)


def round_probe(
    target, drafter, dparams, prompt: list[int], gamma: int, sp: SamplingParams = GREEDY
):
    """FORWARD_CALLS drafting rounds at batch 1, each: `propose` γ drafts, ONE target pass over
    a (γ+1)-token block, `commit` of that pass's features. Minus forward_probe(γ+1), this is
    the drafter's cost per round *in place*.

    subtle: measured alone, a drafter looks cheaper than it is: between its calls the target's
    ~46 MB of weights stream through the CPU caches and evict the drafter's, so in the real
    loop a head's first step each round reads its weights from memory again (EAGLE: 2× the
    stand-alone cost). Interleaving the target pass reproduces that.
    The sampling parameters are traced, as in the real loop (a constant temperature would
    let XLA skip half of sampling), and each round's key differs.
    """
    cfg, g, p = target
    tokens, lengths = pad_prompts([prompt], cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=gamma, eos_id=-1)
    state = prefill_program(spec, p, dparams, tokens, lengths, jax.random.key(0))

    @jax.jit
    def loop(params, dparams, dstate, cache, seq, length, sp):
        start = length - 1  # (1,): batch 1

        def body(i, carry):
            dstate, cache, seq, used = carry
            drafts, q, dstate = drafter.propose(
                dparams, dstate, seq, length, jax.random.key(i), sp, gamma
            )
            block = jnp.concatenate([seq[:, :1], drafts], axis=1)  # (1, γ+1)
            logits, hidden, cache = forward(
                g, params, block, start[:, None] + jnp.arange(gamma + 1), cache
            )
            emitted = jnp.argmax(logits, -1).astype(jnp.int32)  # (1, γ+1)
            dstate = drafter.commit(dparams, dstate, hidden, emitted, start, length)
            # subtle: each round must wait for the last, as in the real loop — else XLA runs a
            # drafter that ignores the target (draft model, prompt lookup) alongside its pass —
            # so the verdict goes back into the text; `used` keeps the drafts and their laws
            # alive (a drafter whose state ignores its drafts would be dead code).
            seq = seq.at[:, start[0]].set(emitted[:, 0])
            used = used + jnp.sum(drafts) + jnp.sum(q[..., 0])
            return dstate, rollback(cache, start), seq, used

        return jax.lax.fori_loop(0, FORWARD_CALLS, body, (dstate, cache, seq, jnp.float32(0)))

    return lambda: loop(p, dparams, state.dstate, state.cache, state.seq, state.length, sp)


def extra_cost(bundle, method: str, gamma: int) -> dict:
    """Parameters a method adds to the target, and their memory plus the drafter's state's."""
    if method == "ar":
        return {"extra_params": 0, "extra_memory_mb": 0.0}
    cfg, g, p = bundle.models["target"]
    drafter, dparams = bundle.drafter(method)
    own = dparams[0] if method in KINDS else dparams  # heads: (head, target, ...)
    n = count_params(own)
    # What a head derives from its parameters at load (EAGLE's folded layers) is memory.
    derived = dparams[2:] if method in KINDS else ()
    derived_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(derived))
    tokens, lengths = pad_prompts([[0, 0]], cfg.n_ctx)
    spec = Speculator(graphdef=g, cfg=cfg, drafter=drafter, gamma=gamma, eos_id=-1)
    state = jax.eval_shape(lambda: spec.prefill(p, dparams, tokens, lengths, jax.random.key(0)))
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.dstate))
    return {"extra_params": n, "extra_memory_mb": (4 * n + derived_bytes + state_bytes) / 2**20}
