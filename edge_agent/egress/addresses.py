"""Which resolved addresses a hostname entry may lead to.

A hostname in an allowlist says "this service", not "whatever address its DNS says today". DNS is
controlled by whoever controls the name, so a name that resolves to loopback, a private range or
a cloud metadata endpoint is refused unless the allowlist names that IP literal explicitly. IPv6
forms that embed an IPv4 address (mapped, NAT64, 6to4, Teredo) are judged by the embedded address.
Pure functions; no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import TypeAlias

__all__ = ["METADATA_ADDRESSES", "IPAddress", "parse_address", "refusal_reason"]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle ...
        "169.254.170.2",  # AWS ECS task credentials
        "168.63.129.16",  # Azure wire server (a public address!)
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
    )
)

_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def parse_address(text: str) -> IPAddress:
    """An IP address from a resolver's text (an IPv6 zone suffix is dropped)."""
    return ipaddress.ip_address(text.partition("%")[0])


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` may not be reached through a hostname entry, or None if it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = refusal_reason(embedded)
            return None if reason is None else f"{reason} (embedded in {address})"
    if address in METADATA_ADDRESSES:
        return "metadata endpoint"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "not globally routable"
    return None
