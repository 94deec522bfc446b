"""Retention: what the store forgets, and the background pruner that makes it forget.

Each control-plane process runs one :class:`Pruner` (``ControlPlane`` starts it). Every
``interval_s`` it deletes, in small batches so that no run holds the store's writer long:

* archived sessions older than ``archived_sessions_days`` (off by default), with everything that
  is theirs: events, resource history, lease, sandbox placement, wake request, repositories;
* enrollment tokens used, revoked or expired more than ``enrollment_tokens_days`` ago;
* expired files (``expires_in_seconds`` at upload), metadata and bytes, when it is given a
  :class:`~control_plane.files.FileService` (reads already treat them as gone; this frees the disk).

Several processes on one store may prune at once: each deletion happens once, and the store
methods (``Resources.prune_archived``, ``Identity.prune_enrollment_tokens``) bound their work.
What ends sooner needs no pruner: a session's lease row goes when the session ends
(``Coordination.forget_lease``), nonces and the append feed are pruned as they are written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from control_plane.files import FileService
from control_plane.sessions.repositories import RESOURCE_KIND as REPOSITORY_KIND
from control_plane.sessions.repository_tokens import list_session_resources
from control_plane.store.base import Identity, Resources

__all__ = ["PruneReport", "Pruner", "RetentionConfig"]

log = logging.getLogger(__name__)

_DAY_S = 86_400.0


class RetentionConfig(BaseModel):
    """How long the store keeps what is finished."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    archived_sessions_days: float | None = Field(
        None,
        gt=0,
        description="Delete an archived session, its events and everything else it owns this many days "
        "after it was archived. `null`: keep archived sessions for ever (the store then grows with every "
        "session run; set it, or delete sessions through the API).",
    )
    enrollment_tokens_days: float | None = Field(
        30.0,
        gt=0,
        description="Delete an enrollment token this many days after it was used, revoked or expired (it "
        "enrolls nothing any more; the edge it enrolled keeps its own record). `null`: keep them.",
    )
    interval_s: float = Field(
        300.0,
        gt=0,
        description="How often each control-plane process prunes (several processes on one store may).",
    )
    batch_size: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Archived sessions (or tokens) deleted per store call; a long log is deleted over "
        "several transactions, so the store's writer is never held long.",
    )


class _Store(Resources, Identity, Protocol):
    """The roles the pruner uses."""


@dataclass(frozen=True, slots=True)
class PruneReport:
    sessions: int = 0
    tokens: int = 0
    files: int = 0


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Pruner:
    """Applies a :class:`RetentionConfig` to a store, now (``run_once``) or every ``interval_s``."""

    def __init__(
        self,
        store: _Store,
        config: RetentionConfig,
        *,
        clock: Callable[[], datetime] = _utcnow,
        files: FileService | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._files = files
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        c = self._config
        due = c.archived_sessions_days is not None or c.enrollment_tokens_days is not None
        return due or self._files is not None

    async def run_once(self) -> PruneReport:
        """Delete everything due now, batch after batch; returns how much was deleted."""
        config, now = self._config, self._clock()
        sessions = tokens = 0
        if config.archived_sessions_days is not None:
            before = now - timedelta(seconds=config.archived_sessions_days * _DAY_S)
            while True:
                ids = await self._store.prune_archived("session", before, limit=config.batch_size)
                for session_id in ids:
                    for repository in await list_session_resources(self._store, session_id):
                        await self._store.delete_resource(REPOSITORY_KIND, repository.id)
                sessions += len(ids)
                if len(ids) < config.batch_size:
                    break
                await asyncio.sleep(0)  # let other writers in between batches
        if config.enrollment_tokens_days is not None:
            before = now - timedelta(seconds=config.enrollment_tokens_days * _DAY_S)
            while True:
                count = await self._store.prune_enrollment_tokens(before, limit=config.batch_size)
                tokens += count
                if count < config.batch_size:
                    break
                await asyncio.sleep(0)
        files = 0 if self._files is None else await self._files.purge_expired(config.batch_size)
        if sessions or tokens or files:
            log.info(
                "retention: deleted %d archived session(s), %d enrollment token(s), %d expired file(s)",
                sessions,
                tokens,
                files,
            )
        return PruneReport(sessions=sessions, tokens=tokens, files=files)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Prune every ``interval_s`` in the background (the first run one interval after start:
        startup stays quick). Does nothing if every setting is off."""
        if self._task is None and self.enabled:
            self._task = asyncio.create_task(self._loop(), name="retention-pruner")

    async def close(self) -> None:
        """Stop pruning (a batch in progress is abandoned; it committed or it did not). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def __aenter__(self) -> Pruner:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.interval_s)
            try:
                await self.run_once()
            except Exception as exc:
                log.warning("retention: pruning failed (next try in %g s): %s", self._config.interval_s, exc)
