"""`nanospec serve`, the command: read the flags, build and warm the engine, listen, drain.

    nanospec serve [--host 127.0.0.1] [--port 8000] [--method ar|draft|ngram|medusa|eagle|mtp|ssd]
                   [--gamma K] [--adaptive] [--speculative-config JSON] [--slots 8]
                   [--max-model-len N] [--max-queue 64] [--served-model-name nanospec]
                   [--api-key KEY]

--speculative-config takes vLLM's form, so a vLLM command line carries over:

    --speculative-config '{"method": "draft_model", "num_speculative_tokens": 4}'
    --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}'
    --speculative-config '{"method": "draft_model", "num_speculative_tokens": 4,
                           "disable_by_batch_size": 16}'

--adaptive chooses γ (0 to --gamma) every step by goodput (serving/adaptive.py).

--api-key (or the environment's NANOSPEC_API_KEY; the flag wins) makes clients send
`Authorization: Bearer KEY` (server.ApiKey). The environment keeps the key out of `ps` and
shell history; the server never prints it.

The order matters for the user: everything that can be wrong with the flags, and the port,
is checked before the models load, so a mistake is one sentence within a second. Then the
engine compiles every prefill bucket and every step (`warm_up`; an adaptive engine then
probes each γ's cost), and only then does the server listen — so /health answering means
the first client will not wait for a compile.

What this file deliberately leaves out: the HTTP app (server.py), and the engine (engine.py).
"""

import json
import os
import signal
import socket
import sys
from dataclasses import replace

from nanospec.errors import UserError
from nanospec.methods import METHODS
from nanospec.serving.engine import Engine
from nanospec.serving.scheduler import Scheduler

# vLLM's --speculative-config method names -> nanospec's (eagle3 drafts like EAGLE here).
VLLM_METHODS = {m.vllm: name for name, m in METHODS.items() if m.vllm} | {"eagle3": "eagle"}
SPEC_KEYS = {
    "method",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "disable_by_batch_size",
}


def speculative_config(text: str) -> dict:
    """vLLM's --speculative-config JSON -> {method, gamma, and n-gram sizes if given}.

    >>> speculative_config('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}')
    {'method': 'ngram', 'gamma': 4, 'max_ngram': 3}
    """
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        raise UserError(f"--speculative-config must be a JSON object, got {text!r}.") from None
    if not isinstance(config, dict) or config.get("method") not in VLLM_METHODS:
        raise UserError(
            f'--speculative-config needs a "method" among {", ".join(VLLM_METHODS)}, got {text!r}.'
        )
    unknown = sorted(set(config) - SPEC_KEYS)
    if unknown:
        raise UserError(
            f"--speculative-config: nanospec does not know {', '.join(unknown)}; "
            f"it reads {', '.join(sorted(SPEC_KEYS))}."
        )
    out = {"method": VLLM_METHODS[config["method"]]}
    for key, ours, most in (
        ("num_speculative_tokens", "gamma", 32),
        ("prompt_lookup_max", "max_ngram", 32),
        ("prompt_lookup_min", "min_ngram", 32),
        ("disable_by_batch_size", "disable_at", 100_000),
    ):
        if key in config:
            if type(config[key]) is not int or not 1 <= config[key] <= most:
                raise UserError(
                    f"--speculative-config: {key} must be a whole number from 1 "
                    f"to {most}, got {config[key]!r}."
                )
            out[ours] = config[key]
    return out


def speculation(args) -> dict:
    """The flags' decoding method as build_engine's keywords: --method/--gamma, or vLLM's
    --speculative-config (not both)."""
    spec = {"method": args.method or "ar", "gamma": args.gamma or 4}
    if args.speculative_config is not None:
        if args.method or args.gamma:
            raise UserError(
                "--speculative-config sets the method and gamma; drop --method and --gamma."
            )
        spec.update(speculative_config(args.speculative_config))
    if getattr(args, "adaptive", False):
        if "disable_at" in spec:
            raise UserError("--adaptive chooses γ itself; drop disable_by_batch_size.")
        spec["adaptive"] = True
    return spec


def build_engine(
    bundle,
    method: str,
    gamma: int,
    slots: int,
    max_ngram: int | None = None,
    min_ngram: int | None = None,
    adaptive: bool = False,
    disable_at: int | None = None,
    max_len: int | None = None,
) -> Engine:
    """The engine that serves `method` with γ drafts a round in `slots` slots (n-gram sizes:
    prompt lookup only), its γ chosen every step by goodput (`adaptive`, up to γ) or switched
    off from `disable_at` running requests (vLLM's disable_by_batch_size), with caches for
    `max_len` tokens a request. The one place a server's engine is made."""
    from nanospec.decode import make_loop
    from nanospec.serving.adaptive import DisableByBatchSize, Goodput, gammas_up_to

    loop, dparams = make_loop(bundle, method, gamma)
    if method == "ngram":
        sizes = {k: v for k, v in (("max_ngram", max_ngram), ("min_ngram", min_ngram)) if v}
        loop = replace(loop, drafter=replace(loop.drafter, **sizes))
    elif max_ngram or min_ngram:
        raise UserError(
            "prompt_lookup_max and prompt_lookup_min size the n-gram drafter; "
            "they need the ngram method."
        )
    loop.check([2], 1)  # γ in range for this drafter, before anything compiles
    policy = None
    if adaptive:
        policy = Goodput(gammas=gammas_up_to(gamma))
    elif disable_at:
        policy = DisableByBatchSize(gamma, disable_at)
    return Engine(loop, bundle.models["target"][2], dparams, slots, policy, max_len=max_len)


def warm_up(engine: Engine) -> None:
    """Compile every prefill bucket and every step before listening (the first client should
    not wait), and with an adaptive policy measure what each γ's step costs."""
    engine.warm(range(1, engine.max_len))
    if getattr(engine.policy, "costs", 0) is None:
        engine.probe([0, 0])


def api_key_of(args) -> str | None:
    """--api-key, else $NANOSPEC_API_KEY, else None (no key). An empty or blank key is a
    mistake, not "no key": a server meant to be guarded would be open."""
    key = (
        args.api_key
        if getattr(args, "api_key", None) is not None
        else os.environ.get("NANOSPEC_API_KEY")
    )
    if key is not None and not (
        key and key == key.strip() and key.isascii() and key.isprintable()
    ):  # what an HTTP header carries as is
        raise UserError(
            "The API key (--api-key or NANOSPEC_API_KEY) must be printable ASCII, "
            "not empty and with no spaces at its ends; unset it to serve without "
            "one."
        )
    return key


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a port in use is one sentence, not a log line later."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(
            f"Cannot listen on {host}:{port} ({e.strerror or e}); choose another --port or --host."
        ) from None
    return sock


def draining(server_class, scheduler: Scheduler):
    """uvicorn's Server, except that the first SIGTERM (or Ctrl-C) drains before uvicorn shuts
    down: the engine thread takes no new request (a 503, and /health says 503, so that a load
    balancer looks elsewhere) and finishes the ones it has — running, waiting or being scored —
    while the server still listens; once it has, uvicorn stops listening and exits. A second
    signal starts uvicorn's own shutdown at once (stop listening, wait for the open requests);
    a third Ctrl-C, uvicorn's force quit."""

    class DrainingServer(server_class):
        def handle_exit(self, sig, frame):
            first = not scheduler.draining
            super().handle_exit(sig, frame)  # (uvicorn raises the signal again once it ends)
            if first:
                scheduler.drain()
                self.should_exit = False  # not yet: on_tick ends it, once drained
                n = scheduler.in_flight
                print(
                    f"nanospec: draining: finishing {n} request{'s' * (n != 1)} in flight, "
                    f"answering new ones 503.",
                    file=sys.stderr,
                    flush=True,
                )

        async def on_tick(self, counter: int) -> bool:
            if scheduler.draining and scheduler.idle:  # (uvicorn ticks every 0.1 s)
                self.should_exit = True
            return await super().on_tick(counter)

    return DrainingServer


def cmd_serve(args) -> int | None:
    """`nanospec serve`: load the models, build and warm the engine, serve until SIGTERM
    (exit 0), or until the engine thread dies (exit 1)."""
    import uvicorn

    from nanospec.decode import Bundle, needs
    from nanospec.serving.server import build_app

    spec = speculation(args)
    api_key = api_key_of(args)
    sock = listen(args.host, args.port)
    bundle = Bundle.load(
        args.checkpoints, needs(spec["method"]), target=args.target, draft=args.draft
    )
    engine = build_engine(bundle, slots=args.slots, max_len=args.max_model_len, **spec)
    warm_up(engine)
    app = build_app(engine, bundle.tok, args.served_model_name, args.max_queue, api_key=api_key)
    server = draining(uvicorn.Server, app.state.service.scheduler)(
        uvicorn.Config(app, log_level="info", http=app.state.http)
    )
    print(
        f"nanospec: serving {args.served_model_name!r} ({spec['method']}, {args.slots} "
        f"slots) on http://{args.host}:{sock.getsockname()[1]}/v1"
        f"{' (API key required)' if api_key else ''}",
        file=sys.stderr,
        flush=True,
    )
    # subtle: after shutting down, uvicorn re-raises the signal it caught, and the default
    # SIGTERM handler would kill the process with it. A server that drained has done what
    # SIGTERM asked, so that re-raised signal does nothing and the command exits 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    scheduler = app.state.service.scheduler
    scheduler.on_crash = lambda: setattr(server, "should_exit", True)
    server.run(sockets=[sock])
    if scheduler.crashed:  # every client was answered; a supervisor should start us again
        print(
            f"nanospec: the engine stopped ({scheduler.crashed}); exiting so that a "
            f"supervisor can restart the server.",
            file=sys.stderr,
            flush=True,
        )
        return 1
