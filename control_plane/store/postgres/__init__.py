"""The PostgreSQL store: several control-plane replicas on one database.

``PostgresStore(PostgresConfig(url=...))`` opens lazily (the first call connects and migrates);
``migrate(config)`` brings a database to this build's schema without opening a store
(``outpost-control migrate``); ``copy_sqlite`` moves a SQLite store into an empty one
(``outpost-control store copy``). See ``docs/scale-out.md``.
"""

from __future__ import annotations

from control_plane.store.postgres._config import PostgresConfig, SslMode, mask_url
from control_plane.store.postgres._copy import copy_sqlite
from control_plane.store.postgres._schema import SCHEMA_VERSION
from control_plane.store.postgres._store import PostgresStore, migrate

__all__ = [
    "SCHEMA_VERSION",
    "PostgresConfig",
    "PostgresStore",
    "SslMode",
    "copy_sqlite",
    "mask_url",
    "migrate",
]
