"""Allowlist entries: parsing, canonical forms, matching and policy coverage."""

from __future__ import annotations

import pytest

from edge_agent.egress.hosts import Allowlist, HostPattern, PatternKind, normalize_host, parse_pattern


@pytest.mark.parametrize(
    ("text", "kind", "host", "port"),
    [
        ("example.com", PatternKind.NAME, "example.com", None),
        ("Example.COM.", PatternKind.NAME, "example.com", None),
        ("*.example.com", PatternKind.WILDCARD, "example.com", None),
        ("*.example.com:443", PatternKind.WILDCARD, "example.com", 443),
        ("127.0.0.1:8080", PatternKind.ADDRESS, "127.0.0.1", 8080),
        ("203.0.113.7", PatternKind.ADDRESS, "203.0.113.7", None),
        ("gitlab", PatternKind.NAME, "gitlab", None),
        ("_svc.example.com", PatternKind.NAME, "_svc.example.com", None),
        (" pypi.org ", PatternKind.NAME, "pypi.org", None),
    ],
)
def test_parse_valid(text: str, kind: PatternKind, host: str, port: int | None) -> None:
    assert parse_pattern(text) == HostPattern(kind, host, port)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "*",
        "*.",
        "**.example.com",
        "a.*.example.com",
        "example.*",
        "*.127.0.0.1",
        "example.com:0",
        "example.com:65536",
        "example.com:http",
        "example.com:",
        "::1",
        "[::1]:443",
        "exa mple.com",
        "-bad.example.com",
        "bücher.example",  # IDNA must be given in punycode
        "a" * 64 + ".com",
        "http://example.com",
        "127.1",  # numeric spellings are addresses in disguise, never names
        "0x7f000001",
        "2130706433",
        "0177.0.0.1",
        "10.1",
    ],
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pattern(text)


def test_normalize_host() -> None:
    assert normalize_host("API.Example.com.") == "api.example.com"
    assert normalize_host("[::1]") == "::1"
    assert normalize_host("::FFFF:127.0.0.1") == "::ffff:7f00:1"
    with pytest.raises(ValueError):
        normalize_host("192.168.001.1")  # leading zeros: ambiguous (octal to inet_aton)


def test_matching() -> None:
    allow = Allowlist.parse(["example.com", "*.corp.test", "api.test:443", "10.0.0.5:8080"])
    assert allow.permits("example.com", 1)
    assert not allow.permits("www.example.com", 80)
    assert allow.permits("a.corp.test", 80) and allow.permits("a.b.corp.test", 80)
    assert not allow.permits("corp.test", 80)
    assert not allow.permits("evilcorp.test", 80)
    assert allow.permits("api.test", 443) and not allow.permits("api.test", 80)
    assert allow.permits("10.0.0.5", 8080) and not allow.permits("10.0.0.5", 8081)
    assert allow.names_address("10.0.0.5", 8080)
    assert not allow.names_address("example.com", 80)
    assert not Allowlist().permits("example.com", 80)


def test_canonical_and_deduplicated() -> None:
    allow = Allowlist.parse(["B.example", "b.example.", "a.example:80", "*.c.example"])
    assert allow.entries() == ("*.c.example", "a.example:80", "b.example")
    assert Allowlist.parse(reversed(allow.entries())) == allow


@pytest.mark.parametrize(
    ("cap", "wanted", "covered"),
    [
        ("example.com", "example.com", True),
        ("example.com", "example.com:443", True),
        ("example.com:443", "example.com", False),
        ("example.com:443", "example.com:443", True),
        ("example.com:443", "example.com:80", False),
        ("*.example.com", "api.example.com", True),
        ("*.example.com", "*.api.example.com", True),
        ("*.example.com", "*.example.com", True),
        ("*.example.com", "example.com", False),
        ("api.example.com", "*.example.com", False),
        ("*.example.com", "notexample.com", False),
        ("127.0.0.1", "127.0.0.1:80", True),
        ("*.example.com", "127.0.0.1", False),
        ("localhost", "127.0.0.1", False),
    ],
)
def test_policy_coverage(cap: str, wanted: str, covered: bool) -> None:
    assert parse_pattern(cap).covers(parse_pattern(wanted)) is covered
    uncovered = Allowlist.parse([cap]).uncovered(Allowlist.parse([wanted]))
    assert (not uncovered) is covered
