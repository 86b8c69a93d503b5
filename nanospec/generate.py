"""Autoregressive generation: prefill, then one cached decode step at a time — inside jit.

Two drivers share one step (as in the gemma sampler):

- `generate`: a fused `lax.while_loop` over `decode_step` — fast; benchmarks and tests use it;
- `stream`: a Python generator calling the jitted `decode_step` once per token and yielding
  the new tokens — for printing as you go. Same key => same tokens as `generate`;
- `decode_rounds`: the same steps, each yielded as a speculative round that drafted nothing
  (a `StepTrace`: the target's law, the token drawn from it), so an autoregressive run can be
  traced and replayed beside a speculative one.

Static vs traced (what recompiles): the model graph, batch size, prompt *bucket* and cache
capacity (cache.capacity: what the run can reach, rounded up to a power of two) are static; prompt tokens, prompt lengths, max_new_tokens, the sampling params and
the key are traced. Prompts are right-padded to a bucket (16, 32, 64, ...) so a new prompt
length within a bucket reuses the compiled program. Pad slots sit past each row's length, so
the cache never shows them to a query (see cache.py).

Stopping: a row stops after emitting <|endoftext|> (which it keeps as its last token), after
`max_new_tokens`, or when its cache is full. Finished rows idle while others continue.
"""

import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.aot import compiled
from nanospec.cache import KVCache, init_cache, rollback, run_if
from nanospec.errors import UserError
from nanospec.model import ModelConfig, forward
from nanospec.sampling import SamplingParams, sample_rows, sampling_probs
from nanospec.speculative import TOP, StepTrace, at
from nanospec.verify import Verdict


def bucket(n: int, n_ctx: int, smallest: int = 16) -> int:
    """The padded length for an n-token prompt: the next power of two, at least 16.

    >>> [bucket(n, 256) for n in (1, 16, 17, 200)]
    [16, 16, 32, 256]
    """
    b = smallest
    while b < n:
        b *= 2
    return min(b, n_ctx)


def pad_prompts(prompts: list[list[int]], n_ctx: int, pad_id: int = 0):
    """Right-pad token lists to one bucket: tokens (B, Lb) int32 and lengths (B,) int32."""
    if any(len(p) == 0 for p in prompts):
        raise UserError("The prompt is empty; give at least one token of text.")
    longest = max(len(p) for p in prompts)
    if longest >= n_ctx:
        raise UserError(f"The prompt is {longest} tokens long but the model's context holds "
                        f"{n_ctx}, leaving no room to generate; shorten it.")
    width = bucket(longest, n_ctx)
    tokens = np.full((len(prompts), width), pad_id, np.int32)
    for i, p in enumerate(prompts):
        tokens[i, :len(p)] = p
    return jnp.asarray(tokens), jnp.asarray([len(p) for p in prompts], jnp.int32)


class DecodeState(NamedTuple):
    seq: jax.Array  # (B, S) int32: prompt + generated tokens, slot i holds position i
    cache: KVCache  # committed length == number of valid tokens in seq
    logits: jax.Array  # (B, V) logits for the next token
    n_new: jax.Array  # (B,) int32 tokens generated so far
    done: jax.Array  # (B,) bool
    step: jax.Array  # () int32: decode steps taken (keys are fold_in(key, step))
    key: jax.Array  # the run's base key


def prefill(graphdef, params, cfg: ModelConfig, tokens, lengths, key,
            capacity: int | None = None) -> DecodeState:
    """Run the padded prompt through the model once; return the state before the first token.

    `capacity` (static): the cache's slots (cache.capacity; default: the whole context)."""
    B, Lb = tokens.shape
    S = capacity or cfg.n_ctx
    cache = init_cache(cfg.n_layer, cfg.n_head, cfg.head_dim, B, S)
    positions = jnp.broadcast_to(jnp.arange(Lb), (B, Lb))  # (B, Lb)
    logits, _, cache = forward(graphdef, params, tokens, positions, cache)  # (B, Lb, V)
    last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0]  # (B, V)
    seq = jnp.zeros((B, S), jnp.int32).at[:, :Lb].set(tokens)
    return DecodeState(seq, rollback(cache, lengths), last, jnp.zeros(B, jnp.int32),
                       jnp.zeros(B, bool), jnp.int32(0), key)


def decode_step(graphdef, params, cfg: ModelConfig, state: DecodeState, sp: SamplingParams,
                max_new, eos_id: int) -> DecodeState:
    """Sample one token per unfinished row, append it, and compute the next logits."""
    return traced_decode_step(graphdef, params, cfg, state, sp, max_new, eos_id)[0]


def traced_decode_step(graphdef, params, cfg: ModelConfig, state: DecodeState, sp: SamplingParams,
                       max_new, eos_id: int) -> tuple[DecodeState, StepTrace]:
    """`decode_step`, and what it did as a speculative round with no drafts: the target's law
    p₁ at the one position and the token drawn from it (a "bonus" token, in the verify rule's
    words). XLA drops the trace where nobody reads it, as in `decode_step`."""
    B = state.seq.shape[0]
    probs = sampling_probs(state.logits, sp)  # (B, V)
    token = sample_rows(jax.random.fold_in(state.key, state.step), probs)  # (B,)
    live = ~state.done
    length = state.cache.length
    rows = jnp.arange(B)
    seq = state.seq.at[rows, length].set(jnp.where(live, token, state.seq[rows, length]))
    n_new = state.n_new + live
    done = state.done | (live & ((token == eos_id) | (n_new >= max_new) | (length + 1 >= cfg.n_ctx)))

    def next_logits(carry):
        logits, _, cache = forward(graphdef, params, token[:, None], length[:, None], carry[1])
        return logits[:, 0], rollback(cache, jnp.where(live, length + 1, length))

    # Skip the forward pass once every row is done (it would only be thrown away); `run_if`,
    # not lax.cond, keeps the cache update in place (cache.py).
    logits, cache = run_if(~jnp.all(done), next_logits, (state.logits, state.cache))
    new_state = DecodeState(seq, cache, logits, n_new, done, state.step + 1, state.key)
    return new_state, _as_round(live, length, token, probs)


def _as_round(live, length, token, probs) -> StepTrace:
    """One decode step in the shape of a speculative round that drafted nothing (γ = 0)."""
    B = token.shape[0]
    none = lambda dtype, *shape: jnp.zeros((B, 0) + shape, dtype)
    top_p, top_ids = jax.lax.top_k(probs, TOP)  # (B, TOP)
    p_tok = at(probs, token)
    verdict = Verdict(jnp.zeros(B, jnp.int32), none(bool), token, jnp.ones(B, bool),
                      none(jnp.float32), none(jnp.float32), none(jnp.float32), probs)
    return StepTrace(live, length, none(jnp.int32), jnp.zeros(B, jnp.int32), verdict,
                     live.astype(jnp.int32), token[:, None],
                     (none(jnp.int32, TOP), none(jnp.float32, TOP)),
                     (top_ids[:, None], top_p[:, None]), (top_ids, top_p), p_tok, p_tok,
                     jnp.zeros(B, jnp.float32))


def share_rows(state, batch: int):
    """A batch-1 state repeated for `batch` identical rows (the leading axis of every array
    leaf; scalars such as the key and the step count are shared as they are)."""
    return jax.tree.map(lambda x: jnp.repeat(x, batch, axis=0) if x.ndim else x, state)


@partial(jax.jit, static_argnames=("graphdef", "cfg", "eos_id", "capacity", "shared"))
def _generate(graphdef, params, cfg, tokens, lengths, key, sp, max_new, eos_id, capacity=None,
              shared=False):
    """`shared`: every row holds the same prompt (many samples of one prompt), so the prompt
    is run once and its state repeated — the prefill would otherwise cost 16 decode steps'
    work per row."""
    if shared:
        state = share_rows(prefill(graphdef, params, cfg, tokens[:1], lengths[:1], key, capacity),
                           tokens.shape[0])
    else:
        state = prefill(graphdef, params, cfg, tokens, lengths, key, capacity)
    step = lambda s: decode_step(graphdef, params, cfg, s, sp, max_new, eos_id)
    return jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)


_prefill_jit = jax.jit(prefill, static_argnames=("graphdef", "cfg", "capacity"))
_step_jit = jax.jit(decode_step, static_argnames=("graphdef", "cfg", "eos_id"), donate_argnums=(3,))
_traced_step_jit = jax.jit(traced_decode_step, static_argnames=("graphdef", "cfg", "eos_id"),
                           donate_argnames=("state",))


def _check(max_new: int) -> None:
    if max_new < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {max_new}.")


def generate(graphdef, params, cfg: ModelConfig, tokens, lengths, key, sp: SamplingParams,
             max_new: int, eos_id: int):
    """Fused driver. Returns (new_tokens list per row, final DecodeState)."""
    _check(max_new)
    state = _generate(graphdef, params, cfg, tokens, lengths, key, sp, jnp.int32(max_new), eos_id)
    return new_tokens(state, lengths), state


def stream(graphdef, params, cfg: ModelConfig, tokens, lengths, key, sp: SamplingParams,
           max_new: int, eos_id: int):
    """Step-wise driver: yields (B,) arrays of new tokens (-1 for rows already finished)."""
    _check(max_new)
    state = _prefill_jit(graphdef, params, cfg, tokens, lengths, key)
    max_new = jnp.int32(max_new)
    while not bool(jnp.all(state.done)):
        was_done = np.asarray(state.done)
        pos = np.asarray(state.cache.length)
        state = _step_jit(graphdef, params, cfg, state, sp, max_new, eos_id)
        seq = np.asarray(state.seq)
        yield np.where(was_done, -1, seq[np.arange(len(pos)), pos])


def compile_decode_rounds(graphdef, params, cfg, tokens, lengths, key, sp: SamplingParams,
                          eos_id: int, capacity: int | None = None):
    """Compile `decode_rounds`' two programs ahead of time: ((prefill, step), seconds)."""
    pre, s1 = compiled(_prefill_jit, dict(graphdef=graphdef, cfg=cfg, capacity=capacity),
                       dict(params=params, tokens=tokens, lengths=lengths, key=key))
    step, s2 = compiled(_traced_step_jit, dict(graphdef=graphdef, cfg=cfg, eos_id=eos_id),
                        dict(params=params, state=pre.out_info, sp=sp,
                             max_new=jax.ShapeDtypeStruct((), jnp.int32)))
    return (pre, step), s1 + s2


def decode_rounds(graphdef, params, cfg: ModelConfig, tokens, lengths, key, sp: SamplingParams,
                  max_new: int, eos_id: int, capacity: int | None = None, programs=None):
    """Step-wise driver for tracing: yields (StepTrace, DecodeState, timings) per token, with
    the same tokens as `generate` for the same key (it runs the same `decode_step`)."""
    _check(max_new)
    if programs is None:
        programs, _ = compile_decode_rounds(graphdef, params, cfg, tokens, lengths, key, sp,
                                            eos_id, capacity)
    pre, step = programs
    state = pre(params=params, tokens=tokens, lengths=lengths, key=key)
    max_new = jnp.int32(max_new)
    while not bool(jnp.all(state.done)):
        t0 = time.perf_counter()
        state, trace = step(params=params, state=state, sp=sp, max_new=max_new)
        jax.block_until_ready(state.seq)
        yield trace, state, {"draft_s": 0.0, "verify_s": time.perf_counter() - t0}


def new_tokens(state: DecodeState, lengths) -> list[list[int]]:
    """The generated ids of each row (prompt stripped), as plain lists."""
    seq, lengths, n_new = np.asarray(state.seq), np.asarray(lengths), np.asarray(state.n_new)
    return [seq[b, lengths[b]:lengths[b] + n_new[b]].tolist() for b in range(len(lengths))]

