"""Autoregressive generation: prefill, then one cached decode step at a time — inside jit.

The baseline every speculative method must match in law and beat in time. `Decoder` is a loop
(rounds.Loop) whose rounds draft nothing: `settle` is one decode step that samples a token
from the target's p and computes the next p. So it has the same two drivers as speculation:

- `run`:    a fused `lax.while_loop` over decode steps — fast; benchmarks and tests use it;
- `rounds`: one jitted step per token, each yielded as a speculative round that drafted
            nothing (a `StepTrace`: the target's law, the token drawn from it), so an
            autoregressive run can be traced and replayed beside a speculative one.

`generate` is the one-call version; `stream` yields each step's new tokens as they come.

Static vs traced (what recompiles): the model graph, batch size, prompt *bucket* and cache
capacity (cache.capacity: what the run can reach, rounded up to a power of two) are static;
prompt tokens, prompt lengths, max_new_tokens, the sampling params and the key are traced.
Prompts are right-padded to a bucket (16, 32, 64, ...) so a new prompt length within a bucket
reuses the compiled program. Pad slots sit past each row's length, so the cache never shows
them to a query (see cache.py).

Stopping: a row stops after emitting <|endoftext|> (which it keeps as its last token), after
`max_new_tokens`, or when its cache is full. Finished rows idle while others continue.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import KVCache, rollback, run_if
from nanospec.errors import UserError
from nanospec.model import ModelConfig, forward
from nanospec.rounds import TOP, Loop, StepTrace, generated, prefill_target, prob_of
from nanospec.sampling import SamplingParams, fold_keys, sample_rows, sampling_probs
from nanospec.trace import events_from_step
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
        raise UserError(
            f"The prompt is {longest} tokens long but the model's context holds "
            f"{n_ctx}, leaving no room to generate; shorten it."
        )
    width = bucket(longest, n_ctx)
    tokens = np.full((len(prompts), width), pad_id, np.int32)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = p
    return jnp.asarray(tokens), jnp.asarray([len(p) for p in prompts], jnp.int32)


class DecodeState(NamedTuple):
    seq: jax.Array  # (B, S) int32: prompt + generated tokens, slot i holds position i
    cache: KVCache  # committed length == number of valid tokens in seq
    logits: jax.Array  # (B, V) logits for the next token
    n_new: jax.Array  # (B,) int32 tokens generated so far
    done: jax.Array  # (B,) bool
    step: jax.Array  # () int32: decode steps taken (keys are fold_in(key, step))
    key: jax.Array  # the run's base key (the serving engine: a key and a step per row, (B,))


def as_round(live, length, token, probs) -> StepTrace:
    """One decode step in the shape of a speculative round that drafted nothing (γ = 0)."""
    B = token.shape[0]
    none = lambda dtype, *shape: jnp.zeros((B, 0) + shape, dtype)
    top_p, top_ids = jax.lax.top_k(probs, TOP)  # (B, TOP)
    p_tok = prob_of(probs, token)
    verdict = Verdict(
        jnp.zeros(B, jnp.int32),
        none(bool),
        token,
        jnp.ones(B, bool),
        none(jnp.float32),
        none(jnp.float32),
        none(jnp.float32),
        probs,
    )
    return StepTrace(
        live,
        length,
        none(jnp.int32),
        jnp.zeros(B, jnp.int32),
        verdict,
        live.astype(jnp.int32),
        token[:, None],
        (none(jnp.int32, TOP), none(jnp.float32, TOP)),
        (top_ids[:, None], top_p[:, None]),
        (top_ids, top_p),
        p_tok,
        p_tok,
        jnp.zeros(B, jnp.float32),
        jnp.zeros(B, bool),
    )


@dataclass(frozen=True, kw_only=True)
class Decoder(Loop):
    """Autoregressive decoding as a loop of rounds with no drafts."""

    graphdef: Any
    cfg: ModelConfig
    eos_id: int
    capacity: int | None = None  # cache slots (cache.capacity); default: the whole context
    shared: bool = False  # every row holds the same prompt: prefill it once
    depth = 0  # no drafts: every round emits exactly one token ...
    block = 1  # ... from a pass over one token
    drafter = None
    predrafts = False

    def settings(self) -> dict:
        return {}

    def kv_models(self) -> tuple:
        return (self.cfg,)

    def check(self, lengths, max_new: int) -> None:
        if max_new < 1:
            raise UserError(f"max_new_tokens must be at least 1, got {max_new}.")

    def prefill(self, params, dparams, tokens, lengths, key) -> DecodeState:
        """Run the padded prompt through the model once; the state before the first token."""
        B = tokens.shape[0]
        logits, _, cache, seq = prefill_target(
            self.graphdef, params, self.cfg, tokens, self.capacity or self.cfg.n_ctx
        )
        last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0]  # (B, V)
        return DecodeState(
            seq,
            rollback(cache, lengths),
            last,
            jnp.zeros(B, jnp.int32),
            jnp.zeros(B, bool),
            jnp.int32(0),
            key,
        )

    def draft(self, dparams, state: DecodeState, sp: SamplingParams):
        return (), state  # nothing to draft

    def settle(self, params, dparams, state: DecodeState, drafted, sp: SamplingParams, max_new):
        """One decode step: sample a token from p for every unfinished row, append it, and
        compute the next p. Returns (state, the step as a round with no drafts)."""
        B = state.seq.shape[0]
        probs = sampling_probs(state.logits, sp, state.n_new)  # (B, V)
        token = sample_rows(fold_keys(state.key, state.step), probs)  # (B,)
        live = ~state.done
        length = state.cache.length
        rows = jnp.arange(B)
        seq = state.seq.at[rows, length].set(jnp.where(live, token, state.seq[rows, length]))
        n_new = state.n_new + live
        done = state.done | (
            live & ((token == self.eos_id) | (n_new >= max_new) | (length + 1 >= self.cfg.n_ctx))
        )

        def next_logits(carry):
            logits, _, cache = forward(
                self.graphdef, params, token[:, None], length[:, None], carry[1]
            )
            return logits[:, 0], rollback(cache, jnp.where(live, length + 1, length))

        # Skip the forward pass once every row is done (it would only be thrown away); `run_if`,
        # not lax.cond, keeps the cache update in place (cache.py).
        logits, cache = run_if(~jnp.all(done), next_logits, (state.logits, state.cache))
        new_state = DecodeState(seq, cache, logits, n_new, done, state.step + 1, state.key)
        return new_state, as_round(live, length, token, probs)

    def events(self, trace: StepTrace, tok, round_idx: int, seconds=None) -> list[dict]:
        """One step's trace -> its events (trace.py): a round with no drafts."""
        return events_from_step(trace, tok, round_idx, seconds)


def generate(
    graphdef,
    params,
    cfg: ModelConfig,
    tokens,
    lengths,
    key,
    sp: SamplingParams,
    max_new: int,
    eos_id: int,
):
    """The fused driver in one call. Returns (new tokens per row, final DecodeState)."""
    state, _ = Decoder(graphdef=graphdef, cfg=cfg, eos_id=eos_id).run(
        params, (), tokens, lengths, key, sp, max_new
    )
    return generated(state, lengths), state


def stream(
    graphdef,
    params,
    cfg: ModelConfig,
    tokens,
    lengths,
    key,
    sp: SamplingParams,
    max_new: int,
    eos_id: int,
):
    """Step by step: yields (B,) arrays of each step's new token (-1 for rows already done)."""
    decoder = Decoder(graphdef=graphdef, cfg=cfg, eos_id=eos_id)
    for rnd in decoder.rounds(params, (), tokens, lengths, key, sp, max_new):
        yield np.where(np.asarray(rnd.trace.live), np.asarray(rnd.trace.verdict.token), -1)
