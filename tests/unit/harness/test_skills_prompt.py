"""The skills section of the system prompt: each pinned skill's name, description and location,
after the agent's own prompt, the same text for the whole session (a stable cache prefix)."""

from __future__ import annotations

from control_plane.harness.agent import AgentSpec
from control_plane.harness.skills_prompt import parse_skill_offers, skills_section

OFFERS = [
    {"skill_id": "skill_1", "version": "skillver_1", "name": "pdf-report", "description": "PDFs & <b>"},
    {"skill_id": "skill_2", "version": "skillver_2", "name": "sheets", "description": "Spreadsheets."},
    {"name": 3},  # not well-formed: left out
]


def test_the_section_names_each_skill_and_where_it_is() -> None:
    section = skills_section(parse_skill_offers(OFFERS))
    assert section is not None
    assert "<name>pdf-report</name>" in section
    assert "<description>PDFs &amp; &lt;b&gt;</description>" in section  # escaped
    assert "<location>/mnt/skills/sheets/SKILL.md</location>" in section
    assert section.index("pdf-report") < section.index("sheets")  # the agent's order
    assert skills_section(()) is None
    assert parse_skill_offers(None) == ()


def test_system_blocks_the_prompt_then_the_skills_cache_on_the_last() -> None:
    agent = {"model": {"id": "m"}, "system": "Be brief.", "tools": []}
    spec = AgentSpec.from_json(agent, skill_offers=OFFERS)
    blocks = spec.system_param()
    assert blocks is not None and [b["text"][:9] for b in blocks] == ["Be brief.", "<skills>\n"]
    assert "cache_control" not in blocks[0] and blocks[1]["cache_control"] == {"type": "ephemeral"}
    assert AgentSpec.from_json(agent, skill_offers=OFFERS).system_param() == blocks  # stable across turns
    plain = AgentSpec.from_json(agent).system_param()
    assert plain == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    only_skills = AgentSpec.from_json({**agent, "system": None}, skill_offers=OFFERS).system_param()
    assert only_skills is not None and len(only_skills) == 1
    assert AgentSpec.from_json({**agent, "system": None}).system_param() is None
