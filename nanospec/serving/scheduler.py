"""The engine thread: the one thread that calls the engine (and so JAX), and its waiting queue.

    HTTP handlers (asyncio)                  engine thread (this file)
    ─────────────────────────                ─────────────────────────────────────────
    submit(job) ──► waiting (FIFO) ────────► admit into free slots: engine.insert
    await job.next() ◄── call_soon_threadsafe ◄── engine.step(): each job's new text
    cancel(job) ──► job.cancelled ─────────► engine.cancel(slot), or dropped from the queue

How many: `submit` takes a request's jobs (one per choice: n, and a list of prompts, make
several) while they all fit in slots + max_queue beside the jobs in flight (waiting, being
admitted or running), so a burst fills every slot and the queue before anyone gets a 429,
and a request never runs some of its choices while the rest are refused.

Why one thread: JAX dispatches from whichever thread calls it, and two threads stepping one
engine would race on its state. Keeping every engine call on one thread makes the engine need
no locks; the handlers only touch the queue (under `cond`) and a job's `cancelled` flag.

Each step, a job's new tokens go through its TextStream (text.py) here, on the engine thread,
so a stop string frees the slot the moment it appears, and the metrics count exactly the
tokens up to and including the one that completed the stop (vLLM counts the same way).

Draining (SIGTERM): `drain()` refuses new requests; the thread serves what it already has —
running and waiting — then `stop()` ends it once it is idle.

Faults: no single request may stop the engine. An error while admitting one job, or while
turning one job's tokens into text, fails that job alone (a 500 in OpenAI's shape). A step
that fails fails the jobs in it (their rows may be half written), and the engine starts again
from empty slots for the jobs still waiting. Should this thread die anyway, every job it held
— waiting, running or being admitted — is answered at once, and `on_crash` lets the server
exit non-zero so that a supervisor restarts it.

What this file deliberately leaves out: priorities, preemption, and any limit on tokens in
flight other than the engine's slots.
"""

import asyncio
import threading
import time
import traceback
from collections import deque
from typing import NamedTuple

from nanospec.errors import UserError
from nanospec.serving.api import ApiError
from nanospec.serving.engine import Request
from nanospec.serving.metrics import ServerMetrics
from nanospec.serving.text import TextStream


class Delta(NamedTuple):
    """What one step gave one job, as its HTTP handler reads it."""

    text: str  # new text, safe to send (may be "")
    tokens: int  # tokens generated so far
    finish: str | None  # "stop" or "length" when this is the last delta
    error: ApiError | None = None  # the job failed instead


class Job:
    """One request's life in the server, shared by its handler and the engine thread.

    The handler builds it on the event loop and reads `next()`; the engine thread posts Deltas
    to its mailbox. The only thing the handler writes afterwards is `cancelled`."""

    def __init__(self, request: Request, text: TextStream, loop: asyncio.AbstractEventLoop):
        self.request, self.text, self.loop = request, text, loop
        self.mailbox: asyncio.Queue[Delta] = asyncio.Queue()
        self.cancelled = False
        self.arrived = time.perf_counter()
        self.admitted: float | None = None  # when its insert into a slot began
        self.first: float | None = None  # when a step first gave it tokens
        self.last: float | None = None  # when a step last gave it tokens
        self.tokens = 0  # tokens generated, through the stop string if one was met
        self.ids: list[int] = []  # those tokens (for logprobs, scored once it ends)

    def post(self, delta: Delta) -> None:
        """From the engine thread: hand `delta` to the handler on its event loop."""
        try:
            self.loop.call_soon_threadsafe(self.mailbox.put_nowait, delta)
        except RuntimeError:  # the event loop has closed: nobody is waiting any more
            pass

    async def next(self) -> Delta:
        """The next delta (raises the job's ApiError if it failed)."""
        delta = await self.mailbox.get()
        if delta.error is not None:
            raise delta.error
        return delta


class Scheduler:
    """Owns `engine` on its own thread; admits waiting jobs first come, first served."""

    def __init__(self, engine, metrics: ServerMetrics, max_queue: int):
        self.engine, self.metrics, self.max_queue = engine, metrics, max_queue
        self.waiting: deque[Job] = deque()
        self.running: dict[int, Job] = {}  # slot -> job; only the engine thread writes it
        self.cond = threading.Condition()
        self.draining = self.stopping = False
        self.admitting: list[Job] = []  # the job between the queue and a slot, if any
        self.crashed: str | None = None  # why the thread died, if it did
        self.on_crash = None  # called (from the engine thread) if it dies
        self.thread = threading.Thread(target=self.run, name="nanospec-engine", daemon=True)

    # ------------------------------------------------------------ called by the handlers

    def start(self) -> None:
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and self.crashed is None

    def submit(self, *jobs: Job) -> None:
        """Queue `jobs` (one request's choices: all of them, or none), or refuse them: 503
        while draining or dead, 429 when the slots and the queue have no room for them all."""
        with self.cond:
            if self.draining or not self.alive:
                why = "is shutting down" if self.crashed is None else "has lost its engine"
                raise ApiError(
                    503,
                    f"The server {why} and takes no new requests.",
                    code="service_unavailable",
                    kind="server_error",
                )
            # subtle: count every job in flight against slots + queue, not the queue alone: a
            # burst arrives faster than the engine thread moves jobs into free slots, and
            # those jobs, still in `waiting`, would fill the queue while slots stand empty.
            in_flight = len(self.waiting) + len(self.admitting) + len(self.running)
            if in_flight + len(jobs) > self.engine.n_slots + self.max_queue:
                raise ApiError(
                    429,
                    f"The server is full ({self.engine.n_slots} requests "
                    f"decoding and {self.max_queue} waiting for a slot); try "
                    f"again shortly.",
                    code="rate_limit_exceeded",
                    kind="rate_limit_error",
                )
            self.waiting.extend(jobs)
            self.metrics.waiting.set(len(self.waiting))
            self.cond.notify()

    def cancel(self, job: Job) -> None:
        """The client is gone: a waiting job leaves the queue now, a running one frees its slot
        before the next step."""
        with self.cond:
            job.cancelled = True
            if job in self.waiting:
                self.waiting.remove(job)
                self.metrics.waiting.set(len(self.waiting))
                self.metrics.finished("abort", time.perf_counter() - job.arrived)
            self.cond.notify()

    def drain(self) -> None:
        """Take no new requests; finish the ones already here. Safe in a signal handler: it
        sets one flag and takes no lock."""
        self.draining = True

    def stop(self) -> None:
        """Drain, wait until every job has finished, and end the thread."""
        self.drain()
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join()

    # ------------------------------------------------------------ the engine thread

    def run(self) -> None:
        try:
            while self.wait_for_work():
                self.drop_cancelled()
                self.admit()
                self.load()
                if self.running:
                    self.step()
                    self.load()
        except BaseException as e:  # a bug in this loop itself: no job can be trusted now
            self.crashed = f"{type(e).__name__}: {e}"
            traceback.print_exc()
            error = ApiError(
                500,
                f"The engine stopped ({self.crashed}); the server is exiting.",
                kind="server_error",
            )
            with self.cond:
                jobs = [*self.admitting, *self.running.values(), *self.waiting]
                self.waiting.clear()
            for job in jobs:  # every client gets its answer now, not at its timeout
                job.post(Delta("", job.tokens, None, error))
            if self.on_crash is not None:  # the server exits non-zero, for a supervisor
                self.on_crash()

    def load(self) -> None:
        """The load gauges: requests running and waiting, and the share of every slot's KV
        cache that holds a token (a busy slot holds its prompt and what it generated)."""
        held = sum(len(job.request.prompt) + job.tokens for job in self.running.values())
        self.metrics.load(
            len(self.running), len(self.waiting), held / (self.engine.n_slots * self.engine.max_len)
        )

    def fail(self, job: Job, e: Exception, slot: int | None = None) -> None:
        """An unexpected error `e` on `job` alone: answer its client with a 500 and free its
        slot (if it has one); the engine goes on with everyone else. (The caller has logged
        the traceback, once.)"""
        if slot is not None:
            self.end(slot, job, "error")
        else:
            self.metrics.finished("error", time.perf_counter() - job.arrived)
        job.post(
            Delta(
                "",
                job.tokens,
                None,
                ApiError(
                    500,
                    f"The server failed on this request ({type(e).__name__}: {e}).",
                    kind="server_error",
                ),
            )
        )

    def wait_for_work(self) -> bool:
        """Sleep until there is a job (True) or we are stopping with none left (False)."""
        with self.cond:
            while not (self.waiting or self.running or self.stopping):
                self.cond.wait()
            return bool(self.waiting or self.running)

    def drop_cancelled(self) -> None:
        for slot, job in list(self.running.items()):
            if job.cancelled:
                self.engine.cancel(slot)
                self.end(slot, job, "abort")

    def admit(self) -> None:
        """Waiting jobs into free slots, in arrival order (a cancelled one is dropped). A job
        the engine refuses gets a 400; one whose insert fails, a 500; neither stops the rest."""
        while self.engine.free_slots:
            with self.cond:
                if not self.waiting:
                    return
                job = self.waiting.popleft()
                self.admitting = [job]  # in neither place: a crash must still answer it
            slot = None
            if job.cancelled:  # between leaving the queue and here
                self.metrics.finished("abort", time.perf_counter() - job.arrived)
            else:
                try:
                    job.admitted = time.perf_counter()
                    slot = self.engine.insert(job.request)
                except UserError as e:  # the handler checked it; the engine has the last word
                    job.post(Delta("", 0, None, ApiError(400, str(e))))
                except Exception as e:  # a bug met on this request: it alone fails
                    traceback.print_exc()
                    self.fail(job, e)
            with self.cond:  # from admitting to running in one move: submit counts it once
                self.admitting = []
                if slot is not None:
                    self.running[slot] = job
            if slot is not None:
                self.metrics.prompt_tokens.inc(len(job.request.prompt))

    def step(self) -> None:
        """One engine step; each job's new tokens become text (cut at a stop string).

        If the step itself fails, the jobs in it cannot be trusted (their state may be half
        written): each gets a 500, the engine starts again from empty slots, and the waiting
        jobs go on. If one job's text fails, that job alone ends."""
        try:
            outputs = self.engine.step()
        except Exception as e:
            traceback.print_exc()
            for slot, job in list(self.running.items()):
                self.fail(job, e, slot)
            self.engine.reset()
            return
        now = time.perf_counter()
        for out in outputs:
            job = self.running[out.slot]
            try:
                self.deliver(job, out, now)
            except Exception as e:
                traceback.print_exc()
                if out.slot in self.running:
                    self.engine.cancel(out.slot)
                    self.fail(job, e, out.slot)

    def deliver(self, job: Job, out, now: float) -> None:
        """Post one step's output of `job` to its client, and end the job if it finished."""
        before, text = job.tokens, []
        for at, token in enumerate(out.tokens):  # one at a time: a stop string ends it there
            # A stop token (EOS, or one of stop_token_ids: the engine's last when `stopped`)
            # counts as generated but is not text, as vLLM does by default.
            if not (out.stopped and at == len(out.tokens) - 1):
                text.append(job.text.push([token]))
            job.tokens += 1
            job.ids.append(token)
            if job.text.stopped:
                break
        if job.tokens > before:
            self.metrics.step(
                job.tokens - before,
                now - (job.last or job.arrived),
                job.last is None,
                out.drafted,
                out.accepted,
            )
            job.first, job.last = job.first or now, now
        finish = None
        if job.text.stopped:
            finish = "stop"
            if not out.done:
                self.engine.cancel(out.slot)  # nothing after the stop string is wanted
        elif out.done:
            finish = "stop" if out.stopped else "length"
        if finish:
            text.append(job.text.finish())
            self.end(out.slot, job, finish)
        job.post(Delta("".join(text), job.tokens, finish))

    def end(self, slot: int, job: Job, reason: str) -> None:
        del self.running[slot]
        self.metrics.finished(reason, time.perf_counter() - job.arrived)
        self.metrics.phases(job.arrived, job.admitted, job.first, job.last, job.tokens)
