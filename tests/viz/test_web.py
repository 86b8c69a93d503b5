"""`nanospec demo --web` (viz/web.py): the visualiser in a real browser, and its refusals.

The end-to-end test does what a workshop does: it starts `nanospec demo --web` as a process,
opens the page in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright: install
it with `apt-get install chromium`), and waits until the page's terminal shows the demo playing
its first round, on the tiny test models, so that the visitor's own demo process has loaded them
and run them. The other tests need no browser and load no model.
"""

import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nanospec.cli import build_parser, main
from viz import web
from viz.web import demo_command, page_url, shell_line, where

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
PROMPT = "The capital of France is"

# xterm.js keeps the terminal's text in its buffer, but textual-serve's page keeps its Terminal
# in a closure. Its session object stores it as `this.terminal = new Terminal(...)`, so a setter
# of that name on Object.prototype, installed before the page's script runs, sees it go by,
# hands it to the page as window.__terminal, and puts a plain property in its place.
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true});
    if (value && value.buffer) window.__terminal = value;
  },
});
"""
SCREEN_TEXT = """() => {
  const t = window.__terminal;
  if (!t) return "";
  const rows = [];
  for (let y = 0; y < t.rows; y++) rows.push(t.buffer.active.getLine(y).translateToString(true));
  return rows.join("\\n");
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, server: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited with {server.returncode}: {server.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nothing listened on port {port} within {seconds} s")


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's (width, height), from its IHDR chunk; fails on anything that is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.slow  # 15-35 s: a browser, and the visitor's demo compiles the models
def test_the_demo_plays_in_a_browser_and_the_server_stops_cleanly(tmp_path, tiny_ckpt_dir):
    if not CHROMIUM.exists():
        pytest.skip(f"no browser at {CHROMIUM} (Debian: apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nanospec",
            "--checkpoints",
            str(tiny_ckpt_dir),
            "demo",
            "--web",
            "--port",
            str(port),
            "--max-new-tokens",
            "8",
            "--seed",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_for_port(port, server)
        # The page sends the browser back to the address it used, not to the one served on.
        page_html = httpx.get(f"http://127.0.0.1:{port}/", headers={"Host": f"projector:{port}"})
        assert f'data-session-websocket-url="ws://projector:{port}/ws"' in page_html.text

        with playwright.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(
                tmp_path / "profile",
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 800},
            )
            page = browser.new_page()
            page.add_init_script(CATCH_TERMINAL)
            # The page also asks Google for a font; refused at once, it falls back to monospace
            # (offline, an unanswered lookup could hold the page's load event, and so its start).
            page.route(
                lambda url: not url.startswith(f"http://127.0.0.1:{port}/"),
                lambda route: route.abort(),
            )
            page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
            # The prompt and "round 1 of": this visitor's demo loaded the models and drafted.
            page.wait_for_function(
                f"() => {{ const s = ({SCREEN_TEXT})(); return "
                f"s.includes({PROMPT!r}) && s.includes('round 1 of'); }}",
                polling=250,
                timeout=120_000,
            )
            screen = page.evaluate(SCREEN_TEXT)
            assert "space  play/pause" in screen and "γ=4" in screen
            shot = page.screenshot(path=tmp_path / "demo.png")
            assert png_size(tmp_path / "demo.png") == (1280, 800) and len(shot) > 20_000

            # With the visitor still there, as Ctrl+C does: the server stops, and its demo too,
            # once a step it is compiling is done (a second or two; more on a busy machine).
            server.terminate()
            assert server.wait(timeout=15) == 0
            browser.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    output = server.stdout.read()
    assert f"nanospec: the demo is at http://127.0.0.1:{port} " in output
    # textual-serve passes a visitor's stderr on when that demo ends: it ran on these models.
    assert f"loading the models from {tiny_ckpt_dir}" in output and "Traceback" not in output


def test_each_visitor_runs_the_same_flags_through_this_interpreter():
    args = build_parser().parse_args(
        [
            "--checkpoints",
            "ckpt",
            "demo",
            "--web",
            "--port",
            "9000",
            "--prompt",
            "-1 + 1 = 'x'",
            "--temperature",
            "0.5",
            "--replay",
            "t.jsonl",
            "--round",
            "2",
        ]
    )
    argv = demo_command(args)
    assert argv[:3] == [sys.executable, "-m", "nanospec"]
    assert shlex.split(shell_line(argv)) == argv
    again = build_parser().parse_args(argv[3:])
    assert (again.checkpoints, again.replay) == ("ckpt", "t.jsonl")
    assert (again.prompt, again.temperature, again.round) == ("-1 + 1 = 'x'", 0.5, 2)
    assert not again.web and again.host is None and again.port is None and again.gamma is None


def test_page_url_names_an_address_a_browser_can_open():
    assert page_url("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert page_url("::1", 8000) == "http://[::1]:8000"
    assert where("127.0.0.1", 8000) == "http://127.0.0.1:8000"


class FakeUDP:
    """A socket that records what was done with it and sends nothing (it has no send)."""

    def __init__(self, address=None, refuse=False):
        self.address, self.refuse, self.calls = address, refuse, []

    def __call__(self, family, kind):
        self.calls.append(("socket", family, kind))
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.calls.append(("closed",))

    def connect(self, to):
        self.calls.append(("connect", to))
        if self.refuse:
            raise OSError(101, "Network is unreachable")

    def getsockname(self):
        return (self.address, 40000)


def test_served_to_the_room_it_prints_the_lan_address_beside_the_local_one(monkeypatch):
    """--host 0.0.0.0: the line names 127.0.0.1 for this laptop and the address of the default
    route's interface for the others (not the host name, which their laptops may not resolve),
    found by a UDP socket's connect, which sends nothing."""
    udp = FakeUDP("192.168.1.23")
    monkeypatch.setattr(web.socket, "socket", udp)
    assert where("0.0.0.0", 8000) == (
        "http://127.0.0.1:8000 on this machine, http://192.168.1.23:8000 from other laptops "
        "on its network"
    )
    assert udp.calls == [
        ("socket", socket.AF_INET, socket.SOCK_DGRAM),
        ("connect", web.NOWHERE),
        ("closed",),
    ]


@pytest.mark.parametrize("udp", [FakeUDP(refuse=True), FakeUDP("0.0.0.0")])
def test_on_no_network_it_says_this_machine_only(monkeypatch, udp):
    monkeypatch.setattr(web.socket, "socket", udp)
    assert web.lan_address() == "127.0.0.1"
    assert where("::", 80) == (
        "http://127.0.0.1:80 (this machine only: it is on no network other laptops could reach)"
    )


def test_the_lan_address_here_is_an_ipv4_address():
    import ipaddress

    assert ipaddress.ip_address(web.lan_address()).version == 4


@pytest.fixture
def never_serve(monkeypatch):
    """A refused command must stop before serving; if one did not, fail instead of hanging."""

    def serve(self, debug=False):
        raise AssertionError("served")

    monkeypatch.setattr("textual_serve.server.Server.serve", serve)


def test_without_textual_serve_it_names_the_extra(monkeypatch, capsys, never_serve):
    monkeypatch.setitem(sys.modules, "textual_serve", None)  # None: import fails, as if missing
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)
    assert main(["demo", "--web", "--port", str(free_port())]) == 2
    assert capsys.readouterr().err == (
        "nanospec: error: --web serves the demo through textual-serve, which is not installed; "
        "install the web extra: pip install -c constraints.txt -e '.[web]'.\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--web", "--screenshot", "s.svg"], "--web serves the demo to browsers and --screenshot"),
        (
            ["--port", "9000"],
            "--host and --port say where --web serves the demo; add --web or drop",
        ),
        (["--host", "0.0.0.0"], "--host and --port say where --web serves the demo"),
        (["--web", "--method", "ar"], "ar drafts nothing"),
        (["--web", "--race", "--round", "2"], "--race shows two runs whole, so drop --round."),
        (
            ["--web", "--host", "nowhere.invalid"],
            "Cannot serve the demo on nowhere.invalid port 8000",
        ),
    ],
)
def test_refusals_are_one_sentence(tmp_path, capsys, monkeypatch, never_serve, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_a_port_out_of_range_is_refused_by_the_parser(capsys, port):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--web", "--port", port])
    assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_a_taken_port_is_refused_before_announcing_it(capsys, never_serve):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["demo", "--web", "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"nanospec: error: Cannot serve the demo on 127.0.0.1 port {port}: "
        f"Address already in use; give another --host or --port.\n"
    )


def test_a_replay_that_is_no_trace_is_refused_before_serving(tmp_path, capsys, never_serve):
    assert main(["demo", "--web", "--replay", str(tmp_path)]) == 2
    assert f"{tmp_path} is a folder; give a trace file" in capsys.readouterr().err
