"""The PostgreSQL schema, as an ordered list of migrations (private to the store).

``MIGRATIONS[n]`` takes the database from version ``n`` to ``n + 1``. ``migrate`` runs them on a
dedicated connection (never a pooled one: the lock is held by the session) under
``pg_advisory_lock``, so replicas that start together wait for the first one and then find the
schema current; each version is applied in its own transaction and recorded in ``schema_version``.
Append new migrations; never edit one that has shipped. While old and new replicas share a
database during a rolling upgrade, migrations must only add (tables, nullable columns, indexes).

The representation is the one every backend shares (``_codec``): times are ``bigint``
microseconds since the Unix epoch (UTC), documents are JSON ``text`` exactly as written (list
filters cast them to ``jsonb``). The append is one server-side function, ``outpost_append``: one
round trip per batch, with the fencing check, the per-session head row lock (appends to one
session are serialized, so ``seq`` follows commit order without gaps) and the ``NOTIFY`` of the
feed in the same transaction.
"""

from __future__ import annotations

import contextlib

import asyncpg

from control_plane.errors import ControlPlaneError

__all__ = ["FENCED", "MIGRATIONS", "SCHEMA_VERSION", "SEQUENCE_CONFLICT", "migrate_connection"]

#: SQLSTATEs raised by ``outpost_append`` (class "OP": ours); the DETAIL carries the current value.
FENCED = "OP001"
SEQUENCE_CONFLICT = "OP002"

_APPEND = """
CREATE FUNCTION outpost_append(
    p_session text, p_epoch bigint, p_expected bigint,
    p_ids text[], p_types text[], p_payloads text[], p_now bigint, p_channel text
) RETURNS TABLE (id text, seq bigint, type text, payload text, processed_at bigint, fresh boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text;
    v_epoch  bigint;
    v_last   bigint;
    v_found  integer;
    v_fresh  integer;
BEGIN
    IF p_epoch IS NOT NULL THEN
        -- FOR SHARE: a takeover (acquire_lease updates the row) waits until this append is done
        SELECT l.holder, l.epoch INTO v_holder, v_epoch FROM leases l
            WHERE l.session_id = p_session FOR SHARE;
        IF NOT FOUND OR v_holder IS NULL THEN
            v_epoch := NULL;
        END IF;
        IF v_epoch IS DISTINCT FROM p_epoch THEN
            RAISE EXCEPTION 'fenced' USING ERRCODE = 'OP001', DETAIL = coalesce(v_epoch::text, '');
        END IF;
    END IF;
    -- The head row lock serializes appends to one session (and makes what they read current).
    SELECT h.last_seq INTO v_last FROM log_heads h WHERE h.session_id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO log_heads (session_id, last_seq) VALUES (p_session, 0) ON CONFLICT DO NOTHING;
        SELECT h.last_seq INTO v_last FROM log_heads h WHERE h.session_id = p_session FOR UPDATE;
    END IF;
    SELECT count(*) INTO v_found FROM events e WHERE e.session_id = p_session AND e.id = ANY (p_ids);
    v_fresh := cardinality(p_ids) - v_found;
    IF v_fresh > 0 THEN
        IF p_expected IS NOT NULL AND p_expected <> v_last THEN
            RAISE EXCEPTION 'sequence conflict' USING ERRCODE = 'OP002', DETAIL = v_last::text;
        END IF;
        INSERT INTO events (session_id, seq, id, type, payload, processed_at)
            SELECT p_session, v_last + row_number() OVER (ORDER BY n.ord), n.id, n.type, n.payload, p_now
            FROM unnest(p_ids, p_types, p_payloads) WITH ORDINALITY AS n (id, type, payload, ord)
            WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = p_session AND e.id = n.id);
        UPDATE log_heads SET last_seq = v_last + v_fresh WHERE log_heads.session_id = p_session;
        PERFORM pg_notify(p_channel, p_session || ':' || (v_last + v_fresh)::text);
    END IF;
    -- New rows come back without their payload (the caller has it); stored ones with it.
    RETURN QUERY
        SELECT e.id, e.seq, e.type, CASE WHEN e.seq > v_last THEN NULL ELSE e.payload END,
               e.processed_at, e.seq > v_last
        FROM events e WHERE e.session_id = p_session AND e.id = ANY (p_ids);
END
$$
"""

# A document as jsonb, for filters. jsonb cannot hold U+0000, which JSON text may (escaped): the
# filters see it as U+FFFD instead of failing (the stored text is never changed).
_DOC = """
CREATE FUNCTION outpost_doc(body text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT replace(body, '\\u0000', '\\ufffd')::jsonb $$
"""
# The body's status when it is a JSON string (the harness's sweep filters on it), else NULL.
_STATUS = """
CREATE FUNCTION outpost_status(body text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(d -> 'status') = 'string' THEN d ->> 'status' END
    FROM (SELECT outpost_doc(body) AS d) AS doc
$$
"""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the schema of SQLite's version 9, in one step
    (
        _DOC,
        _STATUS,
        """
        CREATE TABLE resources (
            kind        text NOT NULL,
            id          text NOT NULL,
            version     bigint NOT NULL,
            body        text NOT NULL,
            created_at  bigint NOT NULL,
            updated_at  bigint NOT NULL,
            archived_at bigint,
            status      text GENERATED ALWAYS AS (outpost_status(body)) STORED,
            PRIMARY KEY (kind, id)
        )
        """,
        "CREATE INDEX resources_by_created ON resources (kind, created_at, id)",
        "CREATE INDEX resources_by_status ON resources (kind, status, created_at, id)"
        " WHERE archived_at IS NULL",
        "CREATE INDEX resources_by_archive ON resources (kind, archived_at, id)"
        " WHERE archived_at IS NOT NULL",
        """
        CREATE TABLE resource_versions (
            kind        text NOT NULL,
            id          text NOT NULL,
            version     bigint NOT NULL,
            body        text NOT NULL,
            created_at  bigint NOT NULL,
            updated_at  bigint NOT NULL,
            archived_at bigint,
            PRIMARY KEY (kind, id, version),
            FOREIGN KEY (kind, id) REFERENCES resources (kind, id) ON DELETE CASCADE
        )
        """,
        """
        CREATE TABLE events (
            session_id   text NOT NULL,
            seq          bigint NOT NULL,
            id           text NOT NULL,
            type         text NOT NULL,
            payload      text NOT NULL,
            processed_at bigint NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """,
        "CREATE UNIQUE INDEX events_by_id ON events (session_id, id)",
        # one row per log: its last seq, and the lock that serializes appends to it
        """
        CREATE TABLE log_heads (
            session_id text PRIMARY KEY,
            last_seq   bigint NOT NULL
        )
        """,
        """
        CREATE TABLE leases (
            session_id text PRIMARY KEY,
            holder     text,
            epoch      bigint NOT NULL,
            expires_at bigint NOT NULL
        )
        """,
        "CREATE INDEX leases_by_expiry ON leases (expires_at) WHERE holder IS NOT NULL",
        """
        CREATE TABLE enrollment_tokens (
            id              text PRIMARY KEY,
            environment_id  text NOT NULL,
            token_hash      text NOT NULL UNIQUE,
            created_at      bigint NOT NULL,
            expires_at      bigint NOT NULL,
            used_at         bigint,
            used_by_edge_id text,
            revoked_at      bigint
        )
        """,
        "CREATE INDEX enrollment_tokens_by_environment ON enrollment_tokens (environment_id, created_at, id)",
        """
        CREATE TABLE edges (
            id                        text PRIMARY KEY,
            environment_id            text NOT NULL,
            name                      text NOT NULL,
            cert_serial               text NOT NULL,
            cert_fingerprint          text NOT NULL,
            created_at                bigint NOT NULL,
            cert_not_after            bigint NOT NULL,
            revoked_at                bigint,
            previous_cert_fingerprint text,
            previous_cert_not_after   bigint,
            last_seen_at              bigint
        )
        """,
        "CREATE INDEX edges_by_environment ON edges (environment_id, created_at, id)",
        """
        CREATE TABLE api_keys (
            id              text PRIMARY KEY,
            name            text NOT NULL,
            key_hash        text NOT NULL UNIQUE,
            created_at      bigint NOT NULL,
            revoked_at      bigint,
            scope           text NOT NULL DEFAULT 'admin',
            environment_ids text,
            expires_at      bigint,
            last_used_at    bigint
        )
        """,
        "CREATE TABLE sandbox_placements (session_id text PRIMARY KEY, edge_id text NOT NULL)",
        "CREATE TABLE edge_presence (edge_id text PRIMARY KEY, holder text NOT NULL,"
        " expires_at bigint NOT NULL)",
        "CREATE TABLE session_wakes (session_id text PRIMARY KEY, requested_at bigint NOT NULL)",
        "CREATE INDEX session_wakes_by_time ON session_wakes (requested_at, session_id)",
        "CREATE TABLE pop_nonces (key text PRIMARY KEY, expires_at bigint NOT NULL)",
        "CREATE INDEX pop_nonces_by_expiry ON pop_nonces (expires_at)",
        _APPEND,
    ),
    # 2: the memories of memory stores (SQLite's version 10): unique by path in their store (paths
    # compared byte for byte), and every write of them as a version numbered per store
    (
        """
        CREATE TABLE memories (
            store_id       text NOT NULL,
            id             text NOT NULL,
            path           text COLLATE "C" NOT NULL,
            content        text NOT NULL,
            content_sha256 text NOT NULL,
            content_size   bigint NOT NULL,
            version_id     text NOT NULL,
            created_at     bigint NOT NULL,
            updated_at     bigint NOT NULL,
            PRIMARY KEY (store_id, id)
        )
        """,
        "CREATE UNIQUE INDEX memories_by_path ON memories (store_id, path)",
        """
        CREATE TABLE memory_versions (
            store_id       text NOT NULL,
            seq            bigint NOT NULL,
            id             text NOT NULL,
            memory_id      text NOT NULL,
            operation      text NOT NULL,
            path           text,
            content        text,
            content_sha256 text,
            content_size   bigint,
            actor_type     text,
            actor_id       text,
            created_at     bigint NOT NULL,
            redacted_at    bigint,
            redactor_type  text,
            redactor_id    text,
            PRIMARY KEY (store_id, seq)
        )
        """,
        "CREATE UNIQUE INDEX memory_versions_by_id ON memory_versions (store_id, id)",
        "CREATE INDEX memory_versions_by_memory ON memory_versions (store_id, memory_id, seq)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)

# pg_advisory_lock's key: the same for every replica on one schema (and only that schema).
_LOCK_KEY = "SELECT hashtextextended('outpost-migrate:' || $1, 0)"


async def migrate_connection(conn: asyncpg.Connection, schema: str) -> int:
    """Bring ``schema`` up to ``SCHEMA_VERSION`` on ``conn`` (a dedicated connection, not in a
    transaction); returns the version it started from. Creates the schema if it is missing."""
    key = await conn.fetchval(_LOCK_KEY, schema)
    await conn.execute("SELECT pg_advisory_lock($1)", key)
    try:
        ident = _quote_ident(schema)
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {ident}")
        await conn.execute(f"SET search_path TO {ident}")
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY)")
        current: int = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_version")
        if current > SCHEMA_VERSION:
            raise ControlPlaneError(
                f"the database is at schema version {current}, newer than this build ({SCHEMA_VERSION})"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            async with conn.transaction():
                for statement in MIGRATIONS[version - 1]:
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
        return current
    finally:
        if not conn.is_closed():  # a lost connection released the lock with it
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await conn.execute("SELECT pg_advisory_unlock($1)", key)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
