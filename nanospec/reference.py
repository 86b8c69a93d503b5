"""Speculative sampling in one screen: the reference loop. Read this first.

Leviathan, Kalman and Matias (2023), "Fast Inference from Transformers via Speculative
Decoding", Algorithm 1 — and Chen et al.'s speculative sampling, the same rule — for ONE
sequence, as a plain Python loop. Each step of the algorithm is one line or one call:

    draft     x₁..x_γ ~ q₁..q_γ            drafter.propose          (drafters.py)
    score     p₁..p_{γ+1} in ONE pass       forward over seq + drafts (model.py)
    accept    xᵢ with min(1, pᵢ(xᵢ)/qᵢ(xᵢ))  verify_row (`judge`)   (verify.py: the proof)
    resample  y ~ norm(max(0, p_{n+1} − q_{n+1})) at the first rejection   (verify.residual)
    bonus     y ~ p_{γ+1} if all γ were accepted                          (verify.bonus_probs)
    rollback  drop the rejected drafts: only x₁..x_n and y are appended

Nothing here is fast on purpose: the target re-reads the whole sequence every round (no KV
cache, so rollback is free: the rejected drafts were never stored), and there is no batch and
no `jit` around the loop — only the model calls inside it are compiled, each once
(`target_laws` pads the sequence to the context's length). speculative.py is the same algorithm made fast — KV caches
rolled back in place, fixed shapes, every round inside one `lax.while_loop` — and a test
(tests/test_reference.py) shows that both emit exactly the same tokens under the same key.

What this file deliberately leaves out: batches, token trees (trees/), timing and tracing.
"""

from functools import partial

import jax
import jax.numpy as jnp

from nanospec.drafters import Drafter
from nanospec.model import forward
from nanospec.rounds import round_keys
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.speculative import full_capacity
from nanospec.verify import verify_row


def target_laws(target, seq: list[int], sp: SamplingParams):
    """The target's next-token law after every prefix of `seq`: (n_ctx, V), and its features
    (1, n_ctx, C) — one forward pass, no cache. The sequence is padded to the context's length
    so that one compiled program serves every round; causal attention never lets a position
    see the padding after it, and rows past len(seq) are never read."""
    cfg, graphdef, params = target
    tokens = (
        jnp.zeros((1, cfg.n_ctx), jnp.int32).at[0, : len(seq)].set(jnp.asarray(seq[: cfg.n_ctx]))
    )
    return _laws(graphdef, params, tokens, sp)


@partial(jax.jit, static_argnums=0)
def _laws(graphdef, params, tokens, sp):
    logits, hidden, _ = forward(graphdef, params, tokens, jnp.arange(tokens.shape[1])[None])
    return sampling_probs(logits[0], sp), hidden


# The drafter's steps and the rule, each jitted once here with the drafter (a frozen dataclass)
# as a static argument: every call reuses the program compiled for its drafter and shapes.
_propose = jax.jit(
    lambda d, *args, gamma: d.propose(*args, gamma), static_argnums=0, static_argnames="gamma"
)
_how_many = jax.jit(
    lambda d, *args, gamma: d.draft_length(*args, gamma), static_argnums=0, static_argnames="gamma"
)
_commit = jax.jit(lambda d, *args: d.commit(*args), static_argnums=0)
_judge = jax.jit(verify_row)


def window(x: jax.Array, start: int, n: int, axis: int = 0) -> jax.Array:
    """x[start : start + n] along `axis`, indices past the end clipped to the last row (such
    rows stand for drafts past the context's end, which the verify rule never reads)."""
    return jnp.take(x, jnp.arange(start, start + n), axis=axis, mode="clip")


def speculative_sampling(
    target,
    drafter: Drafter,
    dparams,
    prompt: list[int],
    gamma: int,
    sp: SamplingParams,
    key: jax.Array,
    max_new: int,
    eos_id: int,
):
    """Generate up to `max_new` tokens after `prompt`; returns them (a list of ints).

    `target` = (cfg, graphdef, params). Stops after EOS, after max_new tokens, or at the end
    of the target's context (n_ctx tokens in all), as autoregressive sampling would."""
    cfg = target[0]
    seq = list(prompt)  # every committed token: the prompt, then what was generated
    _, hidden = target_laws(target, seq, sp)
    # The drafter's own state (a draft model's KV cache: room for a round past the end).
    width = full_capacity(cfg, gamma + 1)
    dstate = drafter.init(
        dparams, jnp.asarray([seq]), jnp.asarray([len(seq)]), hidden[:, : len(seq)], capacity=width
    )
    for step in range(max_new):  # each round emits at least one token
        n_new, L = len(seq) - len(prompt), len(seq)
        if n_new >= max_new or (n_new and seq[-1] == eos_id) or L >= cfg.n_ctx:
            break
        draft_key, verify_key = round_keys(key, step)  # the key schedule (rounds.py)
        committed, length = jnp.asarray([seq + [0] * (width - L)]), jnp.asarray([L])

        # 1. Draft: γ guesses x₁..x_γ and the laws q₁..q_γ they were drawn from.
        drafts, q, dstate = _propose(
            drafter, dparams, dstate, committed, length, draft_key, sp, gamma=gamma
        )
        drafts, q = drafts[0], q[0]  # (γ,), (γ, V)
        # The drafter may propose fewer (prompt lookup, when nothing matches); none may run
        # past the context's end.
        n_draft = min(int(_how_many(drafter, committed, length, gamma=gamma)[0]), cfg.n_ctx - 1 - L)

        # 2. Score: ONE target pass over the sequence and all γ drafts gives p₁..p_{γ+1}.
        p, hidden = target_laws(target, seq + drafts.tolist(), sp)
        p = window(p, L - 1, gamma + 1)  # (γ+1, V): p[i] is the law after x_i (p[0]: after seq)

        # 3. Accept / reject / resample / bonus: the verify rule, exactly as the fast loop
        #    calls it (row 0's key: verify.verify keys row b with fold_in(key, b)).
        v = _judge(jax.random.fold_in(verify_key, 0), drafts, q, p, n_draft)
        n = int(v.n_accepted)

        # 4. Commit x₁..x_n and the extra token y; the rejected drafts simply are not kept.
        new = drafts[:n].tolist() + [int(v.token)]
        if eos_id in new:
            new = new[: new.index(eos_id) + 1]
        new = new[: max_new - n_new][: cfg.n_ctx - L]
        emitted = jnp.asarray([new + [0] * (gamma + 1 - len(new))])
        seq += new
        # The drafter sees what the target saw: its features over [last, x₁..x_γ].
        dstate = _commit(
            drafter,
            dparams,
            dstate,
            window(hidden, L - 1, gamma + 1, axis=1),
            emitted,
            jnp.asarray([L - 1]),
            jnp.asarray([len(seq)]),
        )
    return seq[len(prompt) :]
