"""`nanospec demo --web`: the visualiser in browsers, so a workshop can follow one machine.

textual-serve runs a small web server whose page is a terminal (xterm.js). Every browser that
opens the page gets a demo of its own: the server starts one process per connection and speaks
Textual's web driver with it over pipes. So this file turns the demo's flags back into that
process's command line and starts the server, mending two things textual-serve leaves open: the
page's own address when serving on 0.0.0.0, and pages still open when the server stops.

What this does not do: share one run among visitors (each connection runs a demo of its own,
which loads and compiles the models itself; a `--replay` needs neither, so it suits a large
room), or guard the page: there is no TLS and no login, so keep the default 127.0.0.1 unless the
room's network is one you trust.
"""

import asyncio
import os
import shlex
import socket
import subprocess
import sys

from nanospec.errors import UserError
from viz.cli import LIVE_FLAGS

WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # every address of this machine: say which to open
NOWHERE = ("198.51.100.1", 9)  # TEST-NET-2 (RFC 5737): no network routes it but by its default


def demo_command(args) -> list[str]:
    """The command each browser's demo runs: these same flags, less --web, --host and --port.

    `python -m nanospec` is what the `nanospec` script runs (nanospec.cli:main), started
    through this very interpreter, so it works without the script on PATH or in a virtualenv
    nobody activated. Values go as `--flag=value`, so that a prompt like "-1 + 1 =" stays a value.
    """
    argv = [sys.executable, "-m", "nanospec", f"--checkpoints={args.checkpoints}", "demo"]
    argv += [
        f"{flag}={getattr(args, name)}"
        for name, flag in LIVE_FLAGS.items()
        if getattr(args, name) is not None
    ]
    argv += [
        f"--{role}={getattr(args, role)}" for role in ("target", "draft") if getattr(args, role)
    ]
    if args.race:
        argv.append("--race")
    if args.replay:
        argv.append(f"--replay={args.replay}")  # a demo starts in the server's folder
    if args.round is not None:
        argv.append(f"--round={args.round}")
    return argv


def shell_line(argv: list[str]) -> str:
    """textual-serve starts the command through the shell (/bin/sh, or cmd.exe on Windows), so it
    takes one string: quote it the way that shell reads it."""
    return shlex.join(argv) if os.name == "posix" else subprocess.list2cmdline(argv)


def page_url(host: str, port: int) -> str:
    """The address to open: `page_url("::1", 8000)` is "http://[::1]:8000"."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def lan_address() -> str:
    """This machine's IPv4 address on the network of its default route, the one other laptops
    in the room type; "127.0.0.1" where it has no such network.

    A host name is no good: other laptops often cannot resolve it. Connecting a UDP socket
    sends nothing; it only has the system pick the route, and so the source address, that a
    packet to NOWHERE would take, which is the default route's.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(NOWHERE)
            address = probe.getsockname()[0]
    except OSError:  # no route at all: the machine is on no network
        return "127.0.0.1"
    return address if address not in ("0.0.0.0", "") else "127.0.0.1"


def where(host: str, port: int) -> str:
    """Where the page is, for the start-up line: served on every address (--host 0.0.0.0),
    both the address to open here and the one for other laptops, e.g. "http://127.0.0.1:8000
    on this machine, http://192.168.1.23:8000 from other laptops on its network"."""
    if host not in WILDCARD_HOSTS:
        return page_url(host, port)
    here, lan = page_url("127.0.0.1", port), lan_address()
    if lan == "127.0.0.1":
        return f"{here} (this machine only: it is on no network other laptops could reach)"
    return f"{here} on this machine, {page_url(lan, port)} from other laptops on its network"


def check_free(host: str, port: int) -> None:
    """Refuse a port that is taken, or a host that is not this machine's, in one sentence.

    textual-serve would only find out with a traceback, after announcing the address; binding
    the same way first (SO_REUSEADDR, as aiohttp does) and letting go again catches both.
    """
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            if os.name == "posix":  # elsewhere it would let two servers share the port
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as e:
        raise UserError(
            f"Cannot serve the demo on {host} port {port}: "
            f"{e.strerror or e}; give another --host or --port."
        ) from None


def serve(args) -> None:
    """Serve the demo until Ctrl+C (or SIGTERM), which stops the server and every visitor's demo."""
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UserError(
            "--web serves the demo through textual-serve, which is not installed; "
            "install the web extra: pip install -c constraints.txt -e '.[web]'."
        ) from None

    visitors: set[asyncio.Task] = set()  # one per open page: the task serving its websocket

    class DemoServer(Server):
        async def handle_index(self, request):
            # subtle: the page tells the browser where to open its websocket, and textual-serve
            # builds that from the address it listens on, which for 0.0.0.0 is no address a
            # visitor can reach. The address this visitor used is one. No await comes between
            # this line and the page's rendering, so visitors cannot see each other's address.
            self.public_url = f"{request.scheme}://{request.host}"
            return await super().handle_index(request)

        async def handle_websocket(self, request):
            visitors.add(asyncio.current_task())
            try:
                return await super().handle_websocket(request)
            finally:
                visitors.discard(asyncio.current_task())

        async def on_shutdown(self, app) -> None:
            # textual-serve leaves open pages open when it stops, and aiohttp then waits, many
            # seconds, for them to close. Cancelled, each closes its page and quits its demo.
            for task in visitors:
                task.cancel()
            await asyncio.gather(*visitors, return_exceptions=True)

        async def on_startup(self, app) -> None:  # one line instead of textual-serve's banner
            print(
                f"nanospec: the demo is at {where(self.host, self.port)} (open it in a "
                f"browser; each visitor gets a demo of their own; Ctrl+C stops)",
                flush=True,
            )

    host, port = args.host or "127.0.0.1", args.port or 8000
    check_free(host, port)
    DemoServer(shell_line(demo_command(args)), host=host, port=port, title="nanospec demo").serve()
