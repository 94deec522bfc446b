"""``outpost-control migrate`` and ``outpost-control store copy``: work on the store itself.

    migrate [--config FILE] [--data-dir DIR]
    store copy --from sqlite:///PATH --to postgresql://USER@HOST/DB [--config FILE]

``migrate`` brings the configured store to this build's schema and exits (every replica also does
it when it starts, under an advisory lock; running it first, once, keeps a deploy's replicas from
waiting on each other). ``store copy`` moves a SQLite store into an empty PostgreSQL one, in one
transaction (docs/scale-out.md); the PostgreSQL side takes its password file, TLS and schema from
the configuration. URLs are printed with any password masked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from outpost_wire.cli_support import (
    CliError,
    UnreachableError,
    UsageError,
    env_help,
    load_yaml_mapping,
    validation_message,
)

if TYPE_CHECKING:
    from control_plane.config import ControlPlaneConfig

__all__ = ["STORE_COMMANDS", "add_store_parsers", "load_config"]

_SQLITE = "sqlite:///"


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="the control plane's config file (store_* keys)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("OUTPOST_DATA_DIR"),
        help=env_help("the control plane's data directory (its default store)", "OUTPOST_DATA_DIR"),
    )


def add_store_parsers(sub: Any) -> None:
    mp = sub.add_parser("migrate", help="bring the store to this build's schema, then exit")
    _add_config_flags(mp)
    store = sub.add_parser("store", help="work on the store: copy").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    cp = store.add_parser("copy", help="copy a SQLite store into an empty PostgreSQL store")
    cp.add_argument(
        "--from", dest="source", required=True, metavar="URL", help="sqlite:///path/to/outpost.db"
    )
    cp.add_argument(
        "--to", dest="target", required=True, metavar="URL", help="postgresql://user@host:port/database"
    )
    _add_config_flags(cp)


def load_config(args: argparse.Namespace) -> ControlPlaneConfig:
    """The configuration of ``--config`` with ``--data-dir`` over it."""
    from control_plane.config import ControlPlaneConfig

    data: dict[str, Any] = {}
    if args.config is not None:
        data.update(load_yaml_mapping(args.config))
    if args.data_dir:
        data["data_dir"] = str(args.data_dir)
    try:
        return ControlPlaneConfig.model_validate(data)
    except ValidationError as exc:
        source = str(args.config) if args.config else "the command-line flags"
        raise UsageError(validation_message(exc, source), hint="see docs/configuration.md") from None


async def _migrate(config: ControlPlaneConfig) -> dict[str, Any]:
    from control_plane.store import SqliteStore, mask_url, postgres_config
    from control_plane.store._sqlite_schema import SCHEMA_VERSION as SQLITE_VERSION

    url = config.effective_store_url
    if url.startswith(_SQLITE):
        await SqliteStore(url[len(_SQLITE) :]).close()  # opening migrates
        return {"store": url, "schema_version": SQLITE_VERSION}
    from control_plane.store.postgres import SCHEMA_VERSION, migrate

    pg = postgres_config(url, config.store_options)
    before = await migrate(pg)
    return {
        "store": mask_url(url),
        "schema": pg.schema,
        "from_version": before,
        "schema_version": SCHEMA_VERSION,
    }


def _migrate_command(args: argparse.Namespace) -> int:
    from control_plane.errors import ControlPlaneError

    config = load_config(args)
    if config.effective_store_url == "memory://":
        raise UsageError("memory:// has no schema to migrate")
    try:
        result = asyncio.run(_migrate(config))
    except ControlPlaneError as exc:
        raise UnreachableError(str(exc)) from None
    print(json.dumps(result, indent=2))
    return 0


def _copy_command(args: argparse.Namespace) -> int:
    from control_plane.errors import ControlPlaneError
    from control_plane.store import mask_url, postgres_config
    from control_plane.store.postgres import copy_sqlite

    if not args.source.startswith(_SQLITE) or len(args.source) == len(_SQLITE):
        raise UsageError(f"--from {mask_url(args.source)}: expected sqlite:///path/to/outpost.db")
    if args.target.partition("://")[0] not in ("postgres", "postgresql"):
        raise UsageError(f"--to {mask_url(args.target)}: expected postgresql://user@host:port/database")
    path = Path(args.source[len(_SQLITE) :])
    if not path.is_file():
        raise UsageError(f"--from: no SQLite store at {path}")
    config = load_config(args)
    try:
        target = postgres_config(args.target, config.store_options)
        counts = asyncio.run(copy_sqlite(path, target))
    except ControlPlaneError as exc:
        raise CliError(str(exc)) from None
    print(json.dumps({"from": args.source, "to": mask_url(args.target), "copied": counts}, indent=2))
    return 0


def _store(args: argparse.Namespace) -> int:
    if args.action == "copy":
        return _copy_command(args)
    raise AssertionError(args.action)  # pragma: no cover - argparse allows only the above


STORE_COMMANDS = {"migrate": _migrate_command, "store": _store}
