"""Checks for exercise 4: one greedy round with a KV cache, and the rollback after it.

The learner's `verify_and_rollback` runs seven rounds (γ = 4) on a tiny random model. The
checker chooses each round's drafts from the model's own greedy text, so that the rounds
accept 2, 0, 4 (the bonus), 1, 3, 4 and 0 drafts, and after every round it checks that the
cache holds the text but its last token and that its keys and values equal a fresh pass over
that text (lesson 07 checks the same two things: the length after every round, the contents
once, after its run). Nothing is sampled: every check is exact, and deterministic.

The model's weights are scaled up (×20) so that its greedy choices depend on the context and
never come near a tie; the learner's verdicts are judged against the logits their own pass
returned, so rounding in the last digit cannot fail a correct rollback.
"""

from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nanospec.cache import KVCache, init_cache, rollback
from nanospec.exercises.learner import Failure, plain
from nanospec.model import GPT, ModelConfig, forward

GAMMA = 4
PLAN = (2, 0, 4, 1, 3, 4, 0)  # drafts accepted in each round
PROMPT = [3, 14, 15, 9, 26, 5]
SLOTS = 48  # cache capacity, and the width of the fresh pass: PROMPT + 7·(γ + 1) + γ fits


@cache
def _tiny():
    """(config, params, jitted pass on a cache, jitted fresh pass) of a tiny random model."""
    cfg = ModelConfig.tiny(vocab_size=64, n_ctx=64)
    graphdef, params = nnx.split(GPT(cfg, nnx.Rngs(0)))
    params = jax.tree.map(lambda x: x * 20 if x.ndim == 2 else x, params)  # sharper logits

    @jax.jit
    def step(p, tokens, positions, kv):  # (logits (1, L, V), hidden, kv) for L tokens
        with jax.default_matmul_precision("highest"):  # full float32 on GPUs too
            return forward(graphdef, p, tokens, positions, kv)

    @jax.jit
    def fresh(p, tokens):  # (logits (1, SLOTS, V), kv): no cache, the whole row at once
        with jax.default_matmul_precision("highest"):
            logits, _, kv = forward(graphdef, p, tokens, jnp.arange(SLOTS)[None])
        return logits, kv

    return cfg, params, step, fresh


class Target:
    """The target as the exercise hands it over: one call is one pass; calls are recorded."""

    def __init__(self):
        self.cfg, self.params, self.step, _ = _tiny()
        self.calls: list[tuple[list[int], np.ndarray]] = []  # (block, logits) per pass
        self.written: KVCache | None = None  # the cache the last pass returned

    def __call__(self, tokens, kv: KVCache):
        block = [int(t) for t in np.asarray(tokens).reshape(-1)]
        positions = kv.length[:, None] + jnp.arange(len(block))[None]  # (1, len(block))
        logits, _, kv = self.step(self.params, jnp.asarray([block], jnp.int32), positions, kv)
        self.calls.append((block, np.asarray(logits[0])))
        self.written = kv
        return np.asarray(logits[0]), kv  # (len(block), V)

    def prefill(self, text: list[int]) -> KVCache:
        """A cache holding `text` but its last token (the invariant at the start of a round)."""
        c = self.cfg
        _, kv = self(text[:-1], init_cache(c.n_layer, c.n_head, c.head_dim, 1, SLOTS))
        self.calls.clear()
        return kv


def _fresh(text: list[int]) -> tuple[np.ndarray, KVCache]:
    """The greedy choice after every prefix of `text`, and the keys and values of a fresh
    pass over it (no cache; padding after the text cannot change them: attention is causal)."""
    _, params, _, fresh = _tiny()
    tokens = np.zeros((1, SLOTS), np.int32)
    tokens[0, : len(text)] = text
    logits, kv = fresh(params, jnp.asarray(tokens))
    return np.argmax(np.asarray(logits[0]), axis=-1)[: len(text)], kv


def _greedy(text: list[int], count: int) -> list[int]:
    """The next `count` tokens greedy decoding writes after `text`, by fresh passes."""
    out = list(text)
    for _ in range(count):
        out.append(int(_fresh(out)[0][-1]))
    return out[len(text) :]


def check_verify_and_rollback(verify_and_rollback):
    """Exercise 4: seven rounds; after each, the verdict, the cache's length and its contents."""
    target, rng = Target(), np.random.default_rng(0)
    text = list(PROMPT)
    kv = target.prefill(text)
    for r, planned in enumerate(PLAN, start=1):
        truth = _greedy(text, planned + 1)
        wrong = (truth[planned] + 1 + int(rng.integers(63))) % 64  # never the greedy token
        drafts = (truth[:planned] + [wrong] + rng.integers(0, 64, GAMMA).tolist())[:GAMMA]
        start, given = int(kv.length[0]), kv
        out = verify_and_rollback(target, kv, text[-1], list(drafts))
        where = f"in round {r} (last = {text[-1]}, drafts {drafts})"
        choice = _one_pass(target, text[-1], drafts, where)
        n, token, kv = _verdict(out, where)
        _check_written(kv, given, target.written, start, where)
        want = _greedy_verdict(drafts, choice)
        if (n, token) != want:
            raise Failure(
                f"{where} the target's greedy choices (the argmax of each logits row) "
                f"are {choice}, so (n_accepted, token) should be {want}; yours is "
                f"{(n, token)}. Row i scores the token after block[i]: row 0 judges "
                f"drafts[0], and the first draft that differs is replaced by its row's "
                f"argmax."
            )
        text += drafts[:n] + [token]
        _check_length(int(kv.length[0]), start, len(text), n, drafts, token, where)
        _check_contents(kv, text, where)
    yield (
        f"{len(PLAN)} rounds of γ = {GAMMA}, accepting {', '.join(map(str, PLAN))}: one pass "
        f"each over [last] + drafts, the right verdicts"
    )
    yield "after every round the cache holds the text but its last token: rollback by length"
    if text[len(PROMPT) :] != _greedy(PROMPT, len(text) - len(PROMPT)):
        raise Failure("the text differs from greedy decoding by fresh passes.")
    yield (
        "its keys and values equal a fresh pass over the text every round, and the text is "
        "greedy decoding's"
    )


def _one_pass(target: Target, last: int, drafts: list[int], where: str) -> list[int]:
    """The target's argmax per row of the learner's one pass, or a Failure about the pass."""
    want = [last, *drafts]
    if len(target.calls) != 1:
        raise Failure(
            f"{where} your verify_and_rollback called target {len(target.calls)} "
            f"times; ONE pass over [last] + drafts = {want} scores every draft."
        )
    block, logits = target.calls.pop()
    if block != want:
        raise Failure(
            f"{where} your target pass was over {block}; it must be over [last] + "
            f"drafts = {want}. The cache holds the text but `last`, so `last` goes in "
            f"first, and its logits row judges the first draft."
        )
    return np.argmax(logits, axis=-1).tolist()


def _verdict(out, where: str) -> tuple[int, int, KVCache]:
    try:
        n, token, kv = out
        n, token = int(n), int(token)
    except (TypeError, ValueError):
        raise Failure(
            f"verify_and_rollback must return (n_accepted, token, cache); {where} "
            f"yours returned {plain(out)!r}."
        ) from None
    if not isinstance(kv, KVCache):
        raise Failure(
            f"{where} the third thing you returned is a {type(kv).__name__}, not the "
            f"cache: return the KVCache that target gave back, rolled back."
        )
    length = jnp.asarray(kv.length, jnp.int32).reshape(-1)
    cfg = _tiny()[0]  # a buffer is (B·H, S, Dh) (nanospec/cache.py), here B = 1
    if length.shape != (1,) or kv.k[0].shape != (cfg.n_head, SLOTS, cfg.head_dim):
        raise Failure(
            f"{where} the cache you returned has length {plain(kv.length)} and buffers "
            f"of shape {kv.k[0].shape}: keep the buffers as they are (1 row, {SLOTS} "
            f"slots) and roll back by setting the length alone."
        )
    return n, token, rollback(kv, length)


def _check_written(kv: KVCache, given: KVCache, written: KVCache, start: int, where: str):
    """The cache returned must be the one the pass wrote into, not the one handed in."""
    mine, before, after = (np.asarray(c.k[0][:, start]) for c in (kv, given, written))  # (H, Dh)
    if np.array_equal(mine, before) and not np.array_equal(before, after):
        raise Failure(
            f"{where} your cache has none of this round's keys: slot {start}, where the pass "
            f"wrote the keys of `last`, holds what it held before the pass. Return the cache "
            f"target returned, rolled back, not the one you were given."
        )


def _greedy_verdict(drafts: list[int], choice: list[int]) -> tuple[int, int]:
    n = 0
    while n < len(drafts) and drafts[n] == choice[n]:
        n += 1
    return n, int(choice[n])


def _check_length(got: int, start: int, size: int, n: int, drafts, token: int, where: str):
    """The cache must hold the text but its last token: size − 1 slots."""
    want = size - 1
    if got == want:
        return
    hint = ""
    if got == want - 1:
        hint = (
            f" One slot short: the block began with `last`, whose keys the pass wrote at slot "
            f"{start}; keep it and the {n} accepted drafts: {start} + {n} + 1 = {want}."
        )
    elif got == start + GAMMA + 1:
        hint = (
            " You never rolled back: the cache still counts all γ + 1 slots of the block, the "
            "rejected drafts' keys included."
        )
    elif got == want + 1 and n < len(drafts):
        hint = (
            f" One slot too many: slot {want} holds the keys of the rejected draft "
            f"{drafts[n]}, not of the new token {token}: that one leads the next block, so "
            f"no pass has read it yet."
        )
    elif got == want + 1:
        hint = (
            f" One slot too many: the bonus token {token} leads the next block, so no pass "
            f"has read it yet, and slot {want} holds no keys of it."
        )
    raise Failure(
        f"{where} the text is now {size} tokens, and the cache must hold all but the "
        f"last: {want}. Yours holds {got}." + hint
    )


def _check_contents(kv: KVCache, text: list[int], where: str) -> None:
    """Slots below the length equal a fresh pass over the text (lesson 07's check after its
    run, made here after every round)."""
    n = len(text) - 1
    _, fresh = _fresh(text)
    for name, ours, theirs in (("keys", kv.k, fresh.k), ("values", kv.v, fresh.v)):
        for layer, (a, b) in enumerate(zip(ours, theirs)):
            a, b = np.asarray(a[:, :n]), np.asarray(b[:, :n])  # (H, n, Dh): one row, B = 1
            gap = np.abs(a - b).max(axis=(0, 2)) / (np.abs(b).max() + 1e-9)  # per slot
            if gap.max() > 1e-3:
                slot = int(np.argmax(gap > 1e-3))
                raise Failure(
                    f"{where} the cache's {name} at slot {slot} (layer {layer}) differ "
                    f"from a fresh pass over the text by {gap[slot]:.0%} of their size: "
                    f"the slots below the length must hold the text's own keys and "
                    f"values, token {text[slot]} at slot {slot}."
                )
