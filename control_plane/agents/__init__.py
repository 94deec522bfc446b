"""Agents: versioned configurations that sessions snapshot.

* :mod:`~control_plane.agents.service` — :class:`AgentService`, the rules of agents and their
  versions (the API's router calls it with the typed values of :mod:`~control_plane.agents.commands`).
* The configuration's parts and their resolution: :mod:`control_plane.agents.configuration`.
"""

from __future__ import annotations

from control_plane.agents.service import AgentService

__all__ = ["AgentService"]
