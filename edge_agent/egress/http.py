"""The proxy's HTTP/1.1 request-head parser and response builder (sans-I/O).

The proxy understands exactly two kinds of request:

* ``CONNECT host:port`` — answered with ``200`` and then a blind byte tunnel (TLS is passed
  through, never intercepted).
* absolute-form plain HTTP (``GET http://host[:port]/path``) — forwarded once, in origin form,
  with hop-by-hop headers removed, ``Host`` forced to the checked authority and
  ``Connection: close``; afterwards the connection is a byte pipe to the same upstream only.

Everything else (origin-form requests, ``https://`` in absolute form, other schemes) is ``405``;
a malformed head is ``400``.

One exception: requests addressed to the proxy itself (origin-form ``GET /git/...``, or absolute
form naming the proxy's own address, as a client that uses the proxy for every host sends them)
are :class:`LocalRequest` s when the proxy serves something locally (the edge's git relay);
:func:`parse_local` recognises them.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .hosts import normalize_host

__all__ = [
    "CONNECT_ESTABLISHED",
    "HeadError",
    "LocalRequest",
    "ProxyRequest",
    "RequestKind",
    "parse_head",
    "parse_local",
    "render_response",
]

CONNECT_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
        "host",  # replaced by the checked authority
    }
)
_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


class RequestKind(enum.Enum):
    CONNECT = "connect"
    FORWARD = "forward"


class HeadError(Exception):
    """A request the proxy will not serve, with the status and rule to answer with."""

    def __init__(self, status: int, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.rule = rule
        self.reason = reason


@dataclass(frozen=True)
class ProxyRequest:
    """A parsed request. ``upstream_head`` is what to send upstream first (empty for CONNECT)."""

    kind: RequestKind
    method: str
    host: str  # normalised (see hosts.normalize_host)
    port: int
    upstream_head: bytes = b""


@dataclass(frozen=True)
class LocalRequest:
    """A request for the proxy itself: ``path`` and ``query`` of the target, and the headers
    (never logged)."""

    method: str
    path: str
    query: str
    version: str
    headers: tuple[tuple[str, str], ...] = field(repr=False)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


def _bad(reason: str) -> HeadError:
    return HeadError(400, "egress.request", reason)


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _bad("malformed authority")
        host, rest = authority[: end + 1], authority[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep:
            host, port_text = authority, ""
    if port_text is None or (not port_text and default_port is None):
        raise _bad("the target needs a port")
    if port_text and (not port_text.isdigit() or not 0 < int(port_text) < 65536):
        raise _bad("invalid port")
    try:
        normalised = normalize_host(host)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    return normalised, int(port_text) if port_text else int(default_port or 0)


def _parse_headers(lines: list[str]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):  # also refuses obsolete line folding
            raise _bad("malformed header line")
        headers.append((name, value.strip()))
    return headers


def parse_head(head: bytes) -> ProxyRequest:
    """Parse a request head (everything up to and including the blank line)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _bad("non-ASCII request head") from None
    if not text.endswith("\r\n\r\n"):
        raise _bad("incomplete request head")
    request_line, *lines = text[:-4].split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise _bad("malformed request line")
    method, target, version = parts
    headers = _parse_headers(lines)
    if method == "CONNECT":
        host, port = _split_authority(target, None)
        return ProxyRequest(RequestKind.CONNECT, method, host, port)
    if not target.lower().startswith("http://"):
        raise HeadError(405, "egress.method", "only CONNECT and absolute-form http:// requests are proxied")
    url = urlsplit(target)
    if "@" in url.netloc or not url.netloc:
        raise _bad("the target must be http://host[:port]/path, without user info")
    host, port = _split_authority(url.netloc, 80)
    path = url.path or "/"
    if url.query:
        path = f"{path}?{url.query}"
    return ProxyRequest(
        RequestKind.FORWARD, method, host, port, _origin_head(method, path, version, host, port, headers)
    )


def parse_local(head: bytes, own_authorities: frozenset[str], prefix: str) -> LocalRequest | None:
    """The request in ``head`` if it is for the proxy itself and its path starts with ``prefix``:
    origin form, or absolute form whose ``host:port`` is one of ``own_authorities``. None for
    anything else (parse it with :func:`parse_head`); HeadError for a malformed local request."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return None
    request_line, _, rest = text.partition("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    method, target, version = parts
    if target.lower().startswith("http://"):
        url = urlsplit(target)
        if url.netloc.lower() not in own_authorities:
            return None
        path, query = url.path, url.query
    elif target.startswith("/"):
        path, _, query = target.partition("?")
    else:
        return None
    if not path.startswith(prefix):
        return None
    if not text.endswith("\r\n\r\n"):
        raise _bad("incomplete request head")
    lines = rest[:-4].split("\r\n") if rest[:-4] else []
    return LocalRequest(method, path, query, version, tuple(_parse_headers(lines)))


def _origin_head(
    method: str, path: str, version: str, host: str, port: int, headers: list[tuple[str, str]]
) -> bytes:
    listed = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    authority = f"[{host}]" if ":" in host else host
    if port != 80:
        authority = f"{authority}:{port}"
    out = [f"{method} {path} {version}", f"Host: {authority}"]
    out += [f"{name}: {value}" for name, value in headers if name.lower() not in _HOP_BY_HOP | listed]
    out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("ascii")


def render_response(status: int, rule: str, reason: str) -> bytes:
    """A complete ``Connection: close`` response whose body names the rule."""
    body = f"{rule}: {reason}\n".encode("ascii", "replace")
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=us-ascii\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-Outpost-Egress-Rule: {rule}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
