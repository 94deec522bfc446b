"""The one seam between asyncio and the synchronous ``sqlite3`` driver (private to the store).

::

    event loop                          writer thread (one connection)
    ──────────                          ──────────────────────────────
    await engine.write(fn) ──queue──►   take every queued job (up to max_group_commit_jobs)
                                        BEGIN IMMEDIATE
                                          SAVEPOINT job; fn(conn); RELEASE    (or ROLLBACK TO: that
                                          SAVEPOINT job; fn(conn); RELEASE     caller alone fails)
                                          ...
                                        COMMIT                  (one fsync for the whole group)
    result / typed error  ◄──call_soon_threadsafe──┘

    await engine.read(fn)  ──►  reader pool: a few threads, each with its own read-only
                                connection; fn runs inside one read transaction (a WAL snapshot)

Group commit: jobs that queue up while a commit is in progress are committed together by the next
transaction, so many concurrent writers share one fsync. Each job runs in its own SAVEPOINT, so a
job that raises (a ``SequenceConflict``, a ``Fenced``, a payload that cannot be serialized half-way
through its inserts) is rolled back alone and gets its own error; the other jobs of the group
commit. Outcomes are handed back only after COMMIT returns (a success is durable by then), with
one wake-up per event loop for the whole group.

The WAL stays bounded: ``journal_size_limit`` cuts the file back whenever a checkpoint resets it,
and once the writer has had nothing to do for ``wal_truncate_idle_s`` after writes it runs a
``wal_checkpoint(TRUNCATE)`` that does not wait (skipped while a reader still uses the WAL, tried
again after the next idle period).

``sqlite3`` exceptions are mapped here to ``control_plane.errors``: ``IntegrityError`` becomes
``Conflict``, anything else a ``ControlPlaneError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from control_plane.errors import Conflict, ControlPlaneError

__all__ = ["SqliteConfig", "SqliteEngine"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SqliteConfig:
    """How the SQLite store opens and runs its database file."""

    busy_timeout_s: float = 5.0  # wait this long for a lock held by another process
    reader_threads: int = 4  # size of the read pool (one connection per thread)
    max_group_commit_jobs: int = 512  # at most this many write jobs share one transaction
    cache_size_kib: int = 16_384  # page cache per connection
    #: The WAL file is cut back to this size whenever a checkpoint resets it (``journal_size_limit``).
    journal_size_limit_bytes: int = 64 * 1024 * 1024
    #: After writes, once the writer has had nothing to do for this long, checkpoint and truncate
    #: the WAL to zero bytes (skipped, and tried again later, while readers still use it).
    wal_truncate_idle_s: float = 1.0


def map_error(exc: sqlite3.Error) -> ControlPlaneError:
    """The one place a ``sqlite3`` exception becomes a control-plane error."""
    if isinstance(exc, sqlite3.IntegrityError):
        mapped: ControlPlaneError = Conflict(f"constraint violated: {exc}")
    else:
        mapped = ControlPlaneError(f"database error: {exc}")
    mapped.__cause__ = exc
    return mapped


def _as_error(exc: Exception) -> Exception:
    return map_error(exc) if isinstance(exc, sqlite3.Error) else exc


class _Job(Generic[T]):
    __slots__ = ("fn", "fut", "loop")

    def __init__(self, fn: Callable[[sqlite3.Connection], T], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.fut: asyncio.Future[T] = loop.create_future()


# A job's outcome: (job, result, error); error is None on success.
_Outcome = tuple[_Job[Any], Any, BaseException | None]


def _settle(outcomes: list[_Outcome]) -> None:
    """Runs on the caller's event loop: hand every job its result or error."""
    for job, result, error in outcomes:
        if job.fut.done():  # the caller was cancelled meanwhile
            continue
        if error is not None:
            job.fut.set_exception(error)
        else:
            job.fut.set_result(result)


def _deliver(outcomes: list[_Outcome]) -> None:
    """From the writer thread: one wake-up per event loop for the whole group."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, group in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody is waiting
            loop.call_soon_threadsafe(_settle, group)


_STOP = object()


def _connect(path: Path, config: SqliteConfig, *, read_only: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        timeout=config.busy_timeout_s,
        isolation_level=None,  # we issue BEGIN / COMMIT ourselves
        check_same_thread=False,  # each connection is still used by one thread at a time
        cached_statements=256,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(config.busy_timeout_s * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA cache_size = {-int(config.cache_size_kib)}")
        conn.execute("PRAGMA temp_store = MEMORY")
        if read_only:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _prepare_path(path: Path) -> None:
    """Create the parent directory (0700) and the database file (0600) if they are missing."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        parent.chmod(0o700)  # whatever the umask
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


class SqliteEngine:
    """A database file behind one writer thread with group commit and a small reader pool."""

    def __init__(
        self,
        path: Path,
        config: SqliteConfig,
        migrate: Callable[[sqlite3.Connection], None],
    ) -> None:
        self.path = path
        self._config = config
        self._closed = False
        self._closing: asyncio.Future[None] | None = None
        try:
            _prepare_path(path)
            self._writer_conn = _connect(path, config, read_only=False)
        except (OSError, sqlite3.Error) as exc:
            raise ControlPlaneError(f"cannot open the database {str(path)!r}: {exc}") from exc
        try:
            self._writer_conn.execute(f"PRAGMA journal_size_limit = {int(config.journal_size_limit_bytes)}")
            mode = self._writer_conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ControlPlaneError(f"the database {str(path)!r} cannot use WAL mode (got {mode})")
            migrate(self._writer_conn)
        except sqlite3.Error as exc:
            self._writer_conn.close()
            raise map_error(exc) from exc
        except BaseException:
            self._writer_conn.close()
            raise

        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._writer_main, name="outpost-store-writer", daemon=True)
        self._writer.start()

        self._local = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        self._readers = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, config.reader_threads),
            thread_name_prefix="outpost-store-read",
        )

    # -- the async surface -------------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the writer thread inside a group-commit transaction; return once durable."""
        if self._closed:
            raise ControlPlaneError("the store is closed")
        if not self._writer.is_alive():
            raise ControlPlaneError("the store's writer thread has stopped")
        job = _Job(fn, asyncio.get_running_loop())
        self._queue.put(job)
        return await job.fut

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on a reader connection inside one read transaction."""
        if self._closed:
            raise ControlPlaneError("the store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._run_read, fn)

    async def ping(self) -> None:
        """Raise ``ControlPlaneError`` unless the writer thread runs and a read answers."""
        if not self._closed and not self._writer.is_alive():
            raise ControlPlaneError("the store's writer thread has stopped")
        await self.read(lambda conn: conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall())

    async def close(self) -> None:
        """Finish the queued writes, then close every connection. Idempotent."""
        if self._closing is None:
            self._closed = True
            self._queue.put(_STOP)
            self._closing = asyncio.ensure_future(asyncio.to_thread(self._shutdown))
        await asyncio.shield(self._closing)

    def _shutdown(self) -> None:
        self._writer.join()
        self._readers.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_conns:
                conn.close()
            self._reader_conns.clear()

    # -- reader threads ----------------------------------------------------------------------

    def _reader_conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path, self._config, read_only=True)
            self._local.conn = conn
            with self._reader_lock:
                self._reader_conns.append(conn)
        return conn

    def _run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._reader_conn()
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise map_error(exc) from exc

    # -- the writer thread -------------------------------------------------------------------

    def _writer_main(self) -> None:
        conn = self._writer_conn
        stopping = False
        wrote = False  # since the WAL was last truncated
        try:
            while not stopping:
                try:
                    first = self._queue.get(timeout=self._config.wal_truncate_idle_s if wrote else None)
                except queue.Empty:
                    wrote = not self._truncate_wal(conn)
                    continue
                wrote = True
                if first is _STOP:
                    break
                batch: list[_Job[Any]] = [first]  # type: ignore[list-item]
                while len(batch) < self._config.max_group_commit_jobs:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)  # type: ignore[arg-type]
                try:
                    outcomes = self._run_batch(conn, batch)
                except Exception as exc:  # a bug: fail the group rather than leave its callers waiting
                    _log.exception("write group failed")
                    with contextlib.suppress(sqlite3.Error):
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                    outcomes = [(job, None, exc) for job in batch]
                _deliver(outcomes)
        finally:
            conn.close()

    def _truncate_wal(self, conn: sqlite3.Connection) -> bool:
        """Checkpoint the whole WAL and truncate it to zero bytes, without waiting for readers
        (or another process's writer): ``False`` if one was in the way."""
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(self._config.busy_timeout_s * 1000)}")
        except sqlite3.Error as exc:
            _log.debug("WAL checkpoint failed: %s", exc)
            return False
        return not busy

    @staticmethod
    def _run_batch(conn: sqlite3.Connection, batch: list[_Job[Any]]) -> list[_Outcome]:
        """Run a group of jobs in one transaction, each in its own savepoint; return their outcomes."""
        jobs = [job for job in batch if not job.fut.cancelled()]
        if not jobs:
            return []
        outcomes: list[_Outcome] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in jobs:
                conn.execute("SAVEPOINT job")
                try:
                    result = job.fn(conn)
                except Exception as exc:
                    if not conn.in_transaction:
                        # SQLite aborted the whole transaction (disk full, I/O error).
                        raise
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    outcomes.append((job, None, _as_error(exc)))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((job, result, None))
            conn.execute("COMMIT")
        except Exception as exc:
            # The group's transaction is lost. A job that had failed on its own keeps its error
            # (it wrote nothing either way); every other job of the group gets this one.
            _log.exception("write transaction failed")
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            error = _as_error(exc)
            failed = {id(job): e for job, _, e in outcomes if e is not None}
            return [(job, None, failed.get(id(job), error)) for job in jobs]
        return outcomes
