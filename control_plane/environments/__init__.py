"""Environments: where sessions run (``self_hosted``: on the edges enrolled into them).

* :mod:`~control_plane.environments.service` — :class:`EnvironmentService`, the rules of
  environments (the API's router calls it with the typed values of
  :mod:`~control_plane.environments.commands`), and :func:`get_environment`, the check sessions
  and API keys use.
* :mod:`~control_plane.environments.commands` — commands, results and the :class:`Viewer` (the
  environments a caller's key sees).
* :mod:`~control_plane.environments.networking` — an environment's sandbox networking.
"""

from __future__ import annotations

from control_plane.environments.commands import Viewer
from control_plane.environments.service import EnvironmentService, get_environment

__all__ = ["EnvironmentService", "Viewer", "get_environment"]
