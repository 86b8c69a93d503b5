"""A text scored by the target: each token's log-probability and its likeliest alternatives.

For each token: its log-probability given the tokens before it, and the likeliest alternatives
at its position — what OpenAI's `logprobs` returns (with `echo`, for the prompt too: how
evaluation harnesses score a model).

    scored = score(graphdef, params, cfg, ids, top=5)
    scored.logprobs[i]         # log p(ids[i] | ids[:i]) under the target, i ≥ 1 (i = 0: NaN)
    scored.top_ids[i]          # the `top` likeliest tokens at position i, likeliest first

One plain forward pass over the whole text, without drafts or a cache: a log-probability is
the target's whatever made the text, so a token that a draft proposed and the target accepted
scores exactly as one the target drew itself (the verify pass computes the same laws: at T = 1
they are its p; tests/test_score.py checks both). The law is the model's own, before
temperature, top-k or top-p (vLLM's default, "raw" logprobs): a score that changed with the
sampling settings could not be compared across them.

Static shapes: the text is right-padded to its length's bucket (generate.bucket) and the
alternatives are always the MOST_TOP likeliest, cut on the host, so one program serves every
text of a bucket and every `top`.
"""

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.errors import UserError
from nanospec.generate import bucket
from nanospec.model import ModelConfig, forward

MOST_TOP = 20  # alternatives per position at most (vLLM's default max_logprobs)


class Scored(NamedTuple):
    logprobs: np.ndarray  # (n,) float32: log p(x_i | x_<i); NaN at i = 0, which has no context
    top_ids: np.ndarray  # (n, top) int32: the likeliest tokens at position i (row 0: none)
    top_logprobs: np.ndarray  # (n, top) float32: their log-probabilities


def score(graphdef, params, cfg: ModelConfig, ids: list[int], top: int = 0) -> Scored:
    """Score `ids` (at most the context, at least one token) under the model; see the module."""
    if not 1 <= len(ids) <= cfg.n_ctx:
        raise UserError(
            f"A text to score holds 1 to {cfg.n_ctx} tokens (the context); this one has {len(ids)}."
        )
    if not 0 <= top <= MOST_TOP:
        raise UserError(f"top must be 0 to {MOST_TOP} alternatives per position, got {top}.")
    n = len(ids)
    tokens = np.zeros((1, bucket(n, cfg.n_ctx)), np.int32)
    tokens[0, :n] = ids
    chosen, best, best_ids = map(np.asarray, _score(graphdef, params, jnp.asarray(tokens)))
    # Position i is scored by the law after position i − 1; position 0 has none.
    logprobs = np.concatenate([[np.nan], chosen[: n - 1]]).astype(np.float32)
    top_ids = np.concatenate([np.zeros((1, top), np.int32), best_ids[: n - 1, :top]])
    top_lp = np.concatenate([np.full((1, top), np.nan, np.float32), best[: n - 1, :top]])
    return Scored(logprobs, top_ids, top_lp)


@partial(jax.jit, static_argnums=0)
def _score(graphdef, params, tokens):
    """The law after each position (log-softmax of the logits, float32), at each position
    the log-probability of the next token, and the MOST_TOP likeliest tokens."""
    T = tokens.shape[1]
    logits, _, _ = forward(graphdef, params, tokens, jnp.arange(T)[None])
    law = jax.nn.log_softmax(logits[0].astype(jnp.float32), axis=-1)  # (T, V)
    nxt = jnp.concatenate([tokens[0, 1:], tokens[0, :1]])  # the token after each position
    chosen = jnp.take_along_axis(law, nxt[:, None], axis=1)[:, 0]
    best, best_ids = jax.lax.top_k(law, MOST_TOP)
    return chosen, best, best_ids
