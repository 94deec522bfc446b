"""control_plane.urls.normalize_url: the one normaliser of repository, MCP server and endpoint URLs."""

from __future__ import annotations

import pytest

from control_plane.errors import InvalidRequest
from control_plane.urls import MAX_URL_CHARS, normalize_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # scheme and host lower-cased; the path kept exactly
        ("HTTPS://MCP.Example.COM/MCP/Path", "https://mcp.example.com/MCP/Path"),
        # default ports dropped, others kept
        ("https://mcp.example.com:443/mcp", "https://mcp.example.com/mcp"),
        ("http://mcp.example.com:80/mcp", "http://mcp.example.com/mcp"),
        ("http://mcp.example.com:443/mcp", "http://mcp.example.com:443/mcp"),
        ("https://mcp.example.com:80/mcp", "https://mcp.example.com:80/mcp"),
        ("https://mcp.example.com:8443/mcp", "https://mcp.example.com:8443/mcp"),
        # IPv6 hosts keep their brackets
        ("http://[FE80::1]:8080/x", "http://[fe80::1]:8080/x"),
        ("https://[::1]:443/x", "https://[::1]/x"),
        # trailing slashes kept; an empty path becomes "/"
        ("https://example.com/org/site/", "https://example.com/org/site/"),
        ("https://example.com", "https://example.com/"),
        ("https://example.com:443", "https://example.com/"),
        # query kept, fragment dropped; percent escapes untouched
        ("https://example.com/mcp?tenant=A&x=%2F", "https://example.com/mcp?tenant=A&x=%2F"),
        ("https://example.com/mcp#part", "https://example.com/mcp"),
        ("https://example.com/mcp?", "https://example.com/mcp"),
        # surrounding whitespace ignored
        ("  https://example.com/mcp\n", "https://example.com/mcp"),
    ],
)
def test_canonical_form(url: str, expected: str) -> None:
    assert normalize_url(url) == expected
    assert normalize_url(expected) == expected  # idempotent


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://user:secret@example.com/mcp", "must not carry credentials"),
        ("https://token@example.com/mcp", "must not carry credentials"),
        ("https://:secret@example.com/mcp", "must not carry credentials"),
        ("ftp://example.com/x", "http or https"),
        ("git@github.com:org/app.git", "http or https"),
        ("ssh://github.com/org/app.git", "http or https"),
        ("example.com/mcp", "http or https"),
        ("https:///path", "no host"),
        ("https://example.com:99999/x", "not a valid URL"),
        ("https://example.com:port/x", "not a valid URL"),
        ("https://[::1/x", "not a valid URL"),
        ("https://example.com/a b", "whitespace or control"),
        ("https://exa\nmple.com/mcp", "whitespace or control"),  # urlsplit would delete the newline
        ("https://example.com/\tmcp", "whitespace or control"),
        ("https://example.com/\x00", "whitespace or control"),
        ("https://example.com/\x7f", "whitespace or control"),
        ("https://example.com/" + "a" * MAX_URL_CHARS, f"at most {MAX_URL_CHARS}"),
    ],
)
def test_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as info:
        normalize_url(url, param="auth.mcp_server_url")
    assert info.value.param == "auth.mcp_server_url"
    assert "secret" not in str(info.value)  # the refusal never echoes the URL


def test_git_urls_refuse_query_and_fragment() -> None:
    assert normalize_url("HTTPS://Git.Internal:443/org/app.git", allow_query=False) == (
        "https://git.internal/org/app.git"
    )
    for url in ("https://github.com/org/app.git?ref=main", "https://github.com/org/app.git#main"):
        with pytest.raises(InvalidRequest, match="query or fragment"):
            normalize_url(url, allow_query=False)


def test_non_ascii_hosts_and_paths_are_kept() -> None:
    assert normalize_url("https://BÜCHER.example/Straße") == "https://bücher.example/Straße"
