"""`nanospec demo`: the visualiser's command line.

It is registered through the nanospec.commands entry point, so nanospec itself never imports
viz.

    nanospec demo [--prompt TEXT] [--method M] [--gamma K] [--temperature T] [--top-k K]
                  [--top-p P] [--seed S] [--max-new-tokens N]          live, on the shipped models
    nanospec demo --race [--method M] [...same settings...]            ar vs M, timed (race.py)
    nanospec demo --replay FILE.jsonl                                  a recorded trace, no model
    nanospec demo ... --screenshot FILE.svg [--round N]                one screen, no terminal
    nanospec demo ... --web [--host H] [--port P]                      in browsers (web.py)

Every mistake a person can fix (a missing or broken trace, a bad setting, no terminal) is one
sentence and exit code 2, like the rest of nanospec; whatever can be checked without the models
(the method, the prompt, the numbers, the flags' combinations) is checked before loading them,
which takes seconds. Importing this module stays cheap: JAX and Textual load only when the demo
actually runs.
"""

import asyncio
import os
import sys
from pathlib import Path

from nanospec.cli import add_model_flags, float_arg, int_in
from nanospec.cli.args import load_bundle
from nanospec.errors import UserError

LIVE_FLAGS = {
    "prompt": "--prompt",
    "method": "--method",
    "gamma": "--gamma",
    "temperature": "--temperature",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "seed": "--seed",
    "max_new": "--max-new-tokens",
}
SCREENSHOT_SIZE = (120, 36)  # columns, rows of the exported screen


def register(subparsers) -> None:
    d = subparsers.add_parser(
        "demo", help="watch speculative decoding round by round (terminal UI)"
    )
    d.add_argument("--prompt", default=None, help='default "The capital of France is"')
    add_model_flags(d)
    d.add_argument("--method", default=None, help="drafting method (default draft)")
    d.add_argument("--gamma", type=int_in(1, 32), default=None, help="drafts per round (default 4)")
    d.add_argument("--temperature", type=float_arg, default=None, help="0 = greedy (default 1)")
    d.add_argument("--top-k", dest="top_k", type=int_in(0), default=None, help="0 = off")
    d.add_argument("--top-p", dest="top_p", type=float_arg, default=None, help="1 = off")
    d.add_argument("--seed", type=int_in(0), default=None)
    d.add_argument(
        "--max-new-tokens",
        dest="max_new",
        type=int_in(1, 4096),
        default=None,
        help="tokens to generate (default 32)",
    )
    d.add_argument(
        "--race",
        action="store_true",
        help="race autoregressive decoding against --method, each timed alone",
    )
    d.add_argument(
        "--replay",
        default=None,
        metavar="FILE.jsonl",
        help="play a recorded trace (nanospec generate --trace) without any model",
    )
    d.add_argument(
        "--screenshot",
        default=None,
        metavar="FILE.svg",
        help="write one screen as SVG and exit, without opening a terminal",
    )
    d.add_argument(
        "--round",
        type=int_in(1),
        default=None,
        metavar="N",
        help="open at round N, fully judged (default for --screenshot: the last)",
    )
    d.add_argument(
        "--web",
        action="store_true",
        help="serve the demo to browsers instead (textual-serve: the web extra)",
    )
    d.add_argument("--host", default=None, help="with --web: the address (default 127.0.0.1)")
    d.add_argument(
        "--port", type=int_in(1, 65535), default=None, help="with --web: the port (default 8000)"
    )
    d.set_defaults(func=run_demo)


def check_args(args) -> None:
    """Everything that can be refused without the models, so a mistake costs no loading time."""
    if args.race and args.replay:
        raise UserError(
            "--race times two live runs on the models, so it cannot replay a trace; "
            "drop --race or --replay."
        )
    if args.race and args.round is not None:
        raise UserError(
            "--round opens one run at a round; --race shows two runs whole, so drop --round."
        )
    # --web takes --race and --replay too: each visitor's demo is a process of its own.
    if args.web and args.screenshot is not None:
        raise UserError(
            "--web serves the demo to browsers and --screenshot writes one screen "
            "to a file; drop one of them."
        )
    if not args.web and (args.host is not None or args.port is not None):
        raise UserError(
            "--host and --port say where --web serves the demo; add --web or drop them."
        )
    if args.replay:
        given = [LIVE_FLAGS[name] for name in LIVE_FLAGS if getattr(args, name) is not None]
        if given:
            raise UserError(
                f"--replay plays a recorded trace as it was, so {', '.join(given)} "
                f"cannot change it; drop {'them' if len(given) > 1 else 'it'} "
                f"or run live."
            )
        return
    live_settings(args)


def live_settings(args):
    """The live run's Settings from the flags given, checked as far as possible without models."""
    from nanospec.methods import DRAFTING
    from viz.settings import Settings

    given = {name: getattr(args, name) for name in LIVE_FLAGS if getattr(args, name) is not None}
    if args.target is not None and args.draft is None:  # the shipped draft cannot pair with it
        given.setdefault("method", "ngram")
    settings = Settings(**given)
    drafting = DRAFTING
    if settings.method == "ar":
        raise UserError(
            f"--race always runs ar; give --method one of {', '.join(drafting)} to race against it."
            if args.race
            else f"The demo watches drafting rounds and ar drafts nothing; give --method "
            f"one of {', '.join(drafting)} (--race races ar against it)."
        )
    if settings.method not in drafting:
        raise UserError(f"Unknown method {settings.method!r}; choose one of {', '.join(drafting)}.")
    if not settings.prompt.strip():
        raise UserError("The prompt is empty; give at least one token of text.")
    settings.check()
    return settings


def build_app(args):
    """The DemoApp the arguments ask for; every problem found here is one UserError."""
    from viz.app import DemoApp

    interactive = args.screenshot is None
    if args.replay:
        from viz.rounds import load_recording

        recording = load_recording(args.replay)
        return DemoApp(
            recording,
            source=f"replay {Path(args.replay).name}",
            start_round=args.round if interactive else None,
            autoplay=interactive,
        )
    from nanospec.decode import EVERYTHING
    from viz.live import LiveRun

    settings = live_settings(args)
    say_loading(args)
    # the method switch can pick any that the models pair with (skip: hf/folder.py)
    bundle = load_bundle(args, EVERYTHING, skip=True)
    LiveRun(bundle, settings)  # the prompt must fit the model with this γ
    return DemoApp(
        bundle=bundle,
        settings=settings,
        start_round=args.round if interactive else None,
        autoplay=interactive,
    )


def build_race(args):
    """The RaceApp: ar against --method, loading only the models those two need."""
    from dataclasses import replace

    from nanospec.decode import needs
    from nanospec.proposers import check_gamma
    from viz.race import RaceApp

    settings = live_settings(args)
    say_loading(args)
    bundle = load_bundle(args, needs(settings.method))
    drafter, _ = bundle.drafter(settings.method)
    if args.gamma is None:  # the default γ shrinks to what heads can draft; a given one is checked
        most = drafter.max_gamma or settings.gamma
        settings = replace(settings, gamma=min(settings.gamma, most))
    check_gamma(drafter, settings.gamma)
    return RaceApp(bundle, settings, autoplay=args.screenshot is None)


def say_loading(args) -> None:
    if args.screenshot is None:  # a second or two of silence otherwise, before the screen appears
        where = ", ".join(filter(None, (args.target, args.draft))) or args.checkpoints
        print(f"nanospec: loading the models from {where}…", file=sys.stderr)


def check_screenshot_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix.lower() != ".svg":
        raise UserError(
            f"--screenshot writes SVG; give a file name ending in .svg, not {path.name!r}."
        )
    if not path.parent.is_dir():
        raise UserError(f"Cannot write {path}: the folder {path.parent} does not exist.")
    return path


def export_screenshot(
    app, path: str | Path, round_no: int | None, size: tuple[int, int] = SCREENSHOT_SIZE
) -> Path:
    """Run the DemoApp `app` headless until its run is recorded, show round N judged, write
    the SVG."""
    from viz.playhead import Phase, at_phase

    def pose(app) -> str:
        n = round_no or len(app.rounds)
        if n > len(app.rounds):
            raise UserError(f"--round {n}: this run has only {len(app.rounds)} rounds.")
        app.playing = False
        app.pos = at_phase(app.rounds, n - 1, Phase.EXTRA)
        return f"nanospec demo · round {n}"

    return shoot(app, path, pose, size)


def export_race_screenshot(app, path: str | Path, size: tuple[int, int] = SCREENSHOT_SIZE) -> Path:
    """Run the RaceApp `app` headless until both runs are timed; write the finish as SVG."""

    def pose(app) -> str:
        app.show_end()
        return "nanospec demo --race"

    return shoot(app, path, pose, size)


def shoot(app, path: str | Path, pose, size: tuple[int, int]) -> Path:
    """Run `app` headless until `app.done or app.error`, let `pose(app)` set the screen up (and
    return the title, or raise UserError), then write the SVG."""
    from nanospec.fileio import atomic_write

    path = check_screenshot_path(path)
    result: dict = {}

    async def take(pilot) -> None:
        try:
            while not (app.done or app.error):
                await pilot.pause(0.1)
            if app.error:
                raise UserError(app.error)
            title = pose(app)
            await pilot.pause()
            result["svg"] = app.export_screenshot(title=title)
        except UserError as e:
            result["error"] = e
        finally:
            app.exit()

    app.run(headless=True, size=size, auto_pilot=take)
    if "error" in result:
        raise result["error"]
    if "svg" not in result:
        raise RuntimeError("the demo app stopped before it could take the screenshot")
    atomic_write(path, result["svg"])
    return path


def run_demo(args) -> None:
    check_args(args)  # all of these before loading any model
    if args.web:
        if args.replay:  # a broken trace is one sentence here, not a blank page per visitor
            from viz.rounds import load_recording

            load_recording(args.replay)
        from viz.web import serve

        return serve(args)
    if args.screenshot is not None:
        check_screenshot_path(args.screenshot)
    # Under `--web` each visitor's demo talks to textual-serve through pipes, not a terminal;
    # textual-serve says so by choosing Textual's driver in TEXTUAL_DRIVER.
    elif not (os.environ.get("TEXTUAL_DRIVER") or (sys.stdin.isatty() and sys.stdout.isatty())):
        raise UserError(
            "nanospec demo needs an interactive terminal; to export a screen "
            "instead, add --screenshot FILE.svg."
        )
    app = build_race(args) if args.race else build_app(args)
    if args.screenshot is not None:
        written = (
            export_race_screenshot(app, args.screenshot)
            if args.race
            else export_screenshot(app, args.screenshot, args.round)
        )
        print(f"wrote {written}")
        return
    # Our own loop, so that quitting mid-compile returns the terminal at once and says why the
    # process lingers (a compile cannot be interrupted; its thread finishes, then we exit).
    loop = asyncio.new_event_loop()
    try:
        app.run(loop=loop)
    finally:
        if app.in_flight:
            print("nanospec: stopping; JAX is finishing the step it is compiling…", file=sys.stderr)
        loop.close()
