"""Where a credential may be used: its *binding*, and the associated data (AAD) made from it.

* ``static_bearer`` and ``mcp_oauth`` are bound to their MCP server URL, normalized
  (:func:`control_plane.urls.normalize_url`); an ``mcp_oauth`` credential with a refresh
  configuration is also bound to its token endpoint, since the refresh token and client secret
  are sent there.
* ``environment_variable`` is bound to its networking scope: the canonical form of its allowed hosts
  (:func:`canonical_hosts`), or ``*`` when unrestricted.

:func:`credential_aad` turns the binding plus the vault and credential ids into the associated data
of both the payload encryption and the data-key wrap. A ciphertext copied to another row (another
credential, vault, type, server or host list), or a row whose URL was edited in the database, no
longer authenticates.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from control_plane.errors import InvalidRequest
from control_plane.urls import normalize_url

__all__ = [
    "MAX_ALLOWED_HOSTS",
    "canonical_hosts",
    "check_allowed_host",
    "credential_aad",
    "host_allowed",
    "is_loopback_host",
    "upstream_of",
]

MAX_ALLOWED_HOSTS = 16
_AAD_VERSION = 1
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOSTNAME_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_IPV4_RE = re.compile(r"^[0-9.]+$")


def is_loopback_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_allowed_host(entry: str, *, param: str = "allowed_hosts") -> str:
    """One ``allowed_hosts`` entry, lower-cased: a hostname, an IPv4 address or ``*.`` + hostname.
    URLs, ports, paths and IPv6 addresses are refused."""
    host = entry.strip().lower()
    bare = host[2:] if host.startswith("*.") else host
    if _IPV4_RE.fullmatch(bare):
        try:
            ipaddress.IPv4Address(bare)
        except ValueError:
            raise InvalidRequest(f"{param}: {entry!r} is not a valid IPv4 address", param=param) from None
        if bare != host:
            raise InvalidRequest(f"{param}: {entry!r}: a wildcard needs a hostname", param=param)
        return host
    if len(bare) > 253 or not _HOSTNAME_RE.fullmatch(bare):
        raise InvalidRequest(
            f"{param}: {entry!r} is not a hostname, an IPv4 address or a *. wildcard "
            "(URLs, ports, paths and IPv6 addresses are not accepted)",
            param=param,
        )
    return host


def canonical_hosts(networking: Mapping[str, Any]) -> str:
    """``*`` for unrestricted networking, else the sorted, de-duplicated allowed hosts joined by
    commas (entries are already checked and lower-cased)."""
    if networking.get("type") == "unrestricted":
        return "*"
    hosts: Sequence[str] = networking.get("allowed_hosts", [])
    return ",".join(sorted(set(hosts)))


def host_allowed(networking: Mapping[str, Any], host: str) -> bool:
    """Whether a request to ``host`` may carry the secret: an entry matches the host exactly;
    ``*.example.com`` matches any subdomain of ``example.com`` but not ``example.com`` itself."""
    if networking.get("type") == "unrestricted":
        return True
    host = host.strip().lower().rstrip(".")
    for entry in networking.get("allowed_hosts", []):
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                return True
        elif host == entry:
            return True
    return False


def upstream_of(auth: Mapping[str, Any]) -> str:
    """The credential's upstream: the normalized MCP server URL, or ``hosts:`` + canonical hosts."""
    if auth["type"] == "environment_variable":
        return "hosts:" + canonical_hosts(auth["networking"])
    return normalize_url(auth["mcp_server_url"], param="auth.mcp_server_url")


def credential_aad(vault_id: str, credential_id: str, auth: Mapping[str, Any]) -> bytes:
    """Canonical, unambiguous associated data for one credential row (a JSON array, so no field
    can bleed into the next)."""
    refresh = auth.get("refresh") if auth["type"] == "mcp_oauth" else None
    token_endpoint = (
        normalize_url(refresh["token_endpoint"], param="auth.refresh.token_endpoint") if refresh else ""
    )
    fields = [
        "outpost-vault-credential",
        _AAD_VERSION,
        vault_id,
        credential_id,
        auth["type"],
        upstream_of(auth),
        token_endpoint,
    ]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()
