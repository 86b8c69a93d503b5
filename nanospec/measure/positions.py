"""Acceptance by draft position at T = 0: drafters asked at every point of the target's text.

At temperature 0 a round that starts with L tokens committed accepts its drafts exactly while
they match the target's greedy text. So one greedy text measures a drafter at every L at once,
without running the loop: give the drafter the state it would have at L (its own `init`, over
the text's tokens and the target's features), take its γ drafts (`propose`), and compare them
with the text. Per draft position k = 1..γ, over every start L:

    top1[k]      draft k is the text's token, whatever the drafts before it (a head's top-1)
    accepted[k]  drafts 1..k are all right: the share of rounds that accept at least k
    reached[k]   accepted[k] / accepted[k−1]: draft k is right once drafts 1..k−1 were

A round yields one token more than it accepts (the verify rule adds one of the target's), so
1 + Σ accepted is the tokens per round, every start weighed alike.

    text, m = greedy_text(bundle, "eagle", prompts, max_new=48, gamma=4)
    pos = acceptance_by_position([bundle.drafter("medusa"), bundle.drafter("eagle")], text, 4)
    pos.accepted  # (2, 4)

What this file deliberately leaves out: temperatures above 0 (acceptance is then a chance,
not a match: the loop's own counters measure it, trace.metrics); `commit` (every start is a
fresh `init`, so a drafter is scored as if the rounds before had been exact); and the loop's
own choice of starts — it starts a round only where the last one ended, so it dwells on the
hard stretches that this measurement weighs like any other.
"""

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.decode import make_loop
from nanospec.errors import UserError
from nanospec.generate import pad_prompts
from nanospec.model import forward
from nanospec.proposers import check_gamma
from nanospec.rounds import generated
from nanospec.sampling import GREEDY
from nanospec.trace import metrics

# A greedy text may part from another at T = 0 only where the target's top two logits are
# within this: passes of different widths (one token, γ + 1, a whole text) sum in different
# orders, ~1e-5 apart in float32, and at such a near-tie either token may win. The statistical
# suite's bound (tests/statistical/test_greedy_identity.py); lesson 03 explains it.
NEAR_TIE = 1e-3


class TextFeatures(NamedTuple):
    """Prompts and their continuations, read by one uncached target pass."""

    seq: np.ndarray  # (B, W) int32: prompt + continuation, 0-padded
    prompt_lengths: np.ndarray  # (B,) tokens of prompt per row
    lengths: np.ndarray  # (B,) tokens per row, prompt and continuation
    hidden: jax.Array  # (B, W, C) the target's feature at every position (what heads read)
    argmax: np.ndarray  # (B, W) the target's greedy choice of the token after each position
    gap: np.ndarray  # (B, W) its top logit minus the runner-up's there: small = a near-tie

    def continuations(self) -> list[list[int]]:
        """Each row's tokens after its prompt."""
        return [
            self.seq[b, p:n].tolist()
            for b, (p, n) in enumerate(zip(self.prompt_lengths, self.lengths))
        ]

    def is_greedy(self) -> bool:
        """Is every continuation token the target's argmax after the tokens before it? Then
        the text is greedy decoding's (T = 0), and acceptance_by_position measures rounds."""
        return all(
            (self.argmax[b, p - 1 : n - 1] == self.seq[b, p:n]).all()
            for b, (p, n) in enumerate(zip(self.prompt_lengths, self.lengths))
        )

    def continuation_gaps(self) -> np.ndarray:
        """The top-2 gap behind every continuation token, all rows in one flat array."""
        return np.concatenate(
            [
                self.gap[b, p - 1 : n - 1]
                for b, (p, n) in enumerate(zip(self.prompt_lengths, self.lengths))
            ]
        )

    def off_greedy(self) -> list[tuple[int, int, float]]:
        """Every continuation token that is not the target's argmax, as (row, token index,
        the top-2 gap there). At T = 0 each should be a near-tie (gap < NEAR_TIE)."""
        return [
            (b, int(t), float(self.gap[b, p - 1 + t]))
            for b, (p, n) in enumerate(zip(self.prompt_lengths, self.lengths))
            for t in np.flatnonzero(self.argmax[b, p - 1 : n - 1] != self.seq[b, p:n])
        ]

    def parted(self, outputs: list[list[int]]) -> list[tuple[int, int, float]]:
        """Where each output first parts from this text's continuation (a greedy reference),
        as (row, token index, the top-2 gap there; inf if one is cut short), for every row
        that does. At T = 0 each should be a near-tie (gap < NEAR_TIE)."""
        out = []
        for b, (mine, ref) in enumerate(zip(outputs, self.continuations())):
            if mine != ref:
                t = next(
                    (i for i, (x, y) in enumerate(zip(mine, ref)) if x != y),
                    min(len(mine), len(ref)),
                )
                cut = t >= min(len(mine), len(ref))
                out.append(
                    (b, t, np.inf if cut else float(self.gap[b, self.prompt_lengths[b] - 1 + t]))
                )
        return out


def text_features(
    graphdef, params, prompts: list[list[int]], continuations: list[list[int]]
) -> TextFeatures:
    """One uncached target pass (`model.forward`) over each prompt + continuation."""
    rows = [list(p) + list(c) for p, c in zip(prompts, continuations)]
    W = max(map(len, rows))
    seq = np.array([r + [0] * (W - len(r)) for r in rows], np.int32)  # (B, W)
    logits, hidden, _ = jax.jit(forward, static_argnums=0)(
        graphdef, params, seq, np.arange(W)[None]
    )
    top2 = np.asarray(jax.lax.top_k(logits, 2)[0])  # (B, W, 2): best, runner-up
    return TextFeatures(
        seq,
        np.array([len(p) for p in prompts]),
        np.array([len(r) for r in rows]),
        hidden,
        np.asarray(jnp.argmax(logits, -1)),  # (B, W, V) -> (B, W)
        top2[..., 0] - top2[..., 1],
    )


def greedy_text(
    bundle, method: str, prompts: list[list[int]], max_new: int, gamma: int = 4
) -> tuple[TextFeatures, dict | None]:
    """Run `method`'s loop (decode.make_loop: "ar" or a drafter) at T = 0 on the prompts for
    max_new tokens, and read its output with text_features. Returns the features and the
    loop's acceptance metrics (trace.metrics; None for "ar"). At T = 0 every method writes
    the same text: `is_greedy()` checks it."""
    cfg, graphdef, params = bundle.models["target"]
    tokens, lengths = pad_prompts(prompts, cfg.n_ctx)
    loop, dparams = make_loop(bundle, method, gamma)
    state, stats = loop.run(params, dparams, tokens, lengths, jax.random.key(0), GREEDY, max_new)
    text = text_features(graphdef, params, prompts, generated(state, lengths))
    return text, None if method == "ar" else metrics(*stats.counters(state))


@partial(jax.jit, static_argnums=(0, 5))
def greedy_drafts(drafters, dparams, seq, hidden, starts, gamma):
    """Each drafter's γ drafts at T = 0 for a round starting at every committed length in
    starts (B, J), and how many of them it would have verified (`draft_length`).

    seq (B, W), hidden (B, W, C) -> drafts (B, J, D, γ), proposed (B, J, D), D = len(drafters).
    """

    def at(row, h, length):  # (W,), (W, C), (): one round, every drafter
        # subtle: `init` reads the whole padded text, not just its first L tokens; attention is
        # causal and the drafters keep only what lies before L, so that is the same state.
        drafts, proposed = [], []
        for drafter, dp in zip(drafters, dparams):
            dstate = drafter.init(dp, row[None], length[None], h[None])
            x, _, _ = drafter.propose(
                dp, dstate, row[None], length[None], jax.random.key(0), GREEDY, gamma
            )  # T = 0: key unread
            drafts.append(x[0])  # (γ,)
            proposed.append(drafter.draft_length(row[None], length[None], gamma)[0])
        return jnp.stack(drafts), jnp.stack(proposed)  # (D, γ), (D,)

    return jax.vmap(jax.vmap(at, (None, None, 0)))(seq, hidden, starts)


class ByPosition(NamedTuple):
    """Every drafter's drafts at every start of a text, and the shares they give."""

    starts: np.ndarray  # (B, J) committed length L at each round's start
    valid: np.ndarray  # (B, J) the round's γ drafts all fall inside the text (others: padding)
    truth: np.ndarray  # (B, J, γ) the text's tokens where the drafts go
    drafts: np.ndarray  # (B, J, D, γ) each drafter's drafts
    right: np.ndarray  # (B, J, D, γ) draft k was proposed (draft_length) and is the text's

    @property
    def rounds(self) -> int:
        """How many starts were measured (the valid ones)."""
        return int(self.valid.sum())

    @property
    def top1(self) -> np.ndarray:
        """(D, γ): how often draft k is right, whatever the drafts before it."""
        return self.right[self.valid].mean(0)

    @property
    def accepted(self) -> np.ndarray:
        """(D, γ): how often drafts 1..k are all right (a round accepts at least k)."""
        return np.cumprod(self.right[self.valid], axis=-1).mean(0)

    @property
    def reached(self) -> np.ndarray:
        """(D, γ): how often draft k is right once drafts 1..k−1 were; NaN if never reached."""
        before = np.concatenate([np.ones_like(self.accepted[:, :1]), self.accepted[:, :-1]], 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(before > 0, self.accepted / before, np.nan)

    @property
    def tokens_per_round(self) -> np.ndarray:
        """(D,): 1 + Σ_k accepted[k], the accepted drafts and the target's token."""
        return 1 + self.accepted.sum(-1)

    def table(self, names, share: str = "accepted") -> tuple[list[str], list[list[str]]]:
        """(columns, rows) for measure.tables.table: a row per drafter, a column per draft position, of
        one share ("accepted", "reached" or "top1"); "accepted" ends with tokens per round."""
        values = getattr(self, share)  # (D, γ)
        total = share == "accepted"
        columns = ["", *(f"draft {k}" for k in range(1, values.shape[1] + 1))]
        rows = [[n, *(f"{a:.2f}" for a in v)] for n, v in zip(names, values)]
        if total:
            columns.append("tokens / round")
            rows = [r + [f"{t:.2f}"] for r, t in zip(rows, self.tokens_per_round)]
        return columns, rows

    def plot(self, ax, names, title: str = "T = 0") -> None:
        """The accepted share by position on a matplotlib axes, a line per drafter."""
        ks = range(1, self.accepted.shape[1] + 1)
        for n, a in zip(names, self.accepted):
            ax.plot(ks, a, "o-", label=n)
        ax.set_xticks(ks)
        ax.set_xlabel("draft k")
        ax.set_ylim(0, 1)
        ax.set_ylabel("rounds accepting drafts 1..k")
        ax.legend()
        ax.set_title(title)


def acceptance_by_position(drafters, text: TextFeatures, gamma: int) -> ByPosition:
    """Score drafters on a greedy text: a round of γ drafts at every committed length L from
    each prompt's end to where the last draft is the text's last token.

    drafters: (drafter, dparams) pairs (as decode.Bundle.drafter returns), any that keep the
    Drafter contract; text: the target's greedy text (text_features; see is_greedy). Returns
    ByPosition with J = the longest continuation − γ + 1 starts per row (B, J, D, γ arrays).
    A drafter that may propose fewer than γ (`draft_length`) is scored on those it proposes.

    Example: on the text "a b c a b c a b" (prompt "a b c a", γ = 4) there is one start,
    L = 4, and the text there is [b, c, a, b]. Prompt lookup finds "a" at 0 and copies what
    followed, wrapping with the period 3: [b, c, a, b], so its accepted row is [1, 1, 1, 1].
    """
    if gamma < 1:
        raise UserError(f"gamma is the number of drafts a round proposes, at least 1; got {gamma}.")
    for drafter, _ in drafters:
        check_gamma(drafter, gamma)
    room = text.lengths - text.prompt_lengths - gamma + 1  # (B,) starts per row
    if room.max() < 1:
        raise UserError(f"No continuation is {gamma} tokens long: nothing to compare drafts with.")
    starts = text.prompt_lengths[:, None] + np.arange(room.max())  # (B, J)
    valid = starts + gamma <= text.lengths[:, None]  # (B, J): all γ inside the text
    starts = np.where(valid, starts, starts[:, :1])  # padding: any start will do
    B = len(starts)
    where = np.minimum(starts[..., None] + np.arange(gamma), text.seq.shape[1] - 1)  # (B, J, γ)
    truth = text.seq[np.arange(B)[:, None, None], where]  # (B, J, γ)
    fixed, dparams = tuple(d for d, _ in drafters), tuple(p for _, p in drafters)
    drafts, proposed = map(
        np.asarray, greedy_drafts(fixed, dparams, text.seq, text.hidden, starts, gamma)
    )  # (B, J, D, γ), (B, J, D)
    right = (drafts == truth[:, :, None]) & (np.arange(gamma) < proposed[..., None])
    return ByPosition(starts, valid, truth, drafts, right)  # right: (B, J, D, γ)
