"""``outpost-control api-keys``: API keys as a resource (needs an admin key; see docs/security.md).

    api-keys create --name NAME [--scope read_only|read_write|admin] [--environment ENV_ID ...]
                    [--ttl-s S | --expires-at RFC3339] [--out FILE]
    api-keys list | api-keys revoke KEY_ID
    api-keys rotate-admin [--data-dir DIR] [--config FILE]

``create`` prints the new key once (with ``--out FILE``: written there 0600, and left out of the
output). ``rotate-admin`` works on the store itself, not through the API, so it also recovers a
lost admin key file: a new admin key into ``DATA_DIR/admin-api-key`` (0600, atomically), then the
previous admin key revoked (see :mod:`control_plane.admin_key`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from control_plane.cli_client import add_client_flags, call
from control_plane.cli_fleet import short_time
from outpost_wire.cli_support import (
    CliError,
    UsageError,
    add_output_flag,
    env_help,
    print_rows,
)
from outpost_wire.files import write_atomic

if TYPE_CHECKING:
    from control_plane.config import ControlPlaneConfig

__all__ = ["API_KEY_COMMANDS", "add_api_key_parsers"]

_COLUMNS = [
    ("id", "ID"),
    ("name", "NAME"),
    ("scope", "SCOPE"),
    ("environments", "ENVIRONMENTS"),
    ("status", "STATUS"),
    ("created", "CREATED"),
    ("expires", "EXPIRES"),
    ("last_used", "LAST USED"),
]


def add_api_key_parsers(sub: Any) -> None:
    keys = sub.add_parser(
        "api-keys", help="API keys: create, list, revoke, rotate the admin key"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    kc = keys.add_parser("create", help="a new API key, printed once")
    add_client_flags(kc)
    kc.add_argument("--name", required=True, help="what the key is for (shown in listings)")
    kc.add_argument(
        "--scope",
        choices=("read_only", "read_write", "admin"),
        default="read_only",
        help="read_only (GET only; default), read_write, or admin (also manages keys)",
    )
    kc.add_argument(
        "--environment",
        action="append",
        metavar="ENV_ID",
        help="limit the key to this environment (repeat for more; default: every environment)",
    )
    expiry = kc.add_mutually_exclusive_group()
    expiry.add_argument("--ttl-s", type=int, help="seconds until it expires (default: until revoked)")
    expiry.add_argument("--expires-at", metavar="RFC3339", help="when it expires, e.g. 2027-01-01T00:00:00Z")
    kc.add_argument(
        "--out", type=Path, metavar="FILE", help="write the key to FILE (0600) instead of printing it"
    )
    kl = keys.add_parser("list", help="every key: scope, environments, status, expiry, last use")
    add_client_flags(kl)
    add_output_flag(kl)
    kr = keys.add_parser("revoke", help="refuse the key from the next request on")
    add_client_flags(kr)
    add_output_flag(kr)
    kr.add_argument("key_id", metavar="KEY_ID", help="the key's id (apikey_...), as api-keys list shows")
    ra = keys.add_parser(
        "rotate-admin",
        help="write a new admin key into DATA_DIR/admin-api-key and revoke the old one (works on the store)",
    )
    ra.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("OUTPOST_DATA_DIR"),
        help=env_help(
            "the control plane's data directory (default /var/lib/outpost-control)", "OUTPOST_DATA_DIR"
        ),
    )
    ra.add_argument("--config", type=Path, help="the control plane's config file (for its store_url)")


def _rows(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        k
        | {
            "environments": "all" if k.get("environment_ids") is None else ",".join(k["environment_ids"]),
            "created": short_time(k.get("created_at")),
            "expires": short_time(k.get("expires_at")) or "never",
            "last_used": short_time(k.get("last_used_at")),
        }
        for k in keys
    ]


def _create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "scope": args.scope}
    if args.environment:
        body["environment_ids"] = args.environment
    if args.ttl_s is not None:
        body["ttl_s"] = args.ttl_s
    if args.expires_at is not None:
        body["expires_at"] = args.expires_at
    if args.out is not None and args.out.exists():
        raise UsageError(f"{args.out} exists already", hint="choose another --out FILE")
    created = call(args, "POST", "/v1/api_keys", body)
    if args.out is not None:
        try:
            write_atomic(args.out, (created.pop("key") + "\n").encode(), 0o600)
        except OSError as exc:
            raise CliError(
                f"the key {created['id']} was made but could not be written to {args.out}: "
                f"{exc.strerror or exc}",
                hint=f"revoke it (api-keys revoke {created['id']}) and try again",
            ) from None
        created["key_file"] = str(args.out)
    print(json.dumps(created, indent=2))
    return 0


async def _rotate(config: ControlPlaneConfig) -> dict[str, Any]:
    from control_plane.admin_key import rotate_admin_key
    from control_plane.errors import ControlPlaneError
    from control_plane.store import mask_url, open_store

    store_url = config.effective_store_url
    try:
        store = open_store(store_url, options=config.store_options)
        try:
            rotation = await rotate_admin_key(store, config.data_dir, datetime.now(UTC))
        finally:
            await store.close()
    except ControlPlaneError as exc:
        raise CliError(f"cannot use the store {mask_url(store_url)}: {exc}") from None
    return {
        "id": rotation.new.id,
        "key_file": str(rotation.path),
        "revoked": [k.id for k in rotation.revoked],
    }


def _rotate_admin(args: argparse.Namespace) -> int:
    from control_plane.cli_store import load_config

    config = load_config(args)
    data_dir = config.data_dir
    if not data_dir.is_dir():
        raise UsageError(
            f"the data directory {data_dir} does not exist", hint="pass --data-dir DIR ($OUTPOST_DATA_DIR)"
        )
    try:
        result = asyncio.run(_rotate(config))
    except PermissionError as exc:
        raise CliError(
            f"permission denied: {exc.filename or exc}", hint="run as the control plane's service user"
        ) from None
    print(json.dumps(result, indent=2))
    return 0


def _api_keys(args: argparse.Namespace) -> int:
    if args.action == "create":
        return _create(args)
    if args.action == "rotate-admin":
        return _rotate_admin(args)
    if args.action == "list":
        keys = call(args, "GET", "/v1/api_keys")["data"]
        print_rows(args, _rows(keys), _COLUMNS, document=keys)
        return 0
    key = call(args, "POST", f"/v1/api_keys/{args.key_id}/revoke")
    print_rows(args, _rows([key]), _COLUMNS, document=key)
    return 0


API_KEY_COMMANDS = {"api-keys": _api_keys}
