"""The skills a session's agent has, as the model is told of them: a section of the system prompt.

As the hosted product does, the model is not given the skills' contents up front, only each
skill's name and description and where its files are in the sandbox (``/mnt/skills/<name>/``,
:data:`SKILLS_ROOT`); it reads a skill's ``SKILL.md`` when a task calls for it (progressive
disclosure). The section is built from the offers the session pinned at its start (the session's
``skill_offers``: ``{skill_id, version, name, description}``), in the agent's order, so it is the
same text for the whole session and the prompt-cache prefix stays stable. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

__all__ = ["SKILLS_ROOT", "SkillOffer", "parse_skill_offers", "skill_path", "skills_section"]

SKILLS_ROOT = "/mnt/skills"

_INTRO = (
    "Skills are folders of instructions, scripts and resources in your sandbox, each for a kind of "
    "task. When a task matches a skill's description, read the skill's SKILL.md (at its location "
    "below) before you start, and follow it; it may point to more files in the skill's folder."
)


@dataclass(frozen=True, slots=True)
class SkillOffer:
    name: str  # the skill's slug: also its folder's name
    description: str


def skill_path(name: str) -> str:
    """Where the skill's files are in the sandbox."""
    return f"{SKILLS_ROOT}/{name}"


def parse_skill_offers(raw: Any) -> tuple[SkillOffer, ...]:
    """The session's ``skill_offers`` (entries that are not well-formed are left out)."""
    offers = []
    for entry in raw if isinstance(raw, list) else ():
        if not isinstance(entry, dict):
            continue
        name, description = entry.get("name"), entry.get("description")
        if isinstance(name, str) and name and isinstance(description, str):
            offers.append(SkillOffer(name=name, description=description))
    return tuple(offers)


def skills_section(offers: Sequence[SkillOffer]) -> str | None:
    """The system prompt's skills section; ``None`` without skills."""
    if not offers:
        return None
    entries = "\n".join(
        "<skill>\n"
        f"<name>{escape(offer.name)}</name>\n"
        f"<description>{escape(offer.description)}</description>\n"
        f"<location>{escape(skill_path(offer.name))}/SKILL.md</location>\n"
        "</skill>"
        for offer in offers
    )
    return f"<skills>\n{_INTRO}\n\n<available_skills>\n{entries}\n</available_skills>\n</skills>"
