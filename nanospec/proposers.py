"""Proposers: what drafts a round of speculation, and what it learns from each verdict.

A round of speculative.py is put together from a proposer, a judge and hooks. The proposer is
step 1 of the README's five: it drafts (`propose`) and sees what the target saw after the
verdict (`update`). `Chain` drafts γ tokens in a row with any drafter (drafters.py,
heads/drafters.py); trees/loop.py's `TreeProposer` grows a token tree, ssd/loop.py's
`SSDProposer` looks its drafts up in a speculation cache.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nanospec.drafters import Drafter
from nanospec.errors import UserError
from nanospec.sampling import SamplingParams


class Proposal(NamedTuple):  # what a chain proposer hands to the judge
    drafts: jax.Array  # (B, γ) int32
    q: jax.Array  # (B, γ, V) the law each draft was drawn from
    n_draft: jax.Array  # (B,) int32: how many of them are proposed (the rest: padding)
    cached: jax.Array  # (B,) bool: drafted before the round began (SSD's cache), else False


def check_gamma(drafter: Drafter, gamma: int) -> None:
    """Heads draft one token per head: γ cannot exceed how many they have."""
    most = drafter.max_gamma
    if most is not None and gamma > most:
        raise UserError(
            f"{drafter.name} has {most} heads, so gamma can be at most {most}; got {gamma}."
        )


class Proposer:
    """What drafts a round, and what it learns from the verdict. Must implement `init` and
    `propose`; `depth` (the most drafts one round can accept) and `block` (the slots past the
    committed length a round may write: cache.capacity's slack). May override the rest.

    Its state (the draft model's KV cache, a speculation cache, nothing at all) lives in
    `SpecState.dstate`; the round passes it in and takes the new one back, so a proposer is a
    frozen dataclass of static settings — part of the loop's static argument to `jax.jit`.
    """

    drafter: Drafter
    depth: int
    block: int
    gamma_can_change = False  # the serving engine may change γ between rounds (serving/steps.py)
    predrafts = False  # drafts before the round begins (SSD): its hit rate is reported

    def settings(self) -> dict:
        """How it drafts, for a run's stats and its run_start event (decode.py)."""
        return {}

    def kv_models(self) -> tuple:
        """The configs of the models whose KV cache it keeps per row (samples.plan_chunks)."""
        return self.drafter.kv_models()

    def check(self) -> None:
        """Refuse settings this proposer cannot draft with (a UserError in one sentence)."""

    def init(self, dparams, tokens, lengths, hidden, capacity: int) -> Any:
        """Read the padded prompt (B, Lb) and the target's features over it: the first state."""
        raise NotImplementedError

    def propose(self, dparams, pstate, seq, length, key, sp: SamplingParams) -> tuple[Any, Any]:
        """(the round's proposal, the new state). The proposal is what the judge reads:
        `Proposal` for a chain, trees.grow.Grown for a tree."""
        raise NotImplementedError

    def update(self, dparams, pstate, hidden, emitted, start, length) -> Any:
        """See what the target saw after the verdict: its features along the accepted path from
        position `start`, the tokens appended (`emitted`) and the new committed `length`."""
        return pstate

    def resync(self, dparams, pstate, seq, length, capacity: int) -> Any:
        """The state rebuilt from the committed text alone, after rounds that drafted nothing
        (the engine's plain steps, serving/adaptive.py) left it behind."""
        return self.init(dparams, seq, length, None, capacity)


@dataclass(frozen=True)
class Chain(Proposer):
    """γ drafts in a row from any drafter (drafters.py, heads/drafters.py)."""

    drafter: Drafter
    gamma: int

    @property
    def depth(self) -> int:
        return self.gamma

    @property
    def block(self) -> int:  # tokens in one verify pass
        return self.gamma + 1

    @property
    def gamma_can_change(self) -> bool:  # a drafter that needs no target features resyncs
        return not self.drafter.reads_features

    def check(self) -> None:
        check_gamma(self.drafter, self.gamma)

    def settings(self) -> dict:
        return {"gamma": self.gamma}

    def init(self, dparams, tokens, lengths, hidden, capacity):
        return self.drafter.init(dparams, tokens, lengths, hidden, capacity=capacity)

    def propose(self, dparams, pstate, seq, length, key, sp):
        """The drafter's γ drafts (or, if its drafts vary, up to γ) with their laws."""
        d = self.drafter
        drafts, q, pstate = d.propose(dparams, pstate, seq, length, key, sp, self.gamma)
        n_draft = d.draft_length(seq, length, self.gamma)
        return Proposal(drafts, q, n_draft, jnp.zeros(seq.shape[0], bool)), pstate

    def update(self, dparams, pstate, hidden, emitted, start, length):
        return self.drafter.commit(dparams, pstate, hidden, emitted, start, length)
