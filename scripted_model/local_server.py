"""The local model server: import it from here, or run it standalone.

::

    python -m scripted_model.local_server --port 0 --script demo

prints the server's URL (``http://127.0.0.1:PORT``) as the first line on stdout, then serves until SIGINT
or SIGTERM. ``--script`` is ``demo`` (:data:`~scripted_model.responders.demo_responder`), ``echo``
(:func:`~scripted_model.responders.echo_responder`) or the path of a JSON list of turns (see
:meth:`~scripted_model.script.Turn.from_dict`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from scripted_model.responders import demo_responder, echo_responder
from scripted_model.script import Responder, Script
from scripted_model.server import InjectedError, LocalModelServer, RecordedRequest

__all__ = ["InjectedError", "LocalModelServer", "RecordedRequest", "load_script", "main"]


def load_script(spec: str) -> Script | Responder:
    """``demo``, ``echo``, or the path of a JSON script file."""
    if spec == "demo":
        return demo_responder
    if spec == "echo":
        return echo_responder
    return Script.from_json(Path(spec).read_text(encoding="utf-8"))


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripted_model.local_server",
        description="Serve a local, scripted Messages API (no Claude needed).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    parser.add_argument("--script", default="demo", help="demo | echo | PATH.json (default demo)")
    parser.add_argument("--ttft-s", type=float, default=0.0, help="delay before the first content delta")
    parser.add_argument("--chunk-delay-s", type=float, default=0.0, help="delay between content deltas")
    parser.add_argument(
        "--api-key-file", type=Path, help="accept only the key in this file (default: any non-empty key)"
    )
    parser.add_argument("--no-require-key", action="store_true", help="accept requests without a key")
    parser.add_argument("--request-log", type=Path, help="append every request to this JSONL file")
    parser.add_argument(
        "--keep-alive-s", type=int, default=5, help="close idle kept-alive connections after this (default 5)"
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    return parser.parse_args(argv)


def _build(args: argparse.Namespace) -> LocalModelServer:
    api_key = args.api_key_file.read_text(encoding="utf-8").strip() if args.api_key_file else None
    return LocalModelServer(
        load_script(args.script),
        ttft_s=args.ttft_s,
        chunk_delay_s=args.chunk_delay_s,
        host=args.host,
        port=args.port,
        require_key=not args.no_require_key,
        api_key=api_key,
        request_log_path=args.request_log,
        keep_alive_s=args.keep_alive_s,
    )


async def _serve(server: LocalModelServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        print(server.base_url, flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGINT or SIGTERM; returns the exit status."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(_serve(_build(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
