"""The proxy's decisions, as pure functions: may this session reach ``host:port``, and which of the
addresses the name resolved to may it actually connect to?

Two checks, in order:

1. ``egress.allowlist`` — the requested host (as the client wrote it) and port must match an entry.
2. ``egress.resolved_address`` — each resolved address must be public, or be named by an IP-literal
   entry for that port. The proxy then connects to one of the addresses that passed, by address:
   the name is never resolved again between the check and the connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .addresses import IPAddress, parse_address, refusal_reason
from .hosts import Allowlist

__all__ = ["Refusal", "check_target", "literal_address", "permitted_addresses"]


@dataclass(frozen=True)
class Refusal:
    """An HTTP status, the rule that refused, and a short reason safe to show the sandbox."""

    status: int
    rule: str
    reason: str


def literal_address(host: str) -> IPAddress | None:
    """``host`` (normalised) as an address, if it is an IP literal rather than a name."""
    try:
        return parse_address(host)
    except ValueError:
        return None


def check_target(allowlist: Allowlist, host: str, port: int) -> Refusal | None:
    """Check 1: is the requested ``host:port`` on the session's allowlist?"""
    if allowlist.permits(host, port):
        return None
    return Refusal(403, "egress.allowlist", f"{_authority(host, port)} is not on this sandbox's allowlist")


def permitted_addresses(
    allowlist: Allowlist, host: str, port: int, resolved: Sequence[IPAddress]
) -> list[IPAddress] | Refusal:
    """Check 2: the resolved addresses that may be connected to, in resolver order (or a refusal).

    An IP-literal request was allowed by check 1 only through an IP-literal entry, so it stands.
    """
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    allowed: list[IPAddress] = []
    refused: list[str] = []
    for address in dict.fromkeys(resolved):
        reason = refusal_reason(address)
        if reason is None or allowlist.names_address(str(address), port):
            allowed.append(address)
        else:
            refused.append(f"{address} ({reason})")
    if allowed:
        return allowed
    if not refused:
        return Refusal(502, "egress.resolve", f"{host} did not resolve to any address")
    return Refusal(
        403,
        "egress.resolved_address",
        f"{host} resolves to {', '.join(refused)}, which only an explicit IP entry may allow",
    )


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
