"""Speculative decoding with token trees: grow a tree of drafts, verify it in ONE target pass.

One round (`tree_step` = `tree_draft_phase` then `tree_verify_phase`):

1. grow:   the drafter fills a static `Tree` (trees/tree.py) depth by depth. Each node's children
           come from the drafter's law at that node, either `top` (its k most likely tokens,
           deterministic, so each child is a point mass: Medusa's trees) or `sample` (k i.i.d.
           draws from that law: SpecInfer's trees);
2. verify: the target scores every node at once: the block is the tree's tokens, the mask is
           the tree's ancestor matrix, positions are start + depth;
3. walk:   tree.verify_tree accepts at most one child per level (recursive rejection sampling)
           and draws the correction or bonus token;
4. commit: the accepted path's K/V move to consecutive slots (tree.compact_path) so the cache
           looks as if the path had been a chain — only the accepted path survives — and
           speculative.commit_round appends the tokens exactly as for a chain.

Drafters grow trees with `propose_tree(dparams, dstate, seq, length, key, sp, tree, top)`
-> (tokens (B, N), node_q (B, N, V), dstate), using trees/grow.py for the choice itself,
and see the accepted path (as a chain: the target's features along it, the emitted tokens)
with `commit_tree`, which has `commit`'s signature — the draft model needs it to re-read
the accepted tokens, because its own cache holds the tree in node order, not the path.

Static vs traced, and the state, are those of speculative.py (the tree replaces γ; `hist`
counts rounds by accepted depth). Two drivers, as for chains: `_fused_tree` (one
`lax.while_loop`) and `tree_rounds` (a generator yielding each round's `TreeTrace`: the tree
drafted, the path accepted — trees/trace.py turns it into events). What this file
deliberately leaves out: dynamic trees that reshape per round (EAGLE-2).
"""

import time
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.aot import compiled
from nanospec.errors import UserError
from nanospec.model import ModelConfig, forward
from nanospec.sampling import SamplingParams, sampling_probs
from nanospec.speculative import (SpecState, _prefill_jit, at, commit_round, full_capacity,
                                  shared_prefill, top_tokens)
from nanospec.trees.tree import Tree, compact_path, gather_path, tree_positions, verify_tree
from nanospec.trees.grow import Grown


RANKING = SamplingParams.make(1.0)  # top-k siblings are ranked by the drafter's plain softmax


class TreeTrace(NamedTuple):
    """Everything one tree round decided, as fixed-shape arrays (trees/trace.py reads them)."""

    live: jax.Array  # (B,) bool: the row took part in this round
    start: jax.Array  # (B,) int32: committed length before the round
    tokens: jax.Array  # (B, N): node 0 is the last committed token, the rest were drafted
    q_x: jax.Array  # (B, N) each node's probability under the law it was drafted from
    p_x: jax.Array  # (B, N) ... and under the target's law at its parent
    path: jax.Array  # (B, D+1) accepted nodes from the root (tree.TreeVerdict)
    n_accepted: jax.Array  # (B,) accepted drafted nodes = depth reached
    token: jax.Array  # (B,) the correction or bonus token
    is_bonus: jax.Array  # (B,) the path ended at a leaf: `token` was drawn from p there
    n_emitted: jax.Array  # (B,) tokens appended (cut short by EOS, max_new or the context)
    emitted: jax.Array  # (B, D+1) the appended tokens (valid up to n_emitted)
    extra_top: tuple  # (ids, probs) each (B, TOP): the law `token` was drawn from
    token_prob: jax.Array  # (B,) `token`'s probability under that law
    token_p: jax.Array  # (B,) ... and under the target's p at the node where the path stopped


def tree_draft_phase(drafter, dparams, state: SpecState, sp: SamplingParams, tree: Tree, top: bool):
    key = jax.random.fold_in(jax.random.fold_in(state.key, state.step), 0)
    # subtle: `top` siblings are point masses, so WHICH tokens they are is free (exactness only
    # needs node_q to be what was used: one-hot). Ranked by the sampling law, greedy decoding
    # would make every sibling after the first an arbitrary zero-probability token (the law is
    # one-hot), and top-k / top-p cuts would tie the tail at zero the same way; ranked by the
    # drafter's softmax at T = 1 (the same order where the sampling law is not zero), the second
    # child is the drafter's real second guess. Measured: greedy 2,1,1,1 trees accepted exactly
    # what a γ = 4 chain did before this.
    tokens, node_q, dstate = drafter.propose_tree(dparams, state.dstate, state.seq, state.length,
                                                  key, RANKING if top else sp, tree, top)
    return Grown(tokens, node_q), state._replace(dstate=dstate)


def tree_verify_phase(graphdef, params, cfg: ModelConfig, drafter, dparams, state: SpecState,
                      grown: Grown, sp: SamplingParams, max_new, eos_id: int, tree: Tree):
    """One target pass over the whole tree, the walk, compaction and the commit."""
    B = grown.tokens.shape[0]
    start = state.length - 1  # the root's position (and slot: the cache holds length - 1)
    logits, hidden, cache = forward(graphdef, params, grown.tokens, tree_positions(start, tree),
                                    state.cache, block_mask=jnp.asarray(tree.ancestor_mask))
    p = sampling_probs(logits, sp)  # (B, N, V)
    key = jax.random.fold_in(jax.random.fold_in(state.key, state.step), 1)
    v = verify_tree(key, grown.tokens, grown.node_q, p, tree)

    # The appended tokens: the path's drafted nodes, then the correction/bonus token.
    path_tokens = gather_path(grown.tokens, v.path)  # (B, D+1): the root first
    emitted = jnp.concatenate([path_tokens[:, 1:], jnp.zeros((B, 1), jnp.int32)], axis=1)
    emitted = emitted.at[jnp.arange(B), v.n_accepted].set(v.token)  # (B, D+1)
    cache = compact_path(cache, start, v.path, tree)
    new_state, n_emit = commit_round(cfg, state, cache, v.n_accepted, emitted, max_new, eos_id,
                                     jnp.full((B,), tree.max_depth, jnp.int32), v.is_bonus)
    new_state = new_state._replace(dstate=drafter.commit_tree(
        dparams, state.dstate, gather_path(hidden, v.path), emitted, start, new_state.length))
    # The trace (XLA drops it in the fused loop, where nothing reads it).
    rows, parents = jnp.arange(B)[:, None], jnp.maximum(jnp.asarray(tree.parents), 0)
    stop = jnp.take_along_axis(v.path, v.n_accepted[:, None], axis=1)[:, 0]  # (B,) last node
    trace = TreeTrace(~state.done, state.length, grown.tokens,
                      jnp.take_along_axis(grown.node_q, grown.tokens[..., None], axis=2)[..., 0],
                      p[rows, parents[None, :], grown.tokens], v.path, v.n_accepted, v.token,
                      v.is_bonus, n_emit, emitted, top_tokens(v.extra_probs),
                      at(v.extra_probs, v.token), p[jnp.arange(B), stop, v.token])
    return new_state, trace


def tree_step(graphdef, params, cfg, drafter, dparams, state, sp, max_new, eos_id, tree, top):
    grown, state = tree_draft_phase(drafter, dparams, state, sp, tree, top)
    return tree_verify_phase(graphdef, params, cfg, drafter, dparams, state, grown, sp, max_new,
                             eos_id, tree)[0]


@partial(jax.jit, static_argnames=("graphdef", "cfg", "drafter", "eos_id", "tree", "top", "capacity",
                                   "shared"))
def _fused_tree(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp, max_new,
                eos_id, tree, top, capacity=None, shared=False):
    # The state's counters are shaped by the accepted depth: a chain of γ = max_depth.
    # subtle: near the context's end the tree still has its full depth; tokens it accepts past
    # the end are cut like those past max_new (commit_round), which leaves the law of what is
    # kept unchanged. Its block (the tree, and the draft model's [second-last, root, nodes])
    # needs tree.size + 1 slack slots.
    state = shared_prefill(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                           tree.max_depth, capacity or full_capacity(cfg, tree.size + 1), shared)
    step = lambda s: tree_step(graphdef, params, cfg, drafter, dparams, s, sp, max_new, eos_id,
                               tree, top)
    return jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)


def check_tree(cfg: ModelConfig, drafter, lengths, max_new: int, tree: Tree) -> None:
    if not hasattr(drafter, "propose_tree"):
        raise UserError(f"{drafter.name} proposes a single continuation; token trees need a "
                        f"drafter with a law at every node (draft, medusa, eagle or mtp).")
    most = getattr(drafter, "max_gamma", None)
    if most is not None and tree.max_depth > most:
        raise UserError(f"{drafter.name} has {most} heads, so a tree can be at most {most} deep; "
                        f"this one is {tree.max_depth}.")
    if max_new < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {max_new}.")
    longest = int(np.max(np.asarray(lengths)))
    if longest >= cfg.n_ctx:
        raise UserError(f"The prompt is {longest} tokens long but the model's context holds "
                        f"{cfg.n_ctx}, leaving no room to generate; shorten it.")


def tree_generate(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                  sp: SamplingParams, max_new: int, eos_id: int, tree: Tree, top: bool,
                  capacity: int | None = None) -> SpecState:
    """Fused driver: the whole generation with token trees in one jitted `lax.while_loop`."""
    check_tree(cfg, drafter, lengths, max_new, tree)
    return _fused_tree(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp,
                       jnp.int32(max_new), eos_id, tree, top, capacity)


_tree_draft_jit = jax.jit(tree_draft_phase, static_argnames=("drafter", "tree", "top"),
                          donate_argnames=("state",))
_tree_verify_jit = jax.jit(tree_verify_phase, static_argnames=("graphdef", "cfg", "drafter", "eos_id",
                                                               "tree"), donate_argnames=("state",))


def compile_tree_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths, key,
                        sp: SamplingParams, eos_id: int, tree: Tree, top: bool,
                        capacity: int | None = None):
    """Compile `tree_rounds`' three programs ahead of time: (programs, seconds)."""
    capacity = capacity or full_capacity(cfg, tree.size + 1)
    pre, s1 = compiled(_prefill_jit, dict(graphdef=graphdef, cfg=cfg, drafter=drafter,
                                          gamma=tree.max_depth, capacity=capacity),
                       dict(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key))
    dr, s2 = compiled(_tree_draft_jit, dict(drafter=drafter, tree=tree, top=top),
                      dict(dparams=dparams, state=pre.out_info, sp=sp))
    ve, s3 = compiled(_tree_verify_jit, dict(graphdef=graphdef, cfg=cfg, drafter=drafter,
                                             eos_id=eos_id, tree=tree),
                      dict(params=params, dparams=dparams, state=pre.out_info, grown=dr.out_info[0],
                           sp=sp, max_new=jax.ShapeDtypeStruct((), jnp.int32)))
    return (pre, dr, ve), s1 + s2 + s3


def tree_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths, key, sp: SamplingParams,
                max_new: int, eos_id: int, tree: Tree, top: bool, capacity: int | None = None,
                programs: Any = None):
    """Step-wise driver: yields (TreeTrace, SpecState, timings) after every round; the same
    tokens as `tree_generate` for the same key."""
    check_tree(cfg, drafter, lengths, max_new, tree)
    if programs is None:
        programs, _ = compile_tree_rounds(graphdef, params, cfg, drafter, dparams, tokens, lengths,
                                          key, sp, eos_id, tree, top, capacity)
    pre, draft, verify = programs
    state = pre(params=params, dparams=dparams, tokens=tokens, lengths=lengths, key=key)
    max_new = jnp.int32(max_new)
    while not bool(jnp.all(state.done)):
        t0 = time.perf_counter()
        grown, state = draft(dparams=dparams, state=state, sp=sp)
        jax.block_until_ready(grown)
        t1 = time.perf_counter()
        state, trace = verify(params=params, dparams=dparams, state=state, grown=grown, sp=sp,
                              max_new=max_new)
        jax.block_until_ready(state.length)
        yield trace, state, {"draft_s": t1 - t0, "verify_s": time.perf_counter() - t1}
