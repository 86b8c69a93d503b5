"""`nanospec serve` as a child process that a benchmark starts, waits for, and stops.

    with Launched(checkpoints, ["--method", "draft", "--gamma", "4"], slots=8) as server:
        loadgen.closed_loop(server.url, ...)

It asks for port 0, so the operating system picks a free port at the moment the server binds
it (no race with another program choosing the same "free" port), and reads the port from the
line `nanospec serve` prints once it has warmed up, just before it listens:

    nanospec: serving 'nanospec' (draft, 8 slots) on http://127.0.0.1:40123/v1

Ready means /health answers 200 — after the warm-up, so no request of the benchmark waits for
a compile. Stopping is SIGTERM, which drains (serving/launch.py), then a wait for the exit.

subtle: the child's stderr is read all the time by a thread (uvicorn logs a line for every
request): a pipe nobody reads fills up after 64 KiB and the server would block writing to it.

`Servers` keeps one such process per strategy for a load test's sweep.

What this file deliberately leaves out: servers on other machines (load those with --url).
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import httpx

from nanospec.errors import UserError
from nanospec.load.loadgen import scrape

REPO = Path(__file__).resolve().parent.parent.parent
SERVING = re.compile(r"nanospec: serving .* on (http://[^/\s]+)/v1")
READY_LIMIT = 900.0  # seconds: loading and compiling 64 slots on a 2-core CPU takes minutes


class Launched:
    """One `nanospec serve` process with `flags` and `slots` slots; its url once ready."""

    def __init__(self, checkpoints: str, flags: list[str], slots: int, max_queue: int = 100_000):
        self.flags, self.slots = flags, slots
        self.url: str | None = None
        self.log: deque[str] = deque(maxlen=40)  # the last lines of its stderr
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nanospec",
                "--checkpoints",
                str(checkpoints),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--slots",
                str(slots),
                "--max-queue",
                str(max_queue),
                *flags,
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
            env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        )  # Windows pipes default to cp1252
        self.reader = threading.Thread(target=self.read_log, daemon=True)
        self.reader.start()

    def read_log(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            found = SERVING.search(line)
            if found:
                self.url = found.group(1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, limit: float = READY_LIMIT) -> str:
        """Wait until /health answers 200; the url. A server that exits first is a UserError
        with its last line (a bad flag, a missing checkpoint)."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                self.reader.join(timeout=5)
                last = next((l for l in reversed(self.log) if l.strip()), "no output")
                raise UserError(
                    f"`nanospec serve {' '.join(self.flags)}` exited with status "
                    f"{self.proc.returncode}: {last}"
                )
            if self.url is not None and healthy(self.url):
                return self.url
            time.sleep(0.1)
        self.stop()
        raise UserError(
            f"`nanospec serve {' '.join(self.flags)}` was not ready after {limit:.0f} s."
        )

    def stop(self, limit: float = 120.0) -> int:
        """SIGTERM (drain, then exit), then wait; killed if it has not exited within `limit`.
        (On Windows, send_signal(SIGTERM) is TerminateProcess: the server ends without a drain.)"""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=5)
        return self.proc.returncode

    def __enter__(self) -> "Launched":
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def healthy(url: str) -> bool:
    """Whether GET /health answers 200 now (a server not listening yet is just not healthy)."""
    try:
        return httpx.get(url + "/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


class Servers:
    """The servers a load test's sweep loads (load/loadtest.py): one per strategy, started
    with `plan.serve_flags(strategy)` and replaced when a level needs another slot count — or,
    with `plan.url`, the one running server. `progress`: a rich Progress, for a line while a
    server starts."""

    def __init__(self, plan, progress):
        self.plan, self.progress, self.running = plan, progress, {}

    def url(self, strategy: str, slots: int) -> str:
        if self.plan.url:
            return self.plan.url
        server = self.running.get(strategy)
        if server is not None and server.slots != slots:
            server.stop()
            server = None
        if server is None:
            task = self.progress.add_task(
                f"starting {strategy} ({slots} slots)", total=None, rate=""
            )
            # Kept before it is ready, so that close() stops it even if the wait fails.
            self.running[strategy] = server = Launched(
                self.plan.checkpoints, self.plan.serve_flags(strategy), slots
            )
            server.wait_ready()
            self.progress.remove_task(task)
        return server.url

    def close(self) -> None:
        for server in self.running.values():
            server.stop()
        self.running = {}


def served_model(url: str, api_key: str | None = None) -> str:
    """The served model's name: the first of GET /v1/models (which needs the server's key,
    if it has one: a 401 is one sentence saying which flag gives it)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    r = httpx.get(url + "/v1/models", timeout=30, headers=headers)
    if r.status_code == 401:
        raise UserError(
            f"The server at {url} needs an API key"
            f"{' other than the one given' if api_key else ''}: give it with --api-key "
            f"KEY (or the environment's NANOSPEC_API_KEY)."
        )
    return r.json()["data"][0]["id"]


def wait_idle(url: str, limit: float = 60.0) -> None:
    """Until the server has no request running or waiting, so its counters are final."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        m = scrape(url)
        if not m.get("vllm:num_requests_running") and not m.get("vllm:num_requests_waiting"):
            return
        time.sleep(0.05)
