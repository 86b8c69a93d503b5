"""The engine thread: the one thread that calls the engine (and so JAX), and its waiting queue.

    HTTP handlers (asyncio)                  engine thread (this file)
    ─────────────────────────                ─────────────────────────────────────────
    submit(job) ──► waiting (FIFO) ────────► admit into free slots: engine.insert
    await job.next() ◄── call_soon_threadsafe ◄── engine.step(): each job's new text
    cancel(job) ──► job.cancelled ─────────► engine.cancel(slot), or dropped from the queue

How many: `submit` takes a request's jobs (one per choice: n, and a list of prompts, make
several) while they all fit in slots + max_queue beside the jobs in flight (waiting, being
admitted, running or being scored), so a burst fills every slot and the queue before anyone
gets a 429, and a request never runs some of its choices while the rest are refused.

A prompt scored without generating (echo with max_tokens 0) is a job like any other: it waits
its turn in the same queue, counts against the same slots + queue, is drained and counted in
the metrics the same way (vLLM runs such a request through its scheduler too). It needs no
slot: when it reaches the head of the queue the engine thread hands it to the one scoring
thread (a forward pass over at most the context, score.py, off the engine thread, so the
steps go on), which hands it back; the engine thread answers it. One pass at a time, however
many wait: scoring's work is bounded as generation's is.

Why one thread: JAX dispatches from whichever thread calls it, and two threads stepping one
engine would race on its state. Keeping every engine call on one thread makes the engine need
no locks; the handlers only touch the queue (under `cond`) and a job's `cancelled` flag.

Each step, a job's new tokens go through its TextStream (text.py) here, on the engine thread,
so a stop string frees the slot the moment it appears, and the metrics count exactly the
tokens up to and including the one that completed the stop (vLLM counts the same way).

Draining (SIGTERM): `drain()` refuses new requests; the thread serves what it already has —
running, waiting and being scored — and `idle` says when it has done; then `stop()` ends it.

Faults: no single request may stop the engine. An error while admitting one job, or while
turning one job's tokens into text, fails that job alone (a 500 in OpenAI's shape). A step
that fails fails the jobs in it (their rows may be half written), and the engine starts again
from empty slots for the jobs still waiting. Should this thread die anyway, every job it held
— waiting, running or being admitted — is answered at once, and `on_crash` lets the server
exit non-zero so that a supervisor restarts it.

What this file deliberately leaves out: priorities, preemption, and any limit on tokens in
flight other than the engine's slots.
"""

import threading
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from nanospec.errors import UserError
from nanospec.serving.api import ApiError
from nanospec.serving.job import Delta, Job
from nanospec.serving.metrics import ServerMetrics


class Scheduler:
    """Owns `engine` on its own thread; admits waiting jobs first come, first served."""

    def __init__(self, engine, metrics: ServerMetrics, max_queue: int, score=None):
        self.engine, self.metrics, self.max_queue = engine, metrics, max_queue
        self.score = score  # score(ids, top): the target's logprobs (logprobs.target_scorer)
        self.scorer = ThreadPoolExecutor(1, thread_name_prefix="nanospec-score")
        self.scoring: list[Job] = []  # prompts handed to the scoring thread
        self.scored: list[tuple[Job, Exception | None]] = []  # handed back, to be answered
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

    @property
    def in_flight(self) -> int:
        """Jobs taken and not yet answered: waiting, being admitted, running or scored."""
        return (
            len(self.waiting)
            + len(self.admitting)
            + len(self.running)
            + len(self.scoring)
            + len(self.scored)
        )

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
            if self.in_flight + len(jobs) > self.engine.n_slots + self.max_queue:
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

    @property
    def idle(self) -> bool:
        """No job in flight (draining: every request taken has been answered)."""
        return self.in_flight == 0

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
        self.scorer.shutdown()

    # ------------------------------------------------------------ the engine thread

    def run(self) -> None:
        try:
            while self.wait_for_work():
                self.answer_scored()
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
            with self.cond:  # (a job the scoring thread has is answered here, not by it)
                jobs = [*self.admitting, *self.running.values(), *self.waiting, *self.scoring]
                jobs += [job for job, _ in self.scored]
                self.waiting.clear()
                self.scored = []
            for job in jobs:  # every client gets its answer now, not at its timeout
                job.post(Delta("", job.tokens, None, error))
            if self.on_crash is not None:  # the server exits non-zero, for a supervisor
                self.on_crash()

    def load(self) -> None:
        """The load gauges: requests running and waiting, and the share of every slot's KV
        cache that holds a token (a busy slot holds its prompt and what it generated)."""
        held = sum(len(job.request.prompt) + job.tokens for job in self.running.values())
        self.metrics.load(
            len(self.running) + len(self.scoring),  # a prompt being scored runs too (vLLM's)
            len(self.waiting),
            held / (self.engine.n_slots * self.engine.max_len),
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
            while not (
                self.waiting or self.running or self.scored or (self.stopping and not self.scoring)
            ):
                self.cond.wait()
            return bool(self.waiting or self.running or self.scored)

    def drop_cancelled(self) -> None:
        for slot, job in list(self.running.items()):
            if job.cancelled:
                self.engine.cancel(slot)
                self.end(slot, job, "abort")

    def admit(self) -> None:
        """Waiting jobs into free slots, in arrival order (a cancelled one is dropped; a prompt
        to score goes to the scoring thread, needing no slot). A job the engine refuses gets a
        400; one whose insert fails, a 500; neither stops the rest."""
        while True:
            with self.cond:
                head = self.waiting[0] if self.waiting else None
                if head is None or not (head.scoring or self.engine.free_slots):
                    return
                job = self.waiting.popleft()
                self.admitting = [job]  # in neither place: a crash must still answer it
            if job.scoring and not job.cancelled:
                self.start_scoring(job)
                continue
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

    def start_scoring(self, job: Job) -> None:
        """Hand a prompt to score (the job being admitted) to the scoring thread."""
        job.admitted = time.perf_counter()
        with self.cond:
            self.admitting = []
            self.scoring.append(job)
        self.metrics.prompt_tokens.inc(len(job.request.prompt))  # read, as a prefill reads it
        self.scorer.submit(self.run_score, job)

    def run_score(self, job: Job) -> None:
        """On the scoring thread: the pass over one prompt, then the job back to the engine
        thread (which answers it and counts it, as it does every job)."""
        error = None
        try:
            if job.top is not None and not job.cancelled:
                job.scored = self.score(list(job.request.prompt), job.top)
        except Exception as e:  # a bug met on this prompt: it alone fails
            traceback.print_exc()
            error = e
        with self.cond:
            self.scoring.remove(job)
            if self.crashed is None:  # (else the dying engine thread answered it)
                self.scored.append((job, error))
            self.cond.notify()

    def answer_scored(self) -> None:
        """Answer the prompts the scoring thread handed back: finish_reason "length", as vLLM
        gives a prompt scored without generating."""
        with self.cond:
            done, self.scored = self.scored, []
        for job, error in done:
            if error is not None:
                self.fail(job, error)
            elif job.cancelled:
                self.metrics.finished("abort", time.perf_counter() - job.arrived)
            else:
                self.metrics.finished("length", time.perf_counter() - job.arrived)
                self.metrics.phases(job.arrived, job.admitted, None, None, 0)
                job.post(Delta("", 0, "length"))

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
