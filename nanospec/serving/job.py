"""One request's life in the server: the Job its handler and the engine thread share.

A `Job` is one choice of one request; the engine thread posts it `Delta`s (scheduler.py moves
jobs between the queue, the slots and the scoring thread; service.py reads them).

What this file deliberately leaves out: the queue and the slots (scheduler.py).
"""

import asyncio
import time
from typing import NamedTuple

from nanospec.serving.api import ApiError
from nanospec.serving.engine import Request
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

    def __init__(
        self,
        request: Request,
        text: TextStream,
        loop: asyncio.AbstractEventLoop,
        top: int | None = None,
    ):
        self.request, self.text, self.loop = request, text, loop
        # A prompt to score (request.max_new 0: echo with max_tokens 0): with `top` (logprobs),
        # the pass gives it `scored`; without, there is nothing to compute but its turn.
        self.top, self.scored = top, None
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

    @property
    def scoring(self) -> bool:
        """A prompt to score, nothing to generate: it needs the scoring thread, not a slot."""
        return self.request.max_new == 0
