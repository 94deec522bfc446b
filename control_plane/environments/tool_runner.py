"""Who runs an environment's toolset calls: Outpost's edge (the default) or an outside worker.

An Outpost extension field of the environment's ``config``, beside ``networking``:
``{"type": "self_hosted", "tool_runner": "worker"}`` (``"edge"`` or omitted: the edges). A session
copies the choice when it is created (``tool_runner`` in its body), so changing the environment
later does not move sessions already running."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from control_plane.errors import InvalidRequest

__all__ = ["EDGE", "TOOL_RUNNERS", "WORKER", "tool_runner_of", "validate_tool_runner"]

EDGE: Final = "edge"
WORKER: Final = "worker"
TOOL_RUNNERS = (EDGE, WORKER)


def validate_tool_runner(value: Any) -> str:
    """The config's ``tool_runner`` (omitted or null: ``edge``)."""
    if value is None:
        return EDGE
    if value not in TOOL_RUNNERS:
        raise InvalidRequest(
            f"config.tool_runner must be 'edge' or 'worker', not {value!r}", param="config.tool_runner"
        )
    return str(value)


def tool_runner_of(config: Mapping[str, Any] | None) -> str:
    """The tool runner a stored environment config names (``edge`` when it names none)."""
    value = (config or {}).get("tool_runner")
    return WORKER if value == WORKER else EDGE
