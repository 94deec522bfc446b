"""What :class:`~control_plane.skills.service.SkillService` is asked.

Typed values, not HTTP: the API's router reads the multipart body into a :class:`SkillUpload` and
the query strings into :class:`SkillQuery` / :class:`VersionQuery`. The service's answers are the
store's ``Resource`` (a skill, a skill version) and :class:`SkillPage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from control_plane.skills.archive import SkillFile
from control_plane.store.base import Resource

__all__ = ["SkillPage", "SkillQuery", "SkillUpload", "VersionQuery"]


@dataclass(frozen=True, slots=True)
class SkillUpload:
    """The skill directory's files as sent (or one archive of it), and the skill's label."""

    files: Sequence[SkillFile]
    display_name: str | None = None  # None: the manifest's name (only at creation)


@dataclass(frozen=True, slots=True)
class SkillQuery:
    limit: int | None = None  # None: 20
    cursor: str | None = None  # the store's
    source: str | None = None  # custom | anthropic | anthropic_example | plugin; None: every skill


@dataclass(frozen=True, slots=True)
class VersionQuery:
    limit: int | None = None  # None: 20
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class SkillPage:
    items: list[Resource]
    next_cursor: str | None
