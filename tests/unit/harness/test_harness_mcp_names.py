"""Model-facing MCP tool names: the plain form, the digest form, the limit, collisions."""

from __future__ import annotations

import hashlib
import random
import re

import pytest

from control_plane.mcp.names import MAX_TOOL_NAME_CHARS, ToolNameMap, hashed_tool_name, sanitize, tool_name

VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def digest(server: str, tool: str) -> str:
    return hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]


def test_plain_name_when_clean_and_short() -> None:
    assert tool_name("github", "create_issue") == "mcp__github__create_issue"
    assert tool_name("my-server", "get-Thing_2") == "mcp__my-server__get-Thing_2"


def test_unsafe_characters_are_replaced_and_a_digest_keeps_it_unique() -> None:
    name = tool_name("git hub", "issues.create")
    assert name == f"mcp__git_hub__issues_create_{digest('git hub', 'issues.create')}"
    assert VALID.fullmatch(name)
    assert sanitize("a.b/c d€") == "a_b_c_d_"


def test_long_names_are_cut_to_the_limit_with_a_stable_digest() -> None:
    server, tool = "s" * 40, "t" * 40
    name = tool_name(server, tool)
    assert len(name) == MAX_TOOL_NAME_CHARS
    assert name.endswith("_" + digest(server, tool))
    assert VALID.fullmatch(name)
    assert tool_name(server, tool) == name  # the same on every call (and every run)
    # Tools that differ only past the cut still get different names.
    assert tool_name(server, tool + "x") != name


def test_exactly_at_the_limit_is_plain() -> None:
    server = "s"
    tool = "t" * (MAX_TOOL_NAME_CHARS - len("mcp__s__"))
    assert tool_name(server, tool) == f"mcp__s__{tool}"
    assert len(tool_name(server, tool + "t")) == MAX_TOOL_NAME_CHARS


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a__b", "c"), ("a", "b__c")),  # the separator would be ambiguous
        (("a_", "b"), ("a", "_b")),
        (("a.b", "c"), ("a_b", "c")),  # the same after sanitizing
        (("x", "y z"), ("x", "y_z")),
        (("", "a"), ("a", "")),
    ],
)
def test_pairs_that_would_collide_get_distinct_names(first: tuple[str, str], second: tuple[str, str]) -> None:
    assert tool_name(*first) != tool_name(*second)
    assert VALID.fullmatch(tool_name(*first)) and VALID.fullmatch(tool_name(*second))


def test_many_random_pairs_are_unique_and_valid() -> None:
    rng = random.Random(7)
    alphabet = "ab_-.Z9 é"
    pairs = {
        (
            "".join(rng.choices(alphabet, k=rng.randint(1, 40))),
            "".join(rng.choices(alphabet, k=rng.randint(1, 50))),
        )
        for _ in range(5000)
    }
    names = {tool_name(s, t) for s, t in pairs}
    assert len(names) == len(pairs)
    assert all(VALID.fullmatch(n) for n in names)


def test_name_map_reverse_lookup_and_reserved_names() -> None:
    names = ToolNameMap(reserved={"mcp__docs__search"})
    taken = names.add("docs", "search")
    assert taken == hashed_tool_name("docs", "search")  # the plain form was reserved
    assert names.add("docs", "fetch") == "mcp__docs__fetch"
    assert names.add("docs", "fetch") == "mcp__docs__fetch"  # idempotent
    assert names.lookup("mcp__docs__fetch") == ("docs", "fetch")
    assert names.lookup(taken) == ("docs", "search")
    assert names.lookup("mcp__docs__search") is None
    assert len(names) == 2 and "mcp__docs__fetch" in names
    assert sorted(names) == sorted([taken, "mcp__docs__fetch"])


def test_name_map_leaves_out_a_tool_with_no_free_name() -> None:
    names = ToolNameMap(reserved={tool_name("a", "b"), hashed_tool_name("a", "b")})
    assert names.add("a", "b") is None
    assert names.lookup(tool_name("a", "b")) is None
