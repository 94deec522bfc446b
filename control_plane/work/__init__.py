"""The self-hosted work queue: work items for sessions whose tools an outside worker runs (the
SDK's ``EnvironmentWorker``), and the two credentials that worker holds — an environment's keys
(:mod:`~control_plane.work.environment_keys`) and each work item's sessions token
(:mod:`~control_plane.work.sessions_tokens`). The rules live in :mod:`~control_plane.work.service`;
who runs an environment's tools: :mod:`control_plane.environments.tool_runner`."""

from control_plane.environments.tool_runner import EDGE, WORKER, tool_runner_of
from control_plane.work.environment_keys import EnvironmentKeys
from control_plane.work.service import WorkQueue, WorkQueueConfig

__all__ = ["EDGE", "WORKER", "EnvironmentKeys", "WorkQueue", "WorkQueueConfig", "tool_runner_of"]
