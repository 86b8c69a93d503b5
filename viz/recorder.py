"""The recorder: runs the speculative loop for the app in a thread worker, one run at a time.

A non-visual widget, so that it can own a Textual worker: `start(settings)` checks the settings,
starts a thread that compiles (`LiveRun.compile()`, live.py) and posts `Compiled` with the
compile event, then runs `LiveRun.rounds()` and posts one `RoundRecorded` message per round,
then `Finished` (or `Failed` with one sentence). Compiling apart from the rounds is what lets
the app say "compiling…" exactly while XLA works, and keeps it out of round 1's times. Messages flow up to the app; the app
never waits on the thread, so the screen keeps moving while JAX compiles. Starting a new run
cancels the old one (an exclusive worker group); its late messages carry an old `run_id` and
the app drops them.

It also remembers which compile keys (method, γ, prompt bucket) this process has already run,
so the app can say "compiling…" only when JAX really compiles.
"""

import threading
import time

from textual import work
from textual.message import Message
from textual.widget import Widget
from textual.worker import get_current_worker

from nanospec.errors import UserError
from viz.settings import Settings


class Recorder(Widget):
    DEFAULT_CSS = "Recorder { display: none; }"

    class RoundRecorded(Message):
        def __init__(self, run_id: int, events: list[dict]):
            super().__init__()
            self.run_id, self.events = run_id, events

    class Compiled(Message):
        def __init__(self, run_id: int, event: dict):
            super().__init__()
            self.run_id, self.event = run_id, event

    class Finished(Message):
        def __init__(self, run_id: int):
            super().__init__()
            self.run_id = run_id

    class Failed(Message):
        def __init__(self, run_id: int, error: str):
            super().__init__()
            self.run_id, self.error = run_id, error

    def __init__(self, bundle):
        super().__init__()
        self.bundle = bundle
        self.run_id = 0  # the current run; messages from older runs are stale
        self.compiled: set[tuple] = set()  # compile keys whose first round has come out
        self.compile_key: tuple = ()
        self.compiling = False  # the current run is waiting for JAX to compile
        self.started = 0.0  # time.monotonic() when the current run started
        self.in_flight = 0  # worker threads still running (a quitting process waits for them)
        self._lock = threading.Lock()

    @property
    def methods(self) -> tuple[str, ...]:
        from nanospec.methods import needs
        from viz.live import SPECULATIVE  # live mode only: replay never loads JAX

        # what the loaded models can run (a foreign --target pairs with no shipped head)
        return tuple(m for m in SPECULATIVE if all(n in self.bundle.models for n in needs(m)))

    def fit_gamma(self, method: str, gamma: int) -> int:
        """γ, lowered to what the method can draft per round (Medusa and MTP: one per head)."""
        drafter, _ = self.bundle.drafter(method)
        return min(gamma, drafter.max_gamma or gamma)

    def check(self, settings: Settings) -> None:
        """Raise UserError if a run with these settings cannot start (cheap: no JAX)."""
        from viz.live import LiveRun

        LiveRun(self.bundle, settings)

    def start(self, settings: Settings) -> dict:
        """Start a run and return its run_start event; a bad setting raises UserError instead."""
        from viz.live import LiveRun

        run = LiveRun(self.bundle, settings)
        self.run_id += 1
        self.compile_key = run.compile_key
        self.compiling = run.compile_key not in self.compiled
        self.started = time.monotonic()
        self._produce(run, self.run_id)
        return run.start_event()

    def is_current(self, message) -> bool:
        return message.run_id == self.run_id

    def compile_done(self) -> None:
        """The current run's programs are compiled (or were found compiled)."""
        self.compiling = False
        self.compiled.add(self.compile_key)

    @work(thread=True, exclusive=True, group="model")
    def _produce(self, run, run_id: int) -> None:
        """The worker thread: the only place the app runs JAX."""
        worker = get_current_worker()
        with self._lock:
            self.in_flight += 1
        try:
            event = run.compile()
            if worker.is_cancelled:
                return
            self.post_message(self.Compiled(run_id, event))
            for events in run.rounds():
                if worker.is_cancelled:
                    return
                self.post_message(self.RoundRecorded(run_id, events))
            self.post_message(self.Finished(run_id))
        except UserError as e:
            self.post_message(self.Failed(run_id, str(e)))
        finally:
            with self._lock:
                self.in_flight -= 1
