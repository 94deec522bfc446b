"""Dreams: background jobs that read past sessions and a memory store, and write what they learned
into a memory store (``/v1/dreams``; docs/dreams.md)."""

from control_plane.dreams.background import DreamScheduler
from control_plane.dreams.commands import CreateDream, DreamPage, DreamQuery
from control_plane.dreams.config import DreamsConfig
from control_plane.dreams.service import DreamService, DreamWaker, NullDreamWaker

__all__ = [
    "CreateDream",
    "DreamPage",
    "DreamQuery",
    "DreamScheduler",
    "DreamService",
    "DreamWaker",
    "DreamsConfig",
    "NullDreamWaker",
]
