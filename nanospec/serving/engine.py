"""A continuous-batching engine: decode slots that requests enter and leave as others decode.

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
(`cache.run_if`) become selects over whole caches, and a step cost nearly twice as much as one
batch does (docs/results.md, "Why the code is shaped as it is"): vmap hid the batching this
engine measures.

Static shapes, so nothing recompiles as requests come and go: the slot count and the cache
capacity (the whole context) are fixed; a prompt is prefilled at batch 1 in its length's
bucket (generate.bucket: one program per bucket), then copied into its row.

With a `policy` (serving/adaptive.py) each step's γ is chosen anew — 0 is a plain round, and
the draft cache is rebuilt when drafting resumes (`redraft`); with a `mesh` (serving/mesh.py)
the slots and the target's weights are spread over devices.

`max_len` (vLLM's --max-model-len) sizes every slot's cache for that many tokens, prompt and
completion, instead of the whole context: a step reads every slot's cache, so at many slots
a smaller cache is a cheaper step (docs/results.md, "Speculation under load").

What this file leaves out: stop strings and streaming (the server's work), a waiting queue
(insert when `free_slots` says there is room), caches sized to each request (vLLM's paged
attention), and computing only busy slots.
"""

import time
from dataclasses import dataclass, replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nanospec.aot import compiled
from nanospec.drafters import take_rows
from nanospec.errors import UserError
from nanospec.generate import bucket, pad_prompts
from nanospec.rounds import prefill_program
from nanospec.sampling import SamplingParams
from nanospec.serving.adaptive import Acceptance
from nanospec.serving.mesh import check_slots, place
from nanospec.serving.steps import put_row, redraft, round_at, step_loops
from nanospec.settings import check_settings


def _emitting_step(spec, gamma, width, p, dp, state, sp, max_new, first):
    """A step at `gamma` (steps.round_at), returning also each row's `width` tokens from
    `first` (B,) on — from where its text stood before the step, so the host copies what the
    step emitted, not the whole (slots, S) token buffer."""
    state, drafted, accepted = round_at(gamma, spec)(p, dp, state, sp, max_new)
    return state, take_rows(state.seq, first, width), drafted, accepted


def _cancel_row(state, at):
    return state._replace(done=state.done.at[at].set(True))


# Every engine's programs, compiled through aot.py: engines over the same loop share them.
_step_jit = jax.jit(
    _emitting_step, static_argnames=("spec", "gamma", "width"), donate_argnames=("state",)
)
_put_row_jit = jax.jit(put_row, donate_argnames=("rows",))
_cancel_jit = jax.jit(_cancel_row, donate_argnames=("state",))
_redraft_jit = jax.jit(redraft, static_argnames=("spec",), donate_argnames=("state",))


class Request(NamedTuple):
    """One generation request: a tokenized prompt and its own sampling settings."""

    prompt: list[int]
    max_new: int = 32
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False  # go on past <|endoftext|> (vLLM's; fixed-length benchmark runs)
    stop_ids: tuple[int, ...] = ()  # more tokens that end the request (vLLM's stop_token_ids)
    min_new: int = 0  # no stop token (EOS, stop ids) before this many tokens (vLLM's min_tokens)


class Output(NamedTuple):
    """What one engine step added to one slot."""

    slot: int
    tokens: list[int]  # new tokens this step (1 to γ+1, or none for a slot that just ended)
    done: bool  # the request finished (EOS, max_new or the context's end)
    drafted: int = 0  # drafts proposed to this slot this step (0: autoregressive)
    accepted: int = 0  # how many of them the target accepted
    stopped: bool = False  # it ended on a stop token (EOS or a stop id), the last of `tokens`


@dataclass
class _Slot:
    request: Request
    start: int  # prompt length: generated tokens begin here
    sent: int  # generated tokens already handed out
    stops: frozenset  # the tokens that end this request


class Engine:
    """`slots` decode slots over one loop (`rounds.Loop`: generate.Decoder, a Speculator, ...);
    with a `policy` (serving/adaptive.py), each step's γ is chosen anew; with a `mesh`
    (serving/mesh.py), the engine is spread over its devices; `max_len` tokens a request."""

    def __init__(
        self, loop, params, dparams, slots: int, policy=None, mesh=None, max_len: int | None = None
    ):
        if slots < 1:
            raise UserError(f"The engine needs at least one slot, got {slots}.")
        self.max_len = max_len or loop.cfg.n_ctx
        if not 2 <= self.max_len <= loop.cfg.n_ctx:
            raise UserError(
                f"The longest request must be 2 to {loop.cfg.n_ctx} tokens (the "
                f"model's context), got {max_len}."
            )
        if mesh is not None:
            check_slots(slots, mesh)
        # Stop tokens are each request's own (EOS unless ignore_eos, and its stop ids), so the
        # steps stop at none (eos_id −1) and `step` ends a request at its first one: a row's
        # tokens up to it are the tokens it would make alone, with EOS stopping it in the loop.
        self.eos_id = loop.eos_id
        self.loops = step_loops(replace(loop, eos_id=-1), policy, self.max_len)
        self.loop = self.loops[max(self.loops, key=lambda g: g or 0)]  # prefills, checks
        self.policy, self.acceptance = policy, Acceptance()
        self.paused = False  # the last step was a plain one (γ = 0): redraft before drafting
        self._ended = None  # when the last step returned, while requests were running
        self.steps_at: dict = {}  # γ -> steps taken at it
        self.params, self.dparams, self.n_slots = params, dparams, slots
        self.slots: list[_Slot | None] = []
        self.width = max(spec_g.depth for spec_g in self.loops.values()) + 1  # most a step adds
        self._steps: dict = {}  # γ -> its step's compiled program, once the first step ran
        self.mesh = mesh
        self.reset()

    def reset(self) -> None:
        """Free every slot and start from empty rows: how the engine begins, and how the
        server recovers from a step that failed (its state may then be half-donated)."""
        slots = self.n_slots
        # Every row starts finished (any prompt of two tokens will do: one token would send the
        # heads down their one-token path every round, heads/drafters.py), so the loop skips
        # it; each gets its own key and round counter (replaced by the request's own on insert).
        tokens, lengths = pad_prompts([[0, 0]] * slots, self.max_len)
        empty = self._prefill(tokens, lengths, jax.random.key(0))
        self.state = empty._replace(
            done=jnp.ones_like(empty.done),
            step=jnp.zeros(slots, jnp.int32),
            key=jax.random.split(jax.random.key(0), slots),
        )
        # Every row carries a hold (min_new 0: nothing held), so rows that use one and rows
        # that do not share one step program.
        held = np.zeros(self.loop.cfg.vocab_size, bool)
        self.sp = SamplingParams.make(held=held).per_row(slots)
        self.max_new = jnp.ones(slots, jnp.int32)
        self.slots = [None] * slots
        self.paused, self._ended = False, None
        if self.mesh is not None:
            place(self, self.mesh)

    @property
    def free_slots(self) -> int:
        return sum(s is None for s in self.slots)

    @property
    def step_programs(self) -> int:
        """Step programs this engine holds: one per γ it stepped at, whatever requests arrive
        (a compiled program runs only the shapes it was compiled for: tests count them)."""
        return len(self._steps)

    def _run(self, jitted, static: dict, **dynamic):
        """`jitted` for these static arguments, compiled for these arguments' shapes (and
        placement) once per process — aot.py's table, shared by every engine over the same
        loop — and run on them."""
        program, _ = compiled(jitted, static, dynamic)
        return program(**dynamic)

    def _prefill(self, tokens, lengths, key):
        return self._run(
            prefill_program,
            dict(spec=self.loop),
            params=self.params,
            dparams=self.dparams,
            tokens=tokens,
            lengths=lengths,
            key=key,
        )

    def _run_step(self, gamma, first):
        """One step at `gamma` over every slot -> (state, tokens emitted, drafted, accepted).
        subtle: the compiled program is kept per γ and called directly: looking it up in
        aot.py's table would hash the loop (its model graph included) on every step,
        milliseconds of host time."""
        dynamic = dict(
            p=self.params,
            dp=self.dparams,
            state=self.state,
            sp=self.sp,
            max_new=self.max_new,
            first=first,
        )
        if gamma not in self._steps:
            static = dict(spec=self.loops[gamma], gamma=gamma, width=self.width)
            self._steps[gamma], _ = compiled(_step_jit, static, dynamic)
        return self._steps[gamma](**dynamic)

    @property
    def busy(self) -> bool:
        return self.free_slots < self.n_slots

    def insert(self, request: Request) -> int:
        """Prefill `request` and place it in a free slot; returns the slot. A full engine or a
        bad request is a UserError (one sentence)."""
        if self.free_slots == 0:
            raise UserError(f"All {self.n_slots} slots are busy; wait for one to finish.")
        check_settings(request.temperature, request.top_k, request.top_p)
        if request.max_new < 1:
            raise UserError(f"max_new must be at least 1, got {request.max_new}.")
        if not 0 <= request.min_new <= request.max_new:
            raise UserError(
                f"min_new must be 0 to max_new ({request.max_new}), got {request.min_new}."
            )
        self.loop.check([len(request.prompt)], request.max_new)
        if len(request.prompt) >= self.max_len:
            raise UserError(
                f"The prompt is {len(request.prompt)} tokens long but this engine's "
                f"context holds {self.max_len}, leaving no room to generate; "
                f"shorten it."
            )
        vocab = self.loop.cfg.vocab_size
        if not all(0 <= t < vocab for t in (*request.prompt, *request.stop_ids)):
            raise UserError(
                f"Token ids are 0 to {vocab - 1} (the vocabulary); this request "
                f"has others in its prompt or stop ids."
            )
        # subtle: everything that can fail on this request's values happens before the first
        # write into the engine's (donated) state, so a refusal leaves the other slots intact.
        tokens, lengths = pad_prompts([request.prompt], self.max_len)
        max_new = jnp.int32(min(request.max_new, self.max_len - len(request.prompt)))
        stops = set(request.stop_ids) | ({self.eos_id} - {-1} if not request.ignore_eos else set())
        held = np.zeros(vocab, bool)
        held[list(stops)] = True
        sp = SamplingParams.make(
            request.temperature, request.top_k, request.top_p, request.min_new, held
        )
        one = self._prefill(tokens, lengths, jax.random.key(request.seed))
        at = self.slots.index(None)
        self.state = self._run(_put_row_jit, {}, rows=self.state, one=one, at=at)
        self.sp = self._run(_put_row_jit, {}, rows=self.sp, one=sp, at=at)
        self.max_new = self._run(_put_row_jit, {}, rows=self.max_new, one=max_new, at=at)
        self.slots[at] = _Slot(request, len(request.prompt), 0, frozenset(stops))
        return at

    def warm(self, prompt_lengths) -> None:
        """Compile, before any request comes, the prefill for every bucket these prompt lengths
        fall in, the insert, the cancel and every step, so that no request's latency includes
        a compile. Only while idle: the steps it runs advance no request."""
        if self.busy:
            raise UserError("Warm the engine before requests arrive; it is serving now.")
        n_ctx = self.max_len
        for width in sorted({bucket(n, n_ctx) for n in prompt_lengths if 0 < n < n_ctx}):
            tokens, lengths = pad_prompts([[0] * min(width, n_ctx - 1)], n_ctx)
            self._prefill(tokens, lengths, jax.random.key(0))
        self.cancel(self.insert(Request([0, 0], 1)))  # copying a request in, and freeing it
        for gamma in self.loops:
            self.state = self._run_step(gamma, np.zeros(self.n_slots, np.int32))[0]
        if 0 in self.loops:
            self.state = self._redraft()

    def probe(self, prompt: list[int], steps: int = 4, temperature: float = 1.0) -> dict:
        """What one step costs at each γ the engine may take, measured here with every slot
        busy: {γ: seconds, the median of `steps` steps}. The engine computes every slot each
        step, so this is its cost at any load (greedy steps cost less: give the temperature
        the requests will use). Sets the policy's costs, which its steps then keep up to
        date; only while idle."""
        if self.busy:
            raise UserError("Probe the engine before requests arrive; it is serving now.")
        costs = {}
        for gamma in self.loops:
            times = []
            for i in range(steps + 1):  # the first compiles (and rebuilds the draft cache)
                # A slot whose request ended is refilled before each step: a large γ, after
                # the smaller ones used up the room, would otherwise be timed on finished rows.
                for seed in range(self.free_slots):
                    self.insert(Request(prompt, self.max_len, temperature, seed=seed))
                jax.block_until_ready(self.state)  # the prefills are not the step's cost
                self._ended, start = None, time.perf_counter()  # nor the caller's gap
                self.step(gamma)
                times.append(time.perf_counter() - start)
            costs[gamma] = float(np.median(times[1:]))
        for slot in range(self.n_slots):
            self.cancel(slot)
        self.acceptance, self.steps_at, self._ended = Acceptance(), {}, None
        if self.policy is not None:
            self.policy.costs = dict(costs)
        return costs

    def _redraft(self):
        return self._run(_redraft_jit, dict(spec=self.loop), dparams=self.dparams, state=self.state)

    def cancel(self, slot: int) -> None:
        """Stop the request in `slot` now (a client went away, a stop string was met) and free
        the slot; its row is finished, so the loop skips it until a new request takes it."""
        if self.slots[slot] is not None:
            self.state = self._run(_cancel_jit, {}, state=self.state, at=slot)
            self.slots[slot] = None

    def choose_gamma(self):
        """This step's γ: the policy's choice (None: the loop's own, without a policy)."""
        if self.policy is None:
            return None
        return self.policy.choose(self.n_slots - self.free_slots, self.acceptance)

    def step(self, gamma=None) -> list[Output]:
        """One round (or decode step) for every live slot, at `gamma` if given (one of the
        policy's), else at the γ the policy chooses; frees the slots that finished."""
        called = time.perf_counter()
        if self._ended is not None and self.policy is not None:
            self.policy.between(called - self._ended)  # the caller's own work between steps
        gamma = self.choose_gamma() if gamma is None else gamma
        if gamma and self.paused:
            self.state = jax.block_until_ready(self._redraft())
        self.paused = gamma == 0
        self.steps_at[gamma] = self.steps_at.get(gamma, 0) + 1
        if self.policy is not None:  # subtle: wait for a prefill still running (async dispatch),
            jax.block_until_ready(self.state)  # or the policy would charge it to this step
        start = time.perf_counter()
        first = np.array([0 if s is None else s.start + s.sent for s in self.slots], np.int32)
        self.state, emitted, drafted, accepted = self._run_step(gamma, first)
        emitted, n_new, done, drafted, accepted = (
            np.asarray(x) for x in (emitted, self.state.n_new, self.state.done, drafted, accepted)
        )
        if self.policy is not None:
            self.policy.observe(gamma, time.perf_counter() - start)
        out = []
        for i, slot in enumerate(self.slots):
            if slot is None:
                continue
            n = int(n_new[i])
            new = emitted[i, : n - slot.sent].tolist()
            cut = next((j for j, t in enumerate(new) if t in slot.stops), None)
            if cut is not None:  # the tokens after it in this round are dropped with the row
                new = new[: cut + 1]
                self.cancel(i)
            out.append(
                Output(
                    i,
                    new,
                    bool(done[i]) or cut is not None,
                    int(drafted[i]),
                    int(accepted[i]),
                    stopped=cut is not None,
                )
            )
            slot.sent = n
            if done[i]:
                self.slots[i] = None
        self.acceptance.add(out, drafting=gamma != 0)
        self._ended = time.perf_counter() if self.busy else None  # idle time is no one's cost
        return out
