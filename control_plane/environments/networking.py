"""An environment's sandbox networking, as the API stores it and as the edge is asked for it.

``config: {"type": "self_hosted", "networking": ...}`` where networking is one of
``{"type": "none"}`` (the default: no network at all), ``{"type": "limited", "allowed_hosts":
[...]}`` (only through the edge's egress proxy, only to those hosts) or ``{"type":
"unrestricted"}``. The shape follows the SDK's ``cloud`` networking. The edge's local policy caps
whatever is asked: it may refuse a mode or a host, naming its rule.
"""

from __future__ import annotations

import re
from typing import Any

from control_plane.errors import InvalidRequest
from outpost_wire.frames import Egress

__all__ = ["MAX_ALLOWED_HOSTS", "egress_of", "validate_networking"]

MAX_ALLOWED_HOSTS = 256
_HOST = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(:\d{1,5})?$")


def validate_networking(value: Any) -> dict[str, Any]:
    """The normalized networking object; raises InvalidRequest naming the bad field."""
    if value is None:
        return {"type": "none"}
    if not isinstance(value, dict):
        raise InvalidRequest("config.networking must be an object", param="config.networking")
    kind = value.get("type")
    extra = sorted(set(value) - {"type", "allowed_hosts"})
    if extra:
        raise InvalidRequest(
            f"config.networking: unknown field(s) {', '.join(extra)}", param="config.networking"
        )
    if kind in ("none", "unrestricted"):
        if value.get("allowed_hosts"):
            raise InvalidRequest(
                f"config.networking.allowed_hosts is only for type 'limited', not {kind!r}",
                param="config.networking.allowed_hosts",
            )
        return {"type": kind}
    if kind != "limited":
        raise InvalidRequest(
            "config.networking.type must be 'none', 'limited' or 'unrestricted'",
            param="config.networking.type",
        )
    hosts = value.get("allowed_hosts")
    if not isinstance(hosts, list) or not hosts or len(hosts) > MAX_ALLOWED_HOSTS:
        raise InvalidRequest(
            f"config.networking.allowed_hosts must list 1 to {MAX_ALLOWED_HOSTS} hosts",
            param="config.networking.allowed_hosts",
        )
    for host in hosts:
        if not isinstance(host, str) or not _HOST.match(host):
            raise InvalidRequest(
                f"config.networking.allowed_hosts: {host!r} is not a host name, *.domain or IP "
                "(with an optional :port)",
                param="config.networking.allowed_hosts",
            )
    return {"type": "limited", "allowed_hosts": list(dict.fromkeys(hosts))}


def egress_of(config: dict[str, Any] | None) -> Egress:
    """The wire form of an environment config's networking."""
    networking = (config or {}).get("networking") or {"type": "none"}
    kind = networking.get("type", "none")
    if kind == "limited":
        return Egress(mode="allowlist", allowed_hosts=tuple(networking.get("allowed_hosts", ())))
    if kind == "unrestricted":
        return Egress(mode="unrestricted")
    return Egress()
