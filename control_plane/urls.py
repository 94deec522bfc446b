"""The control plane's one URL normaliser, below the sessions and the vault that both use it.

:func:`normalize_url` gives the canonical form of an ``http``/``https`` URL, used to store a
session's git repository URL (:mod:`control_plane.sessions.repositories`) and to bind and match
vault credentials by MCP server URL and token endpoint (:mod:`control_plane.vault.binding`; that
form is part of a credential's associated data, so for every URL accepted before it must not
change). Rules:

* surrounding whitespace is ignored; at most :data:`MAX_URL_CHARS` characters;
* the scheme is ``http`` or ``https``; scheme and host are lower-cased; an IPv6 host keeps its
  brackets; the default port (80, 443) is dropped, any other port kept;
* user info (``user:password@``) is refused: credentials never travel inside a URL;
* the path is kept exactly (case, trailing slash, percent escapes); an empty path becomes ``/``;
* the query is kept and the fragment dropped, or, with ``allow_query=False`` (git URLs), either
  one is refused.

The two copies this replaces differed in one more rule, and the safer one was kept: whitespace or
a control character *inside* the URL is refused (the repositories did this; the vault's copy let
``urlsplit`` silently delete tabs and newlines, so ``https://ex\\nample.com`` matched
``https://example.com``).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit, urlunsplit

from control_plane.errors import InvalidRequest

__all__ = ["MAX_URL_CHARS", "normalize_url"]

MAX_URL_CHARS: Final = 2048
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def normalize_url(url: str, *, param: str = "url", allow_query: bool = True) -> str:
    """The canonical form of ``url`` (see the module docstring); :class:`InvalidRequest` naming
    ``param`` when it is not an acceptable URL."""
    value = url.strip()
    if len(value) > MAX_URL_CHARS:
        raise InvalidRequest(f"{param}: at most {MAX_URL_CHARS} characters", param=param)
    if any(ord(c) < 33 or c == "\x7f" for c in value):
        raise InvalidRequest(f"{param}: must not contain whitespace or control characters", param=param)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise InvalidRequest(f"{param}: not a valid URL", param=param) from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidRequest(f"{param}: must be an http or https URL", param=param)
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest(f"{param}: must not carry credentials (user info)", param=param)
    if not allow_query and (parts.query or parts.fragment):
        raise InvalidRequest(f"{param}: must not have a query or fragment", param=param)
    host = (parts.hostname or "").lower()
    if not host:
        raise InvalidRequest(f"{param}: the URL has no host", param=param)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
