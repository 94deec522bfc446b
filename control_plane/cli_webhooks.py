"""``outpost-control webhooks``: webhook endpoints (an Outpost extension; docs/webhooks.md).

    webhooks create --endpoint-url URL [--event-type TYPE ...] [--environment ENV_ID] [--description TEXT]
                    [--out FILE]
    webhooks list | webhooks get ENDPOINT_ID | webhooks delete ENDPOINT_ID
    webhooks update ENDPOINT_ID [--endpoint-url URL] [--event-type TYPE ... | --all-events]
                    [--enable | --disable]
    webhooks rotate-secret ENDPOINT_ID [--out FILE]

``create`` and ``rotate-secret`` print the signing secret once (with ``--out FILE``: written there
0600 and left out of the output). Changes need an admin or unscoped read_write key.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from control_plane.cli_client import add_client_flags, call
from control_plane.cli_fleet import short_time
from outpost_wire.cli_support import CliError, UsageError, add_output_flag, print_rows
from outpost_wire.files import write_atomic

__all__ = ["WEBHOOK_COMMANDS", "add_webhook_parsers"]

_PATH = "/v1/outpost/webhook_endpoints"
_COLUMNS = [
    ("id", "ID"),
    ("url", "URL"),
    ("events", "EVENTS"),
    ("environment", "ENVIRONMENT"),
    ("enabled", "ENABLED"),
    ("created", "CREATED"),
]


def _with_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the secret to FILE (0600) instead of printing it"
    )


def add_webhook_parsers(sub: Any) -> None:
    hooks = sub.add_parser(
        "webhooks", help="webhook endpoints: create, list, get, update, rotate-secret, delete"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    create = hooks.add_parser("create", help="a new endpoint; its signing secret is printed once")
    add_client_flags(create)
    create.add_argument("--endpoint-url", required=True, help="https:// URL the deliveries are POSTed to")
    create.add_argument("--event-type", action="append", metavar="TYPE", help="only this type (repeat)")
    create.add_argument("--environment", metavar="ENV_ID", help="only events of this environment")
    create.add_argument("--description", default="", help="what the endpoint is for")
    _with_out(create)
    listing = hooks.add_parser("list", help="every endpoint the key sees")
    add_client_flags(listing)
    add_output_flag(listing)
    for name, text in (("get", "one endpoint"), ("delete", "delete an endpoint")):
        one = hooks.add_parser(name, help=text)
        add_client_flags(one)
        add_output_flag(one)
        one.add_argument("endpoint_id", metavar="ENDPOINT_ID")
    update = hooks.add_parser("update", help="change the URL, the event types, enable or disable")
    add_client_flags(update)
    add_output_flag(update)
    update.add_argument("endpoint_id", metavar="ENDPOINT_ID")
    update.add_argument("--endpoint-url", help="a new https:// URL for the deliveries")
    types = update.add_mutually_exclusive_group()
    types.add_argument("--event-type", action="append", metavar="TYPE", help="only this type (repeat)")
    types.add_argument("--all-events", action="store_true", help="every event type")
    state = update.add_mutually_exclusive_group()
    state.add_argument(
        "--enable", dest="enabled", action="store_const", const=True, help="send deliveries again"
    )
    state.add_argument(
        "--disable", dest="enabled", action="store_const", const=False, help="send nothing more"
    )
    rotate = hooks.add_parser("rotate-secret", help="a new signing secret, printed once")
    add_client_flags(rotate)
    rotate.add_argument("endpoint_id", metavar="ENDPOINT_ID")
    _with_out(rotate)


def _rows(endpoints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e
        | {
            "events": ",".join(e.get("event_types") or []) or "all",
            "environment": e.get("environment_id") or "all",
            "enabled": "yes" if e.get("enabled") else "no",
            "created": short_time(e.get("created_at")),
        }
        for e in endpoints
    ]


def _print_secret(args: argparse.Namespace, shown: dict[str, Any]) -> int:
    if args.out is not None:
        try:
            write_atomic(args.out, (shown.pop("secret") + "\n").encode(), 0o600)
        except OSError as exc:
            raise CliError(
                f"the secret of {shown['id']} could not be written to {args.out}: {exc.strerror or exc}",
                hint=f"rotate it (webhooks rotate-secret {shown['id']} --out FILE)",
            ) from None
        shown["secret_file"] = str(args.out)
    print(json.dumps(shown, indent=2))
    return 0


def _update_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.endpoint_url is not None:
        body["url"] = args.endpoint_url
    if args.event_type:
        body["event_types"] = args.event_type
    if args.all_events:
        body["event_types"] = []
    if args.enabled is not None:
        body["enabled"] = args.enabled
    if not body:
        raise UsageError(
            "nothing to change", hint="pass --endpoint-url, --event-type, --all-events, --enable or --disable"
        )
    return body


def _webhooks(args: argparse.Namespace) -> int:
    action = args.action
    if action in ("create", "rotate-secret") and args.out is not None and args.out.exists():
        raise UsageError(f"{args.out} exists already", hint="choose another --out FILE")
    if action == "create":
        body: dict[str, Any] = {"url": args.endpoint_url, "event_types": args.event_type or []}
        body |= {"environment_id": args.environment, "description": args.description}
        return _print_secret(args, call(args, "POST", _PATH, body))
    if action == "rotate-secret":
        return _print_secret(args, call(args, "POST", f"{_PATH}/{args.endpoint_id}/rotate_secret"))
    if action == "list":
        found = call(args, "GET", _PATH, params={"limit": 100})["data"]
        print_rows(args, _rows(found), _COLUMNS, document=found)
        return 0
    if action == "delete":
        gone = call(args, "DELETE", f"{_PATH}/{args.endpoint_id}")
        print(json.dumps(gone, indent=2))
        return 0
    if action == "update":
        one = call(args, "POST", f"{_PATH}/{args.endpoint_id}", _update_body(args))
    else:
        one = call(args, "GET", f"{_PATH}/{args.endpoint_id}")
    print_rows(args, _rows([one]), _COLUMNS, document=one)
    return 0


WEBHOOK_COMMANDS = {"webhooks": _webhooks}
