"""A session's multiagent roster: each agent of its agent's ``multiagent`` with its full definition.

At session creation the stored roster (``{"type": "agent", "id", "version"}`` entries, versions
pinned when the agent was written: ``control_plane.agents.multiagent``) becomes the SDK's
``BetaManagedAgentsSessionMultiagent*`` form: every agent entry the snapshot of that agent version
(``BetaManagedAgentsSessionThreadAgent``: no ``multiagent`` of its own), advisors as they are. The
harness reads the session's copy only (``control_plane.harness.thread_brains``), so a later change
to a roster agent does not reach a running session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from control_plane.sessions.agent_snapshot import session_agent_snapshot
from control_plane.store.base import Resources

__all__ = ["session_multiagent"]


async def session_multiagent(multiagent: Mapping[str, Any] | None, store: Resources) -> dict[str, Any] | None:
    """The session's copy of a stored (resolved) ``multiagent``."""
    if multiagent is None:
        return None
    if multiagent.get("type") == "coordinator":
        return {"type": "coordinator", "agents": [await _full(e, store) for e in multiagent["agents"]]}
    subagents = dict(multiagent["subagents"])
    if subagents.get("type") == "enabled":
        subagents["predefined_agents"] = [await _full(e, store) for e in subagents["predefined_agents"]]
    return {**multiagent, "subagents": subagents}


async def _full(entry: Mapping[str, Any], store: Resources) -> dict[str, Any]:
    if entry.get("type") != "agent":
        return dict(entry)
    agent = await store.get_resource("agent", str(entry["id"]), int(entry["version"]))
    snapshot = session_agent_snapshot(agent)
    snapshot.pop("multiagent", None)
    return snapshot
