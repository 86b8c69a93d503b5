"""Adaptive speculation: choose γ for every engine step, by whether drafting pays.

Each step gets γ = 0 (plain decoding) where drafting does not pay, and more where it does.

Why γ should move at all: a round at γ costs one target pass over γ+1 tokens per slot plus
γ draft steps, and yields E[tokens] = (1 − α^{γ+1}) / (1 − α) per slot (α: the acceptance
rate; docs/design.md §6). When the pass is latency-bound (few slots) the extra tokens are nearly
free and γ = 4 wins; when it is compute-bound (many slots) a (γ+1)-token pass costs up to
γ+1 one-token passes and the rejected drafts are work thrown away. So the best γ depends on
the batch the engine computes and on α, and the answer can be 0.

    policy = Goodput(gammas=(0, 1, 2, 4))
    engine = Engine(loop, params, dparams, slots=32, policy=policy)
    engine.probe(prompt)                 # measures what one step costs at each γ, here

Three policies, so that they can be compared side by side (load/crossover.py):

- `Fixed(γ)`: always γ — what a plain speculative server does;
- `DisableByBatchSize(γ, n)`: vLLM's rule, γ until n requests run at once, then 0;
- `Goodput(γs)`: SmartSpec's idea (Liu et al. 2024) with this project's cost model — the γ
  that maximises E[tokens](α̂, γ) / cost(γ), with cost(γ) the step time this engine measured
  for itself (`Engine.probe`, then its steps) plus the time its caller takes between steps,
  and α̂ the acceptance its recent rounds measured (`Acceptance`; with a drafter that
  sometimes finds nothing to draft, E counts those rounds as one token).

Exactness does not depend on the choice: every round, whatever its γ, is the exact rejection-
sampling round, and γ is chosen from the past only (never from this round's random numbers),
so the output law is the target's (tests/statistical/test_adaptive_law.py). What does change
is the sample: at T > 0 the same seed gives different tokens under a different γ schedule.

A γ = 0 step (`plain_round`) is plain decoding on the speculator's own state: one target pass
over one token, a token drawn from p. The draft model is not run, and its cache falls behind;
it is rebuilt from the committed text in one pass when drafting resumes (steps.redraft: cheaper
than feeding it every plain step; docs/results.md, "Why the code is shaped as it is").

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
    falls behind; the engine rebuilds it (steps.redraft) before the next round that drafts.
    Returns what steps.one_round returns: (state, drafts proposed, accepted), per row."""
    B = state.seq.shape[0]
    last = take_rows(state.seq, state.length - 1, 1)  # (B, 1)
    logits, _, cache = forward(
        spec.graphdef, params, last, (state.length - 1)[:, None], state.cache
    )
    p = sampling_probs(logits[:, 0], sp, state.n_new)  # (B, V)
    _, key = round_keys(state.key, state.step)  # this round's verify key, as any round's
    token = sample_rows(key, p)  # (B,)
    none = jnp.zeros(B, jnp.int32)
    state, _ = spec.commit(state, cache, none, token[:, None], max_new)
    return state, none, none


def gammas_up_to(gamma: int) -> tuple[int, ...]:
    """The γs an adaptive engine may take with `gamma` at most: 0 (plain), the powers of two
    below it, and γ itself — each one compiled step program, so a few, not all.

    >>> gammas_up_to(4), gammas_up_to(12), gammas_up_to(1)
    ((0, 1, 2, 4), (0, 1, 2, 4, 8, 12), (0, 1))
    """
    return tuple(sorted({0, gamma} | {2**i for i in range(gamma.bit_length()) if 2**i < gamma}))


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one round emits per slot, on average: (1 − α^{γ+1}) / (1 − α).

    >>> [round(expected_tokens(0.8, g), 2) for g in (0, 1, 4)]
    [1.0, 1.8, 3.36]
    """
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


class Acceptance:
    """What recent rounds measured, each count decayed by `decay` per drafting step (about
    the last 1 / (1 − decay) steps):

    - α̂, the acceptance rate: accepted / (accepted + rejections). accepted / drafted would
      understate α: after a rejection the later drafts are thrown away unjudged (docs/design.md §6).
    - π̂, the share of a slot's rounds that had drafts at all. The draft model always drafts
      (π = 1); prompt lookup drafts all or nothing, nothing where the text has no match, and
      such a round yields one token, not E(α̂, γ). α̂ is measured on the other rounds only, so
      without π̂ a drafter that seldom finds a match would look as good as one that always does.
    """

    def __init__(self, decay: float = 0.95):
        self.decay, self.accepted, self.rejected = decay, 0.0, 0.0
        self.rounds, self.proposed = 0.0, 0.0

    def add(self, outputs, drafting: bool = True) -> None:
        """Count one step's engine Outputs: a drafting step's (γ > 0) rounds, with drafts or
        without, and the drafts judged."""
        if not drafting:
            return
        judged = [o for o in outputs if o.drafted]
        self.rounds = self.decay * self.rounds + sum(bool(o.tokens) for o in outputs)
        self.proposed = self.decay * self.proposed + len(judged)
        if judged:
            self.accepted = self.decay * self.accepted + sum(o.accepted for o in judged)
            self.rejected = self.decay * self.rejected + sum(o.accepted < o.drafted for o in judged)

    @property
    def alpha(self) -> float | None:
        seen = self.accepted + self.rejected
        return None if seen < 1.0 else self.accepted / seen

    @property
    def proposing(self) -> float:
        """π̂ (1 until a drafting round has been seen)."""
        return 1.0 if self.rounds < 1.0 else min(self.proposed / self.rounds, 1.0)

    def tokens(self, gamma: int) -> float | None:
        """Tokens a slot's round at γ yields on average: 1 + π̂ · (E(α̂, γ) − 1); None before
        any draft was judged.

        >>> a = Acceptance(); a.accepted, a.rejected, a.rounds, a.proposed = 8, 2, 10, 5
        >>> round(a.tokens(4), 3), round(expected_tokens(0.8, 4), 3)  # half the rounds drafted
        (2.181, 3.362)
        """
        if self.alpha is None:
            return None
        return 1.0 + self.proposing * (expected_tokens(self.alpha, gamma) - 1.0)


class Policy:
    """What the engine asks of a γ policy: the γ it may choose (`gammas`, each one compiled
    step), and each step's (`choose`). It is told what every step cost (`observe`) and how
    long the caller took between steps (`between`); a policy that needs neither leaves them.
    `costs` ({γ: seconds a step}) is set by Engine.probe."""

    gammas: tuple[int, ...] = ()  # the γ it may choose: one compiled step each
    costs: dict | None = None

    def choose(self, live: int, acceptance: "Acceptance") -> int:
        """This step's γ, with `live` slots running and the acceptance measured so far."""
        raise NotImplementedError

    def observe(self, gamma: int, seconds: float) -> None:
        """A step at γ took `seconds`."""

    def between(self, seconds: float) -> None:
        """The engine's caller took `seconds` between two steps."""


@dataclass
class Fixed(Policy):
    """Always γ."""

    gamma: int

    @property
    def gammas(self) -> tuple[int, ...]:
        return (self.gamma,)

    def choose(self, live: int, acceptance: Acceptance) -> int:
        return self.gamma


@dataclass
class DisableByBatchSize(Policy):
    """vLLM's `disable_by_batch_size`: speculate with γ while fewer than `threshold` requests
    run, decode plainly from then on."""

    gamma: int
    threshold: int

    @property
    def gammas(self) -> tuple[int, ...]:
        return (0, self.gamma)

    def choose(self, live: int, acceptance: Acceptance) -> int:
        return 0 if live >= self.threshold else self.gamma


@dataclass
class Goodput(Policy):
    """The γ with the most tokens per second by the cost model: argmax E(α̂, γ) / cost(γ).

    `costs[γ]` (seconds per step) comes from `Engine.probe`, then from the steps, and the
    `overhead` between steps is added to every γ's (`between`). Before any
    round was judged, and once every `explore` plain steps (α̂ cannot change while nothing is
    drafted), it drafts with the largest γ to measure α̂ afresh. `margin`: a move between
    plain decoding and drafting must promise this much more goodput (each resume rebuilds the
    draft cache)."""

    gammas: tuple[int, ...] = (0, 1, 2, 4)
    explore: int = 128
    margin: float = 0.03
    window: int = 15  # recent steps that set a γ's cost
    costs: dict | None = None
    seen: dict = field(default_factory=dict)  # γ -> its last step times
    plain_steps: int = 0  # plain steps in a row so far
    last: int | None = None
    overhead: float = 0.0  # seconds between steps: the caller's work, paid once a step
    gaps: deque = field(default_factory=lambda: deque(maxlen=63))

    def between(self, seconds: float) -> None:
        """The engine's caller took `seconds` between two steps (a server hands out each
        step's tokens, detokenizes, streams): a cost per step whatever its γ, so a round that
        emits more tokens spreads it thinner. `overhead` is the median of recent gaps (a
        median: a gap in which requests were admitted is not a step's usual cost)."""
        self.gaps.append(seconds)
        self.overhead = float(np.median(self.gaps))

    def observe(self, gamma: int, seconds: float) -> None:
        """A step at γ took `seconds`: costs[γ] becomes the mean of its last `window` steps
        (the probe's estimate counts as the first) without the fastest and the slowest.

        The temperature and the prompts move a step's cost. Not a median: a step costs one of
        two things — the (γ+1)-token pass, or a one-token pass when no slot had drafts (prompt
        lookup that found no match, speculative.py) — and E counts both kinds of round, so
        the cost must average them too; a median would take whichever kind is the majority.
        Trimmed, so that one slow step (a shared machine) cannot make a γ look dear for good
        — a γ not chosen is not measured again until it is."""
        if self.costs is None:
            return
        seen = self.seen.setdefault(gamma, deque([self.costs[gamma]], maxlen=self.window))
        seen.append(seconds)
        kept = sorted(seen)[1:-1] if len(seen) > 2 else list(seen)
        self.costs[gamma] = float(np.mean(kept))

    def goodput(self, gamma: int, acceptance: Acceptance) -> float:
        """Tokens a second a step at γ promises per slot: acceptance.tokens(γ) over the
        step's cost, cost(γ) + the overhead between steps."""
        return acceptance.tokens(gamma) / (self.costs[gamma] + self.overhead)

    def choose(self, live: int, acceptance: Acceptance) -> int:
        if self.costs is None:
            raise UserError("The goodput policy needs the step costs; run engine.probe first.")
        if acceptance.alpha is None or self.plain_steps >= self.explore:
            best = max(self.gammas)
        else:
            rate = lambda g: self.goodput(g, acceptance)
            best = max(self.gammas, key=rate)
            if self.last is not None and (best == 0) != (self.last == 0):
                if rate(best) < (1 + self.margin) * rate(self.last):
                    best = self.last  # not worth a switch
        self.plain_steps = self.plain_steps + 1 if best == 0 else 0
        self.last = best
        return best
