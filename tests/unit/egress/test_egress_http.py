"""The proxy's request-head parser and responses (no sockets)."""

from __future__ import annotations

import pytest

from edge_agent.egress.http import HeadError, RequestKind, parse_head, render_response


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_connect() -> None:
    request = parse_head(head("CONNECT Example.com:443 HTTP/1.1", "Host: example.com:443"))
    assert (request.kind, request.host, request.port, request.upstream_head) == (
        RequestKind.CONNECT,
        "example.com",
        443,
        b"",
    )
    assert parse_head(head("CONNECT [::1]:8443 HTTP/1.1")).host == "::1"


def test_absolute_form_is_rewritten_to_origin_form() -> None:
    request = parse_head(
        head(
            "POST http://api.test:8080/v1/x?q=1#frag HTTP/1.1",
            "Host: evil.test",
            "Proxy-Authorization: Basic c2VjcmV0",
            "Proxy-Connection: keep-alive",
            "Connection: keep-alive, X-Drop-Me",
            "X-Drop-Me: 1",
            "Content-Length: 3",
            "Accept: */*",
        )
    )
    assert (request.kind, request.method, request.host, request.port) == (
        RequestKind.FORWARD,
        "POST",
        "api.test",
        8080,
    )
    assert request.upstream_head == head(
        "POST /v1/x?q=1 HTTP/1.1",
        "Host: api.test:8080",
        "Content-Length: 3",
        "Accept: */*",
        "Connection: close",
    )


def test_default_port_and_path() -> None:
    request = parse_head(head("GET http://example.com HTTP/1.0"))
    assert (request.port, request.upstream_head.split(b"\r\n")[:2]) == (
        80,
        [b"GET / HTTP/1.0", b"Host: example.com"],
    )


@pytest.mark.parametrize(
    ("lines", "status", "rule"),
    [
        (("GET / HTTP/1.1", "Host: x"), 405, "egress.method"),
        (("GET https://example.com/ HTTP/1.1",), 405, "egress.method"),
        (("GET ftp://example.com/ HTTP/1.1",), 405, "egress.method"),
        (("CONNECT example.com HTTP/1.1",), 400, "egress.request"),
        (("CONNECT example.com:99999 HTTP/1.1",), 400, "egress.request"),
        (("CONNECT 127.1:80 HTTP/1.1",), 400, "egress.request"),
        (("GET http://user:pw@example.com/ HTTP/1.1",), 400, "egress.request"),
        (("GET http:///x HTTP/1.1",), 400, "egress.request"),
        (("GET http://example.com/ HTTP/2.0",), 400, "egress.request"),
        (("GET  http://example.com/ HTTP/1.1",), 400, "egress.request"),
        (("GET http://example.com/ HTTP/1.1", "Bad Header: x"), 400, "egress.request"),
        (("GET http://example.com/ HTTP/1.1", " folded"), 400, "egress.request"),
    ],
)
def test_refused_heads(lines: tuple[str, ...], status: int, rule: str) -> None:
    with pytest.raises(HeadError) as info:
        parse_head(head(*lines))
    assert (info.value.status, info.value.rule) == (status, rule)


def test_non_ascii_and_incomplete_heads() -> None:
    with pytest.raises(HeadError):
        parse_head("GET http://ex.com/é HTTP/1.1\r\n\r\n".encode())
    with pytest.raises(HeadError):
        parse_head(b"GET http://ex.com/ HTTP/1.1\r\n")


def test_render_response_names_the_rule() -> None:
    raw = render_response(403, "egress.allowlist", "x.test:80 is not on this sandbox's allowlist")
    head_part, _, body = raw.partition(b"\r\n\r\n")
    assert head_part.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"X-Outpost-Egress-Rule: egress.allowlist" in head_part
    assert b"Connection: close" in head_part
    assert body == b"egress.allowlist: x.test:80 is not on this sandbox's allowlist\n"
    assert f"Content-Length: {len(body)}".encode() in head_part
