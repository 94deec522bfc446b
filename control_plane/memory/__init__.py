"""Memory stores: named collections of small text documents (memories) that outlive sessions,
every change of them kept as a version.

* :mod:`~control_plane.memory.service` — :class:`MemoryService`, the rules of stores, memories and
  versions (the API's router calls it with the typed values of :mod:`~control_plane.memory.commands`).
* :mod:`~control_plane.memory.limits` — what a path, a content and a hash may be; the caps.
* The memories themselves are the store's ``Memories`` role (``control_plane.store.base``).
"""

from __future__ import annotations

from control_plane.memory.service import MemoryService

__all__ = ["MemoryService"]
