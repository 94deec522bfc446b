"""``outpost-control serve``: its flags, its configuration (file, then flags) and the process.

Under systemd (``Type=notify``) ``serve`` sends ``READY=1`` once the API and the tunnel listen and
the harness runs, ``WATCHDOG=1`` every ``WatchdogSec/2`` while its event loop turns, and
``STOPPING=1`` when SIGTERM starts the drain.

What stops it before it serves, each as one line (see :mod:`outpost_wire.cli_support`): a config
file that is missing, not YAML or not a mapping, a key that is unknown or invalid (exit 2); a model
API key file that cannot be read (exit 2); a data directory it may not create (exit 2); an address
another process listens on (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from control_plane.errors import ControlPlaneError, ListenFailed
from control_plane.listen import check_bindable
from outpost_wire import sdnotify
from outpost_wire.cli_support import (
    CliError,
    UsageError,
    env_help,
    load_yaml_mapping,
    log_level,
    validation_message,
)

if TYPE_CHECKING:
    from control_plane.config import ControlPlaneConfig

__all__ = ["add_serve_parser", "event_loop_factory", "run_serve", "serve", "serve_config"]

#: The soft open-file limit ``serve`` asks for (the systemd unit's ``LimitNOFILE``).
OPEN_FILES_WANTED = 65536

# The control plane itself (FastAPI, gRPC, the harness, the model SDK) is imported by ``serve``
# only: the operator commands start in a fraction of the time without it.


def _hostport(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def add_serve_parser(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the API, the tunnel server and the harnesses")
    serve.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML file with ControlPlaneConfig keys (docs/configuration.md); flags override it. "
        "An empty file is valid: every key has a default",
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help=env_help(
            "state: store, CA, admin API key (default /var/lib/outpost-control)", "OUTPOST_DATA_DIR"
        ),
    )
    serve.add_argument(
        "--http", type=_hostport, metavar="HOST:PORT", help="API listen address (default 127.0.0.1:8080)"
    )
    serve.add_argument(
        "--tunnel", type=_hostport, metavar="HOST:PORT", help="tunnel listen address (default 127.0.0.1:7443)"
    )
    serve.add_argument(
        "--public-tunnel-address", metavar="HOST:PORT", help="what edges dial (default: the listen address)"
    )
    serve.add_argument(
        "--tls-hostname",
        action="append",
        default=[],
        metavar="NAME",
        help="a name for the tunnel (and HTTPS) certificate; repeat for several (localhost is always in)",
    )
    serve.add_argument(
        "--http-tls",
        action="store_true",
        help="serve the API over HTTPS (a certificate from the control plane's CA; client certificates "
        "optional, used to authenticate edges on the WebSocket tunnel)",
    )
    serve.add_argument(
        "--model-base-url",
        metavar="URL",
        help=env_help("a Messages-API endpoint (default: Anthropic's)", "ANTHROPIC_BASE_URL"),
    )
    serve.add_argument(
        "--model-api-key-file",
        type=Path,
        metavar="FILE",
        help=env_help(
            "file holding the model API key, empty for none (else the key in $ANTHROPIC_API_KEY)",
            "ANTHROPIC_API_KEY_FILE",
        ),
    )
    serve.add_argument(
        "--log-level",
        type=log_level,
        metavar="LEVEL",
        default="INFO",
        help="debug, info (default), warning, error or critical, in any case",
    )
    serve.add_argument(
        "--event-loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="the asyncio event loop: uvloop where installed (auto, the default), or the standard one",
    )
    serve.add_argument(
        "--log-format",
        choices=("plain", "json"),
        default="plain",
        help="plain lines (default) or one JSON object per line",
    )


def serve_config(args: argparse.Namespace) -> ControlPlaneConfig:
    """The configuration: the ``--config`` file's keys, then the flags over them."""
    from control_plane.config import ControlPlaneConfig
    from control_plane.model_api_key import ModelApiKeyFileError, model_api_key

    data: dict[str, Any] = {}
    source = "the command-line flags"
    if args.config is not None:
        data.update(load_yaml_mapping(args.config))
        source = str(args.config)
    data_dir = args.data_dir or os.environ.get("OUTPOST_DATA_DIR")
    if data_dir:
        data["data_dir"] = str(data_dir)
    if args.http:
        data["http_host"], data["http_port"] = args.http
    if args.tunnel:
        data["tunnel_host"], data["tunnel_port"] = args.tunnel
    if args.public_tunnel_address:
        data["public_tunnel_address"] = args.public_tunnel_address
    if args.tls_hostname:
        data["tls_hostnames"] = ["localhost", *args.tls_hostname]
    if args.http_tls:
        data["http_tls"] = True
    if args.model_base_url:
        data["model_base_url"] = args.model_base_url
    if args.model_api_key_file:
        data["model_api_key_file"] = str(args.model_api_key_file)
    try:
        config = ControlPlaneConfig.model_validate(data)
    except ValidationError as exc:
        raise UsageError(validation_message(exc, source), hint="see docs/configuration.md") from None
    try:  # fail before anything listens if the key file is missing or unreadable
        model_api_key(config, os.environ)
    except ModelApiKeyFileError as exc:
        raise UsageError(str(exc), hint="check --model-api-key-file / $ANTHROPIC_API_KEY_FILE") from None
    return config


def _preflight(config: ControlPlaneConfig) -> None:
    """What can be checked before anything starts: the data directory and the two addresses."""
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except PermissionError:
        raise UsageError(
            f"cannot create the data directory {config.data_dir}: permission denied",
            hint="pass --data-dir DIR (or $OUTPOST_DATA_DIR) that this user may write, or run as the "
            "service user",
        ) from None
    except OSError as exc:
        raise UsageError(
            f"cannot create the data directory {config.data_dir}: {exc.strerror or exc}"
        ) from None
    check_bindable("API", config.http_host, config.http_port)
    check_bindable("tunnel", config.tunnel_host, config.tunnel_port)


def _listen_error(exc: ListenFailed) -> CliError:
    flag = "--http" if exc.what == "API" else "--tunnel"
    return CliError(
        str(exc),
        hint=f"is another outpost-control (or other process) listening there? choose another address "
        f"with {flag} HOST:PORT",
    )


def run_serve(args: argparse.Namespace) -> int:
    """:func:`serve` in the event loop ``--event-loop`` chooses. uvloop (the ``control`` extra
    installs it where it builds: not on Windows) runs the API, the gRPC tunnel (``grpc.aio``) and
    the harnesses on one libuv loop, at a fraction of the standard loop's cost per I/O event."""
    with asyncio.Runner(loop_factory=event_loop_factory(args.event_loop)) as runner:
        return runner.run(serve(args))


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``choice`` (``auto``, ``uvloop``, ``asyncio``); ``None``: the standard
    loop. ``uvloop`` when it is not installed is a usage error."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise UsageError(
                "--event-loop uvloop: uvloop is not installed",
                hint="pip install uvloop, or --event-loop auto",
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def serve(args: argparse.Namespace) -> int:
    config = serve_config(args)
    try:
        _preflight(config)
        return await _run(config)
    except ListenFailed as exc:
        raise _listen_error(exc) from None
    except PermissionError as exc:
        raise CliError(
            f"permission denied: {exc.filename or exc}", hint="check the data directory's owner"
        ) from None
    except ControlPlaneError as exc:
        raise CliError(f"the control plane could not start: {exc}") from None


async def _run(config: ControlPlaneConfig) -> int:
    from control_plane import server
    from control_plane.gc_tuning import tune_for_serving
    from control_plane.http_limits import raise_open_file_limit

    # Every connection holds a descriptor: lift a shell's soft limit (often 1,024) towards the hard one.
    files = raise_open_file_limit(OPEN_FILES_WANTED)
    if files < config.http_limit_concurrency + config.stream_max_total:
        logging.getLogger("outpost_control").warning(
            "the open-file limit is %d, under http_limit_concurrency + stream_max_total (%d): raise it "
            "(LimitNOFILE= in the unit, ulimit -n) or lower those limits",
            files,
            config.http_limit_concurrency + config.stream_max_total,
        )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    notifier = sdnotify.Notifier.from_environ(os.environ)  # systemd Type=notify, if any
    supervise: asyncio.Task[None] | None = None
    try:
        async with server.ControlPlane(config) as cp:
            print(f"Outpost control plane {cp.id}: API {cp.http_url}, tunnel {cp.tunnel_address}", flush=True)
            print(f"admin API key: {cp.admin_key_path}", flush=True)
            tune_for_serving(config.gc_thresholds)  # what is alive now is frozen out of collections
            # Serving: READY=1 now, then WATCHDOG=1 while this event loop turns (the drain included).
            serving = asyncio.Event()
            serving.set()
            interval_s = sdnotify.watchdog_interval_s(os.environ)
            supervise = asyncio.create_task(
                sdnotify.supervise(notifier, serving, interval_s=interval_s, grace_s=0),
                name="control-sdnotify",
            )
            await stop.wait()
            logging.getLogger("outpost_control").info("signal received; draining edges")
            notifier.stopping()
    finally:
        if supervise is not None:
            supervise.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervise
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0
