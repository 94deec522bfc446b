"""Skills: uploaded skill directories, versioned (``/v1/skills``), and what agents refer to.

* :mod:`~control_plane.skills.archive` — an upload checked and made one canonical zip (no I/O).
* :mod:`~control_plane.skills.catalog` — :class:`SkillCatalog`, reading skills and versions
  (``latest``, ids, epochs): what agents and sessions resolve against.
* :mod:`~control_plane.skills.service` — :class:`SkillService`, the rules; the zips live in a
  :class:`~control_plane.blobs.BlobStore`, the metadata in the store.
* :mod:`~control_plane.skills.commands` — what the service is asked.
"""

from __future__ import annotations

from control_plane.skills.archive import SkillArchive, SkillFile, SkillLimits, build_archive
from control_plane.skills.catalog import LATEST, SKILL_KIND, VERSION_KIND, SkillCatalog
from control_plane.skills.commands import SkillPage, SkillQuery, SkillUpload, VersionQuery
from control_plane.skills.service import SkillService

__all__ = [
    "LATEST",
    "SKILL_KIND",
    "VERSION_KIND",
    "SkillArchive",
    "SkillCatalog",
    "SkillFile",
    "SkillLimits",
    "SkillPage",
    "SkillQuery",
    "SkillService",
    "SkillUpload",
    "VersionQuery",
    "build_archive",
]
