"""A continuous-batching engine: decode slots that requests enter and leave while others decode.

JetStream's shape (prefill, insert into a free slot, one generate step for every slot), with
any nanospec loop — autoregressive or speculative — as the step:

    engine = Engine(loop, params, dparams, slots=8)
    slot = engine.insert(Request(prompt_ids, max_new=32, temperature=1.0, seed=7))
    while engine.busy:
        for out in engine.step():           # one round over every live slot
            print(out.slot, out.tokens, out.done)

How a request's output is kept independent of its neighbours: the slots are the rows of one
batch of the loop, and every row carries its own key and round counter (a (slots,) key array:
sampling.row_keys). So row r draws the random numbers its request would draw alone, its
sampling settings are its own (sampling.sampling_probs takes them per row), and with the same
seed it emits the tokens of `loop.run` on that prompt at batch 1, whatever else is running
(tests/test_engine.py). Rows that finished, and free slots, are rows the loop already skips.

Not `jax.vmap` of a batch-1 round (this engine's first form): under vmap the loop's skips
(`cache.run_if`) become selects over whole caches — an AR step over 8 slots cost 24.6 ms that
way, 14.3 ms as one batch (3.3 ms for one slot): vmap hid the batching this engine measures.

Static shapes, so nothing recompiles as requests come and go: the slot count and the cache
capacity (the whole context) are fixed; a prompt is prefilled at batch 1 in its length's
bucket (generate.bucket: one program per bucket), then copied into its row.

With a `policy` (serving/adaptive.py) each step's γ is chosen anew — 0 is a plain round, and
the draft cache is rebuilt when drafting resumes (`redraft`); with a `mesh` (serving/mesh.py)
the slots and the target's weights are spread over devices.

What this file leaves out: stop strings and streaming (the server's work), a waiting queue
(insert when `free_slots` says there is room), caches sized to each request (every slot holds
the whole context; vLLM's paged attention is the real fix), and computing only busy slots.
"""

import time
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.cache import capacity as cache_capacity
from nanospec.errors import UserError
from nanospec.generate import bucket, pad_prompts
from nanospec.cli_args import check_sampling
from nanospec.drafters import DraftModel, PromptLookup
from nanospec.sampling import SamplingParams
from nanospec.serving.adaptive import Acceptance, plain_round
from nanospec.serving.mesh import check_slots, place
from nanospec.speculative import Speculator


class Request(NamedTuple):
    """One generation request: a tokenized prompt and its own sampling settings."""

    prompt: list[int]
    max_new: int = 32
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0


class Output(NamedTuple):
    """What one engine step added to one slot."""

    slot: int
    tokens: list[int]  # new tokens this step (1 to γ+1, or none for a slot that just ended)
    done: bool  # the request finished (EOS, max_new or the context's end)
    drafted: int = 0  # drafts proposed to this slot this step (0: autoregressive)
    accepted: int = 0  # how many of them the target accepted


@dataclass
class _Slot:
    request: Request
    start: int  # prompt length: generated tokens begin here
    sent: int  # generated tokens already handed out


def put_row(rows, one, at):
    """Every leaf of a batch state `rows` with row `at` replaced by the batch-1 state `one`.

    A leaf's batch axis is the axis where the two shapes differ (a cache may keep its layers
    first); a scalar of `one` (its key, its round counter) is that row's entry of a per-row
    vector; with one slot the shapes agree and the whole leaf is replaced."""
    def leaf(all_, x):
        x = x.reshape((1,) * (all_.ndim - x.ndim) + x.shape)
        axis = next((i for i, (a, b) in enumerate(zip(all_.shape, x.shape)) if a != b), None)
        if axis is None:
            return x
        return jax.lax.dynamic_update_slice_in_dim(all_, x, at, axis)
    return jax.tree.map(leaf, rows, one)


def one_round(spec, p, dp, state, sp, max_new):
    """A round of `spec` over every row -> (state, drafts proposed, drafts accepted), per row."""
    state, trace = spec.step(p, dp, state, sp, max_new)
    live, drafted, accepted, *_ = spec.counts(trace)
    return state, jnp.where(live, drafted, 0), jnp.where(live, accepted, 0)


def slots_for(n_ctx: int, block: int) -> int:
    """Cache slots for a row that may hold the whole context: cache.capacity, rounded up to a
    multiple of 16. subtle: measured at 32 slots, a step over 260 slots (256 + a γ = 4 block's
    slack) cost 25-30% more than over 256 or 272 — XLA's CPU kernels like round sizes."""
    return -(-cache_capacity(n_ctx, n_ctx, 0, block) // 16) * 16


def step_loops(loop, policy) -> dict:
    """{γ: the loop a step at γ runs}: the loop itself without a policy (key None); with one,
    the chain speculator at each γ it may choose (γ = 0: the largest, which plain_round runs
    without drafts), all with one cache capacity so that they share one state."""
    n_ctx = loop.cfg.n_ctx
    if policy is None:
        return {None: replace(loop, shared=False, capacity=slots_for(n_ctx, loop.block))}
    if type(loop) is not Speculator or not isinstance(loop.drafter, (DraftModel, PromptLookup)):
        raise UserError("Adaptive speculation needs chain drafting by the draft model or "
                        "prompt lookup (--method draft or ngram).")
    top = max(policy.gammas)
    return {g: replace(loop, shared=False, capacity=slots_for(n_ctx, top + 1), gamma=g or top)
            for g in sorted(set(policy.gammas) | {top})}


def round_at(gamma, spec):
    """The function a step at `gamma` runs: a round of `spec`, or (γ = 0) a plain one."""
    return partial(plain_round if gamma == 0 else one_round, spec)


def redraft(spec, dparams, state):
    """The draft model's cache rebuilt from every row's committed text, in one pass: how
    drafting resumes after plain steps (`adaptive.plain_round`), which left it behind."""
    n_ctx = spec.cfg.n_ctx
    return state._replace(dstate=spec.drafter.init(dparams, state.seq[:, :n_ctx], state.length,
                                                   None, spec.slots))


class Engine:
    """`slots` decode slots over one loop (`rounds.Loop`: generate.Decoder, a Speculator, ...);
    with a `policy` (serving/adaptive.py), each step's γ is chosen anew; with a `mesh`
    (serving/mesh.py), the engine is spread over its devices."""

    def __init__(self, loop, params, dparams, slots: int, policy=None, mesh=None):
        if slots < 1:
            raise UserError(f"The engine needs at least one slot, got {slots}.")
        if mesh is not None:
            check_slots(slots, mesh)
        self.loops = step_loops(loop, policy)
        self.loop = self.loops[max(self.loops, key=lambda g: g or 0)]  # prefills, checks
        self.policy, self.acceptance, self.paused = policy, Acceptance(), False
        self.steps_at: dict = {}  # γ -> steps taken at it
        self.params, self.dparams, self.n_slots = params, dparams, slots
        self.slots: list[_Slot | None] = [None] * slots
        spec, cfg = self.loop, loop.cfg
        self._prefill = jax.jit(lambda p, dp, tokens, lengths, key:
                                spec.prefill(p, dp, tokens, lengths, key))
        self._insert = jax.jit(put_row, donate_argnums=0)
        # subtle: one jitted closure per γ, not the loop as a static argument — jit would hash
        # the loop (its model graph included) on every call, about 2 ms of host time a step.
        self._steps = {g: jax.jit(round_at(g, spec_g), donate_argnums=2)
                       for g, spec_g in self.loops.items()}
        self._cancel = jax.jit(lambda state, at: state._replace(done=state.done.at[at].set(True)),
                               donate_argnums=0)
        self._redraft = jax.jit(lambda dp, state: redraft(spec, dp, state), donate_argnums=1)
        # Every row starts finished (any prompt will do), so the loop skips it; each gets its
        # own key and round counter (replaced by the request's own on insert).
        tokens, lengths = pad_prompts([[0]] * slots, cfg.n_ctx)
        empty = self._prefill(params, dparams, tokens, lengths, jax.random.key(0))
        self.state = empty._replace(done=jnp.ones_like(empty.done),
                                    step=jnp.zeros(slots, jnp.int32),
                                    key=jax.random.split(jax.random.key(0), slots))
        self.sp = SamplingParams(*(jnp.stack([x] * slots) for x in SamplingParams.make()))
        self.max_new = jnp.ones(slots, jnp.int32)
        if mesh is not None:
            place(self, mesh)

    @property
    def free_slots(self) -> int:
        return sum(s is None for s in self.slots)

    @property
    def step_programs(self) -> int:
        """Step programs compiled so far: one, whatever requests arrive (tests count them)."""
        return sum(step._cache_size() for step in self._steps.values())

    @property
    def busy(self) -> bool:
        return self.free_slots < self.n_slots

    def insert(self, request: Request) -> int:
        """Prefill `request` and place it in a free slot; returns the slot. A full engine or a
        bad request is a UserError (one sentence)."""
        if self.free_slots == 0:
            raise UserError(f"All {self.n_slots} slots are busy; wait for one to finish.")
        check_sampling(request.temperature, request.top_k, request.top_p)
        if request.max_new < 1:
            raise UserError(f"max_new must be at least 1, got {request.max_new}.")
        self.loop.check([len(request.prompt)], request.max_new)
        tokens, lengths = pad_prompts([request.prompt], self.loop.cfg.n_ctx)
        one = self._prefill(self.params, self.dparams, tokens, lengths,
                            jax.random.key(request.seed))
        at = self.slots.index(None)
        self.state = self._insert(self.state, one, at)
        sp = SamplingParams.make(request.temperature, request.top_k, request.top_p)
        self.sp = self._insert(self.sp, sp, at)
        self.max_new = self._insert(self.max_new, jnp.int32(request.max_new), at)
        self.slots[at] = _Slot(request, len(request.prompt), 0)
        return at

    def warm(self, prompt_lengths) -> None:
        """Compile, before any request comes, the prefill for every bucket these prompt lengths
        fall in, the insert, the cancel and every step, so that no request's latency includes
        a compile. Only while idle: the steps it runs advance no request."""
        if self.busy:
            raise UserError("Warm the engine before requests arrive; it is serving now.")
        n_ctx = self.loop.cfg.n_ctx
        for width in sorted({bucket(n, n_ctx) for n in prompt_lengths if 0 < n < n_ctx}):
            tokens, lengths = pad_prompts([[0] * min(width, n_ctx - 1)], n_ctx)
            self._prefill(self.params, self.dparams, tokens, lengths, jax.random.key(0))
        self.cancel(self.insert(Request([0], 1)))  # copying a request in, and freeing it
        for step in self._steps.values():
            self.state = step(self.params, self.dparams, self.state, self.sp, self.max_new)[0]
        if 0 in self.loops:
            self.state = self._redraft(self.dparams, self.state)

    def probe(self, prompt: list[int], steps: int = 4, temperature: float = 1.0) -> dict:
        """What one step costs at each γ the engine may take, measured here with every slot
        busy: {γ: seconds, the median of `steps` steps}. The engine computes every slot each
        step, so this is its cost at any load (greedy steps cost less: give the temperature
        the requests will use). Sets the policy's costs, which its steps then keep up to
        date; only while idle."""
        if self.busy:
            raise UserError("Probe the engine before requests arrive; it is serving now.")
        room = self.loop.cfg.n_ctx - len(prompt) - 1
        for seed in range(self.n_slots):
            self.insert(Request(prompt, room, temperature, seed=seed))
        costs = {}
        for gamma in self.loops:
            self.step(gamma)  # compiles, and (after plain steps) rebuilds the draft cache
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                self.step(gamma)
                times.append(time.perf_counter() - start)
            costs[gamma] = float(np.median(times))
        for slot in range(self.n_slots):
            self.cancel(slot)
        self.acceptance, self.steps_at = Acceptance(), {}
        if self.policy is not None:
            self.policy.costs = dict(costs)
        return costs

    def cancel(self, slot: int) -> None:
        """Stop the request in `slot` now (a client went away, a stop string was met) and free
        the slot; its row is finished, so the loop skips it until a new request takes it."""
        if self.slots[slot] is not None:
            self.state = self._cancel(self.state, slot)
            self.slots[slot] = None

    def choose_gamma(self):
        """This step's γ: the policy's choice (None: the loop's own, without a policy)."""
        if self.policy is None:
            return None
        return self.policy.choose(self.n_slots - self.free_slots, self.acceptance)

    def step(self, gamma=None) -> list[Output]:
        """One round (or decode step) for every live slot, at `gamma` if given (one of the
        policy's), else at the γ the policy chooses; frees the slots that finished."""
        gamma = self.choose_gamma() if gamma is None else gamma
        if gamma and self.paused and isinstance(self.loop.drafter, DraftModel):
            self.state = jax.block_until_ready(self._redraft(self.dparams, self.state))
        self.paused = gamma == 0
        self.steps_at[gamma] = self.steps_at.get(gamma, 0) + 1
        if self.policy is not None:  # subtle: wait for a prefill still running (async dispatch),
            jax.block_until_ready(self.state)  # or the policy would charge it to this step
        start = time.perf_counter()
        self.state, drafted, accepted = self._steps[gamma](self.params, self.dparams, self.state,
                                                           self.sp, self.max_new)
        seq, n_new, done, drafted, accepted = (np.asarray(x) for x in (
            self.state.seq, self.state.n_new, self.state.done, drafted, accepted))
        if self.policy is not None:
            self.policy.observe(gamma, time.perf_counter() - start)
        out = []
        for i, slot in enumerate(self.slots):
            if slot is None:
                continue
            n = int(n_new[i])
            out.append(Output(i, seq[i, slot.start + slot.sent:slot.start + n].tolist(),
                              bool(done[i]), int(drafted[i]), int(accepted[i])))
            slot.sent = n
            if done[i]:
                self.slots[i] = None
        self.acceptance.add(out)
        return out
