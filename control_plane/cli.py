"""``outpost-control``: run the control plane, and operate it.

    outpost-control serve [--config FILE] [--data-dir DIR] [--http HOST:PORT] [--tunnel HOST:PORT] ...
    outpost-control environments create --name NAME | environments list
    outpost-control tokens create --environment ENV_ID [--ttl-s 3600] [--count N --out-dir DIR]
    outpost-control tokens list [--environment ENV_ID] | tokens revoke TOKEN_ID
    outpost-control edges list [--environment ENV_ID] | edges revoke EDGE_ID
    outpost-control sessions list | sessions events SESSION_ID [--follow]
    outpost-control exec --environment ENV_ID --session SESSION bash 'ls -la'
    outpost-control exec --environment ENV_ID --session SESSION read --input '{"file_path": "a.txt"}'
    outpost-control destroy-sandbox --environment ENV_ID --session SESSION
    outpost-control api-keys create --name NAME [--scope read_only] [--environment ENV_ID] [--ttl-s S]
    outpost-control api-keys list | api-keys revoke KEY_ID | api-keys rotate-admin --data-dir DIR
    outpost-control webhooks create --endpoint-url URL [--event-type TYPE] | webhooks list
    outpost-control webhooks rotate-secret ENDPOINT_ID [--out FILE] | webhooks delete ENDPOINT_ID
    outpost-control migrate [--config FILE] | store copy --from sqlite:///PATH --to postgresql://...

Operator commands talk to the HTTP API (``--url``, default ``$OUTPOST_URL`` or
http://127.0.0.1:8080) with an API key from ``--api-key-file``, ``$OUTPOST_API_KEY``, or the admin
key file that ``serve`` writes into its data directory (``--data-dir``, ``$OUTPOST_DATA_DIR``).
Listings print a table on a terminal and JSON otherwise; ``-o table|json`` chooses.

Every user error ends as one line on stderr and a documented exit code (docs/operations.md, "Exit
codes"): 0 ok, 1 other failure, 2 usage or configuration, 3 refused (API key), 4 control plane
unreachable. The modules: :mod:`control_plane.cli_serve` (``serve``),
:mod:`control_plane.cli_fleet` (environments, tokens, edges, exec),
:mod:`control_plane.cli_sessions` (sessions), :mod:`control_plane.cli_api_keys` (api-keys),
:mod:`control_plane.cli_store` (migrate, store copy: on the store itself, not through the API),
:mod:`control_plane.cli_webhooks` (webhook endpoints),
:mod:`control_plane.cli_client` (the HTTP calls).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from control_plane.cli_api_keys import API_KEY_COMMANDS, add_api_key_parsers
from control_plane.cli_fleet import FLEET_COMMANDS, add_fleet_parsers
from control_plane.cli_serve import add_serve_parser, run_serve
from control_plane.cli_sessions import SESSION_COMMANDS, add_session_parsers
from control_plane.cli_store import STORE_COMMANDS, add_store_parsers
from control_plane.cli_webhooks import WEBHOOK_COMMANDS, add_webhook_parsers
from outpost_wire.cli_support import ArgumentParser, run_cli
from outpost_wire.logfmt import configure_logging

__all__ = ["main"]

PROG = "outpost-control"


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="Outpost control plane: run it (serve) and operate it.",
        epilog="Exit codes: 0 ok, 1 failure, 2 usage or configuration, 3 refused (API key), "
        "4 control plane unreachable. See docs/operations.md.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_parser(sub)
    add_fleet_parsers(sub)
    add_session_parsers(sub)
    add_api_key_parsers(sub)
    add_store_parsers(sub)
    add_webhook_parsers(sub)
    return p


def _serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    return run_serve(args)  # uvloop where installed (--event-loop)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    **FLEET_COMMANDS,
    **SESSION_COMMANDS,
    **API_KEY_COMMANDS,
    **STORE_COMMANDS,
    **WEBHOOK_COMMANDS,
}


def _dispatch(args: argparse.Namespace) -> int:
    return _COMMANDS[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(PROG, _parser(), _dispatch, argv)


if __name__ == "__main__":
    sys.exit(main())
