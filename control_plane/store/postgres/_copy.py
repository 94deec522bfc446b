"""``outpost-control store copy``: a SQLite store into an empty PostgreSQL store, in one transaction.

Both backends keep the same representation (microsecond integers, JSON text), so the copy is
table by table, row for row, with ``COPY`` on the PostgreSQL side, streamed in chunks (a large
event log never sits in memory whole).

Copied: resources with their version history, event logs (with their heads), enrollment tokens,
edges, API keys, sandbox placements, wake requests and unexpired proof-of-possession nonces. Not
copied, being runtime state of the processes that ran on the old store (stop them first): leases
(a session's next run starts at epoch 1; no writer of the old store is left to fence), edge
presence (edges reconnect) and the SQLite feed of appends.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import asyncpg

from control_plane.errors import Conflict
from control_plane.store.postgres._config import PostgresConfig
from control_plane.store.postgres._store import UNREACHABLE, migrate, unreachable
from control_plane.store.sqlite import SqliteStore

__all__ = ["TABLES", "copy_sqlite"]

#: What is copied: table -> columns (the same names on both sides).
TABLES: dict[str, tuple[str, ...]] = {
    "resources": ("kind", "id", "version", "body", "created_at", "updated_at", "archived_at"),
    "resource_versions": ("kind", "id", "version", "body", "created_at", "updated_at", "archived_at"),
    "events": ("session_id", "seq", "id", "type", "payload", "processed_at"),
    "enrollment_tokens": (
        "id", "environment_id", "token_hash", "created_at", "expires_at", "used_at", "used_by_edge_id",
        "revoked_at",
    ),
    "edges": (
        "id", "environment_id", "name", "cert_serial", "cert_fingerprint", "created_at", "cert_not_after",
        "revoked_at", "previous_cert_fingerprint", "previous_cert_not_after", "last_seen_at",
    ),
    "api_keys": (
        "id", "name", "key_hash", "created_at", "revoked_at", "scope", "environment_ids", "expires_at",
        "last_used_at",
    ),
    "sandbox_placements": ("session_id", "edge_id"),
    "session_wakes": ("session_id", "requested_at"),
    "pop_nonces": ("key", "expires_at"),
}  # fmt: skip

_CHUNK_ROWS = 5_000
_MUST_BE_EMPTY = ("resources", "events", "enrollment_tokens", "edges", "api_keys")


async def copy_sqlite(path: Path, target: PostgresConfig) -> dict[str, int]:
    """Copy the SQLite store at ``path`` into ``target`` (migrated first; it must hold nothing yet).
    The SQLite file is migrated to this build's schema first, as opening it would. Returns the rows
    copied per table. Raises ``Conflict`` if the target is not empty, ``ControlPlaneError`` if it
    cannot be reached; on any error nothing is written."""
    await SqliteStore(path).close()  # opening migrates: the columns below are this build's
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        await migrate(target)
        try:
            conn = await asyncpg.connect(**target.connect_kwargs())
        except UNREACHABLE as exc:
            raise unreachable(target, exc) from None
        try:
            async with conn.transaction():
                return await _copy(source, conn, target.schema)
        except UNREACHABLE as exc:
            raise unreachable(target, exc) from None
        finally:
            await conn.close()
    finally:
        source.close()


async def _copy(source: sqlite3.Connection, conn: asyncpg.Connection, schema: str) -> dict[str, int]:
    for table in _MUST_BE_EMPTY:
        if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table})"):  # noqa: S608 (fixed names)
            raise Conflict(f"the target store is not empty (its {table} has rows): copy into a new one")
    counts: dict[str, int] = {}
    now_us = time.time_ns() // 1000
    for table, columns in TABLES.items():
        sql = f"SELECT {', '.join(columns)} FROM {table}"  # noqa: S608 (fixed names)
        if table == "pop_nonces":
            sql += f" WHERE expires_at > {now_us}"
        cursor = source.execute(sql)
        counts[table] = 0
        while rows := await asyncio.to_thread(cursor.fetchmany, _CHUNK_ROWS):
            await conn.copy_records_to_table(table, records=rows, columns=columns, schema_name=schema)
            counts[table] += len(rows)
    await conn.execute(
        "INSERT INTO log_heads (session_id, last_seq)"
        " SELECT session_id, max(seq) FROM events GROUP BY session_id"
    )
    return counts
