"""The SQLite schema, as an ordered list of migrations (private to the store).

``MIGRATIONS[n]`` takes the database from version ``n`` to ``n + 1``. ``migrate`` runs at open, in
one transaction, and records the versions it applied in ``schema_version``. Append new migrations;
never edit one that has shipped.

Times are integer microseconds since the Unix epoch (UTC); documents are JSON text.
"""

from __future__ import annotations

import sqlite3

from control_plane.errors import ControlPlaneError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the initial schema
    (
        """
        CREATE TABLE resources (
            kind        TEXT NOT NULL,
            id          TEXT NOT NULL,
            version     INTEGER NOT NULL,
            body        TEXT NOT NULL,
            created_at  INTEGER NOT NULL,
            updated_at  INTEGER NOT NULL,
            archived_at INTEGER,
            PRIMARY KEY (kind, id)
        )
        """,
        "CREATE INDEX resources_by_created ON resources (kind, created_at, id)",
        """
        CREATE TABLE resource_versions (
            kind        TEXT NOT NULL,
            id          TEXT NOT NULL,
            version     INTEGER NOT NULL,
            body        TEXT NOT NULL,
            created_at  INTEGER NOT NULL,
            updated_at  INTEGER NOT NULL,
            archived_at INTEGER,
            PRIMARY KEY (kind, id, version),
            FOREIGN KEY (kind, id) REFERENCES resources (kind, id) ON DELETE CASCADE
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE events (
            session_id   TEXT NOT NULL,
            seq          INTEGER NOT NULL,
            id           TEXT NOT NULL,
            type         TEXT NOT NULL,
            payload      TEXT NOT NULL,
            processed_at INTEGER NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID
        """,
        # Named (not a UNIQUE table constraint) so that queries can insist on it with INDEXED BY.
        "CREATE UNIQUE INDEX events_by_id ON events (session_id, id)",
        """
        CREATE TABLE leases (
            session_id TEXT PRIMARY KEY,
            holder     TEXT,              -- NULL once released; the epoch keeps counting
            epoch      INTEGER NOT NULL,
            expires_at INTEGER NOT NULL
        )
        """,
        "CREATE INDEX leases_by_expiry ON leases (expires_at) WHERE holder IS NOT NULL",
        """
        CREATE TABLE enrollment_tokens (
            id              TEXT PRIMARY KEY,
            environment_id  TEXT NOT NULL,
            token_hash      TEXT NOT NULL UNIQUE,
            created_at      INTEGER NOT NULL,
            expires_at      INTEGER NOT NULL,
            used_at         INTEGER,
            used_by_edge_id TEXT
        )
        """,
        """
        CREATE TABLE edges (
            id               TEXT PRIMARY KEY,
            environment_id   TEXT NOT NULL,
            name             TEXT NOT NULL,
            cert_serial      TEXT NOT NULL,
            cert_fingerprint TEXT NOT NULL,
            created_at       INTEGER NOT NULL,
            cert_not_after   INTEGER NOT NULL,
            revoked_at       INTEGER
        )
        """,
        "CREATE INDEX edges_by_environment ON edges (environment_id, created_at, id)",
        """
        CREATE TABLE api_keys (
            id         TEXT PRIMARY KEY,
            name       TEXT NOT NULL,
            key_hash   TEXT NOT NULL UNIQUE,
            created_at INTEGER NOT NULL,
            revoked_at INTEGER
        )
        """,
    ),
    # 2: which edge holds each session's sandbox (the gateway's stickiness, across restarts and
    # control-plane processes)
    (
        """
        CREATE TABLE sandbox_placements (
            session_id TEXT PRIMARY KEY,
            edge_id    TEXT NOT NULL
        ) WITHOUT ROWID
        """,
    ),
    # 3: certificate renewal: the certificate an edge renewed from stays accepted for a while
    (
        "ALTER TABLE edges ADD COLUMN previous_cert_fingerprint TEXT",
        "ALTER TABLE edges ADD COLUMN previous_cert_not_after INTEGER",
    ),
    # 4: which control-plane process holds each edge's tunnel (a record with an expiry, refreshed),
    # and wake requests for sessions another process must run
    (
        """
        CREATE TABLE edge_presence (
            edge_id    TEXT PRIMARY KEY,
            holder     TEXT NOT NULL,
            expires_at INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        # sessions with work that the process which noticed it may not run (placement): any
        # process's sweep picks them up
        """
        CREATE TABLE session_wakes (
            session_id   TEXT PRIMARY KEY,
            requested_at INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX session_wakes_by_time ON session_wakes (requested_at, session_id)",
    ),
    # 5: nonces of accepted proof-of-possession tokens, shared by every control-plane process
    (
        """
        CREATE TABLE pop_nonces (
            key        TEXT PRIMARY KEY,
            expires_at INTEGER NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX pop_nonces_by_expiry ON pop_nonces (expires_at)",
    ),
    # 6: the fleet seen and steered: enrollment tokens withdrawn by the operator, listed per
    # environment; when each edge's tunnel was last recorded as up
    (
        "ALTER TABLE enrollment_tokens ADD COLUMN revoked_at INTEGER",
        "CREATE INDEX enrollment_tokens_by_environment ON enrollment_tokens (environment_id, created_at, id)",
        "ALTER TABLE edges ADD COLUMN last_seen_at INTEGER",
    ),
    # 7: API keys as a resource: scope (the keys made before were the admin key), environments
    # (a JSON array; NULL: all), expiry, last use
    (
        "ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin'",
        "ALTER TABLE api_keys ADD COLUMN environment_ids TEXT",
        "ALTER TABLE api_keys ADD COLUMN expires_at INTEGER",
        "ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER",
    ),
    # 8: the feed of appends that every process follows (SSE streams on any replica): one row per
    # append, in commit order (one writer), pruned after a minute
    (
        """
        CREATE TABLE log_feed (
            pos        INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            last_seq   INTEGER NOT NULL,
            at         INTEGER NOT NULL
        )
        """,
    ),
    # 9: bounded state: the harness's sweep finds resumable sessions through an index on their
    # status (not a scan of every session), and retention finds archived resources by age
    (
        "ALTER TABLE resources ADD COLUMN status TEXT GENERATED ALWAYS AS"
        " (CASE json_type(body, '$.status') WHEN 'text' THEN json_extract(body, '$.status') END)"
        " VIRTUAL",
        "CREATE INDEX resources_by_status ON resources (kind, status, created_at, id)"
        " WHERE archived_at IS NULL",
        "CREATE INDEX resources_by_archive ON resources (kind, archived_at, id)"
        " WHERE archived_at IS NOT NULL",
    ),
    # 10: the memories of memory stores (resources of kind memory_store), unique by path in their
    # store, and every write of them as a version numbered per store (seq, in commit order)
    (
        """
        CREATE TABLE memories (
            store_id       TEXT NOT NULL,
            id             TEXT NOT NULL,
            path           TEXT NOT NULL,
            content        TEXT NOT NULL,
            content_sha256 TEXT NOT NULL,
            content_size   INTEGER NOT NULL,
            version_id     TEXT NOT NULL,
            created_at     INTEGER NOT NULL,
            updated_at     INTEGER NOT NULL,
            PRIMARY KEY (store_id, id)
        ) WITHOUT ROWID
        """,
        "CREATE UNIQUE INDEX memories_by_path ON memories (store_id, path)",
        """
        CREATE TABLE memory_versions (
            store_id       TEXT NOT NULL,
            seq            INTEGER NOT NULL,
            id             TEXT NOT NULL,
            memory_id      TEXT NOT NULL,
            operation      TEXT NOT NULL,
            path           TEXT,
            content        TEXT,
            content_sha256 TEXT,
            content_size   INTEGER,
            actor_type     TEXT,
            actor_id       TEXT,
            created_at     INTEGER NOT NULL,
            redacted_at    INTEGER,
            redactor_type  TEXT,
            redactor_id    TEXT,
            PRIMARY KEY (store_id, seq)
        ) WITHOUT ROWID
        """,
        "CREATE UNIQUE INDEX memory_versions_by_id ON memory_versions (store_id, id)",
        "CREATE INDEX memory_versions_by_memory ON memory_versions (store_id, memory_id, seq)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database up to ``SCHEMA_VERSION`` (the connection is in autocommit mode)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
        current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
        if current > SCHEMA_VERSION:
            raise ControlPlaneError(
                f"the database is at schema version {current}, newer than this build ({SCHEMA_VERSION})"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
