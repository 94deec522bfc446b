"""The deployment scheduler: every control-plane process runs one (``ControlPlane`` starts it).

Every ``check_interval_s`` it asks :meth:`DeploymentService.fire_due` to fire the due tick of
every active scheduled deployment. Several processes on one store may check at once: a tick's run
and session ids are derived from (deployment, tick), so whichever process creates them first wins
and the others meet ``Conflict`` (exactly one run per tick; see
:mod:`control_plane.deployments.service`). A run starts within ``check_interval_s`` of its tick
(the hosted product's "jitter"). After a downtime only the latest missed tick fires, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field

from control_plane.deployments.service import DeploymentService
from control_plane.store.base import Resource

__all__ = ["DeploymentScheduler", "DeploymentsConfig"]

log = logging.getLogger(__name__)


class DeploymentsConfig(BaseModel):
    """Scheduled runs of deployments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler_enabled: bool = Field(
        True,
        description="Run the deployment scheduler in this process (several processes on one store may: "
        "each tick still fires once). `false`: this process fires no scheduled runs; manual runs work.",
    )
    check_interval_s: float = Field(
        15.0,
        gt=0,
        le=60,
        description="How often the scheduler looks for due ticks: a scheduled run starts at most this long "
        "after its cron time.",
    )
    pause_after_failures: int = Field(
        3,
        ge=1,
        le=1000,
        description="Pause a deployment (`paused_reason: error`) after this many scheduled runs in a row "
        "failed to start a session (a success resets the count; manual runs do not count).",
    )


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DeploymentScheduler:
    """Fires due ticks now (``run_once``) or every ``check_interval_s`` (``start``/``close``)."""

    def __init__(
        self,
        service: DeploymentService,
        config: DeploymentsConfig,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._service = service
        self._config = config
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> list[Resource]:
        """Fire what is due now; the runs this process recorded."""
        runs = await self._service.fire_due(
            self._clock(), pause_after_failures=self._config.pause_after_failures
        )
        for run in runs:
            log.info("deployment %s: scheduled run %s", run.body.get("deployment_id"), run.id)
        return runs

    async def start(self) -> None:
        if self._task is None and self._config.scheduler_enabled:
            self._task = asyncio.create_task(self._loop(), name="deployment-scheduler")

    async def close(self) -> None:
        """Stop checking (a check in progress is abandoned between store calls). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def __aenter__(self) -> DeploymentScheduler:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception as exc:
                log.warning(
                    "deployment scheduler: check failed (next in %g s): %s",
                    self._config.check_interval_s,
                    exc,
                )
            await asyncio.sleep(self._config.check_interval_s)
