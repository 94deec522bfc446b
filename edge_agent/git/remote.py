"""Repository URLs (sans-I/O): what the edge accepts as a remote, the relay URL the sandbox's
clone points at instead, and redaction of secrets from text.

A remote is an ``http`` or ``https`` URL with a host, without user info, query or fragment (a
credential in the URL would end up in the clone's config). Its *authority* is ``host`` or
``host:port`` with the scheme's default port left out; it selects the edge's per-host credential.

The relay URL is ``<proxy>/git/<session token>/<repository id>``: the sandbox's ``origin``. It
carries no credential to the remote, only the sandbox-scoped token that the relay checks together
with the sandbox's source address.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "RELAY_PREFIX",
    "WORKSPACE",
    "RelayTarget",
    "RemoteUrl",
    "parse_relay_path",
    "parse_remote",
    "redact",
    "relay_url",
    "workspace_relative",
]

WORKSPACE = "/workspace"
RELAY_PREFIX = "/git/"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
# The smart-HTTP endpoints of a repository; the dumb protocol is not relayed.
_SERVICES = {
    "/info/refs": "GET",
    "/git-upload-pack": "POST",
    "/git-receive-pack": "POST",
}
_REDACTED = "***"


@dataclass(frozen=True)
class RemoteUrl:
    """A parsed remote (see the module docstring)."""

    scheme: str
    host: str  # lower-case; an IPv6 address without brackets
    port: int | None  # None = the scheme's default
    path: str  # as given, at least "/"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port is not None else host

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"

    def endpoint(self, service_path: str) -> str:
        """The URL of a smart-HTTP endpoint (``/info/refs`` ...) of this repository."""
        return self.url.rstrip("/") + service_path


def parse_remote(url: str) -> RemoteUrl:
    """Parse and check a remote URL; ValueError (with a message naming the rule) if refused."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError("not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("only http:// and https:// repository URLs are supported")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the URL must not carry user info (credentials belong in the vault or the edge)")
    if parts.query or parts.fragment:
        raise ValueError("the URL must not have a query or fragment")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError("the URL has no host")
    if port == _DEFAULT_PORTS[scheme]:
        port = None
    return RemoteUrl(scheme, host, port, parts.path or "/")


def relay_url(base: str, session_token: str, repository_id: str) -> str:
    """The URL the sandbox's clone uses as ``origin`` (``base`` is the proxy's ``http://h:p``)."""
    return f"{base.rstrip('/')}{RELAY_PREFIX}{session_token}/{repository_id}"


@dataclass(frozen=True)
class RelayTarget:
    """A request path the relay serves: whose, which repository, which endpoint."""

    session_token: str
    repository_id: str
    service_path: str  # one of /info/refs, /git-upload-pack, /git-receive-pack
    method: str  # the method that endpoint takes


def parse_relay_path(path: str) -> RelayTarget | None:
    """``/git/<token>/<id>/<endpoint>`` (the query is not part of ``path``), or None."""
    if not path.startswith(RELAY_PREFIX):
        return None
    token, sep, rest = path[len(RELAY_PREFIX) :].partition("/")
    repository_id, sep2, endpoint = rest.partition("/")
    if not (sep and sep2 and _ID.match(token) and _ID.match(repository_id)):
        return None
    method = _SERVICES.get("/" + endpoint)
    if method is None:
        return None
    return RelayTarget(token, repository_id, "/" + endpoint, method)


def workspace_relative(mount_path: str) -> str:
    """``mount_path`` relative to the workspace volume (``/workspace/a/b`` -> ``a/b``).

    Repositories go into the volume only, so they survive the container; ValueError otherwise.
    """
    if not mount_path.startswith("/") or posixpath.normpath(mount_path) != mount_path:
        raise ValueError(f"mount_path {mount_path!r} is not an absolute, normalized path")
    relative = posixpath.relpath(mount_path, WORKSPACE)
    if relative == "." or relative.startswith("..") or any(ord(c) < 32 for c in mount_path):
        raise ValueError(f"mount_path {mount_path!r} must be a directory inside {WORKSPACE}")
    return relative


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    return text
