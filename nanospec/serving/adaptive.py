"""Adaptive speculation: choose γ for every engine step — 0 (plain decoding) where drafting
does not pay, more where it does.

Why γ should move at all: a round at γ costs one target pass over γ+1 tokens per slot plus
γ draft steps, and yields E[tokens] = (1 − α^{γ+1}) / (1 − α) per slot (α: the acceptance
rate; DESIGN.md §6). When the pass is latency-bound (few slots) the extra tokens are nearly
free and γ = 4 wins; when it is compute-bound (many slots) a (γ+1)-token pass costs up to
γ+1 one-token passes and the rejected drafts are work thrown away. So the best γ depends on
the batch the engine computes and on α, and the answer can be 0.

    policy = Goodput(gammas=(0, 1, 2, 4))
    engine = Engine(loop, params, dparams, slots=32, policy=policy)
    engine.probe(prompt)                 # measures what one step costs at each γ, here

Three policies, so that they can be compared side by side (measure/crossover.py):

- `Fixed(γ)`: always γ — what a plain speculative server does;
- `DisableByBatchSize(γ, n)`: vLLM's rule, γ until n requests run at once, then 0;
- `Goodput(γs)`: SmartSpec's idea (Liu et al. 2024) with this project's cost model — the γ
  that maximises E[tokens](α̂, γ) / cost(γ), with cost(γ) the step time this engine measured
  for itself (`Engine.probe`) and α̂ the acceptance its recent rounds measured (`Acceptance`).

Exactness does not depend on the choice: every round, whatever its γ, is the exact rejection-
sampling round, and γ is chosen from the past only (never from this round's random numbers),
so the output law is the target's (tests/statistical/test_adaptive_law.py). What does change
is the sample: at T > 0 the same seed gives different tokens under a different γ schedule.

A γ = 0 step (`plain_round`) is plain decoding on the speculator's own state: one target pass
over one token, a token drawn from p. The draft model is not run, and its cache falls behind;
it is rebuilt from the committed text in one pass when drafting resumes (engine.redraft:
measured, 1 to 2 decode steps' time, where feeding it every plain step costs 5% of each).

What this file leaves out: per-request γ (every slot takes the step's γ), and tree shapes.
"""

from collections import deque
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np

from nanospec.drafters import take_rows
from nanospec.errors import UserError
from nanospec.model import forward
from nanospec.rounds import round_keys
from nanospec.sampling import sample_rows, sampling_probs


def plain_round(spec, params, dparams, state, sp, max_new):
    """γ = 0 on a speculator's state: one target pass over the last token, a token drawn from
    its p, committed as a round that drafted nothing. The draft model is not run, so its cache
    falls behind; the engine rebuilds it (engine.redraft) before the next round that drafts.
    Returns what engine.one_round returns: (state, drafts proposed, accepted), per row."""
    B = state.seq.shape[0]
    last = take_rows(state.seq, state.length - 1, 1)  # (B, 1)
    logits, _, cache = forward(spec.graphdef, params, last, (state.length - 1)[:, None],
                               state.cache)
    p = sampling_probs(logits[:, 0], sp)  # (B, V)
    _, key = round_keys(state.key, state.step)  # this round's verify key, as any round's
    token = sample_rows(key, p)  # (B,)
    none = jnp.zeros(B, jnp.int32)
    state, _ = spec.commit(state, cache, none, token[:, None], max_new)
    return state, none, none


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one round emits per slot, on average: (1 − α^{γ+1}) / (1 − α).

    >>> [round(expected_tokens(0.8, g), 2) for g in (0, 1, 4)]
    [1.0, 1.8, 3.36]
    """
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


class Acceptance:
    """α̂, the acceptance rate of recent rounds: accepted / (accepted + rejections), each count
    decayed by `decay` per speculative step (about the last 1 / (1 − decay) steps).

    accepted / drafted would understate α: after a rejection the later drafts are thrown away
    unjudged (DESIGN.md §6)."""

    def __init__(self, decay: float = 0.95):
        self.decay, self.accepted, self.rejected = decay, 0.0, 0.0

    def add(self, outputs) -> None:
        """Count one step's engine Outputs (those with drafts)."""
        judged = [o for o in outputs if o.drafted]
        if judged:
            self.accepted = self.decay * self.accepted + sum(o.accepted for o in judged)
            self.rejected = self.decay * self.rejected + sum(o.accepted < o.drafted
                                                             for o in judged)

    @property
    def alpha(self) -> float | None:
        seen = self.accepted + self.rejected
        return None if seen < 1.0 else self.accepted / seen


@dataclass
class Fixed:
    """Always γ."""

    gamma: int

    @property
    def gammas(self) -> tuple[int, ...]:
        return (self.gamma,)

    def observe(self, gamma: int, seconds: float) -> None:
        pass

    def choose(self, live: int, acceptance: Acceptance) -> int:
        return self.gamma


@dataclass
class DisableByBatchSize:
    """vLLM's `disable_by_batch_size`: speculate with γ while fewer than `threshold` requests
    run, decode plainly from then on."""

    gamma: int
    threshold: int

    @property
    def gammas(self) -> tuple[int, ...]:
        return (0, self.gamma)

    def observe(self, gamma: int, seconds: float) -> None:
        pass

    def choose(self, live: int, acceptance: Acceptance) -> int:
        return 0 if live >= self.threshold else self.gamma


@dataclass
class Goodput:
    """The γ with the most tokens per second by the cost model: argmax E(α̂, γ) / cost(γ).

    `costs[γ]` (seconds per step) comes from `Engine.probe`, then from the steps. Before any
    round was judged, and once every `explore` plain steps (α̂ cannot change while nothing is
    drafted), it drafts with the largest γ to measure α̂ afresh. `margin`: a move between
    plain decoding and drafting must promise this much more goodput (each resume rebuilds the
    draft cache)."""

    gammas: tuple[int, ...] = (0, 1, 2, 4)
    explore: int = 128
    margin: float = 0.03
    window: int = 15  # steps whose median is a γ's cost
    costs: dict | None = None
    seen: dict = field(default_factory=dict)  # γ -> its last step times
    plain_steps: int = 0  # plain steps in a row so far
    last: int | None = None

    def observe(self, gamma: int, seconds: float) -> None:
        """A step at γ took `seconds`: costs[γ] becomes the median of its last `window` steps
        (the probe's estimate counts as the first). The temperature and the prompts move a
        step's cost; a median, not a mean, so that one slow step (a shared machine) cannot
        make a γ look dear for good — a γ not chosen is never measured again until it is."""
        if self.costs is None:
            return
        seen = self.seen.setdefault(gamma, deque([self.costs[gamma]], maxlen=self.window))
        seen.append(seconds)
        self.costs[gamma] = float(np.median(seen))

    def goodput(self, gamma: int, alpha: float) -> float:
        return expected_tokens(alpha, gamma) / self.costs[gamma]

    def choose(self, live: int, acceptance: Acceptance) -> int:
        if self.costs is None:
            raise UserError("The goodput policy needs the step costs; run engine.probe first.")
        alpha = acceptance.alpha
        if alpha is None or self.plain_steps >= self.explore:
            best = max(self.gammas)
        else:
            best = max(self.gammas, key=lambda g: self.goodput(g, alpha))
            if self.last is not None and (best == 0) != (self.last == 0):
                if self.goodput(best, alpha) < (1 + self.margin) * self.goodput(self.last, alpha):
                    best = self.last  # not worth a switch
        self.plain_steps = self.plain_steps + 1 if best == 0 else 0
        self.last = best
        return best
