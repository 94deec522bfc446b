"""Allowlist entries: parsing, normalising and matching hosts, ports and IP literals.

An entry is one of::

    example.com          exactly this hostname, any port
    *.example.com        any subdomain of example.com (not example.com itself), any port
    203.0.113.7          exactly this IPv4 address, any port
    example.com:443      any of the above, restricted to one port

Hostnames are compared in lower case without a trailing dot; only ASCII (IDNA/punycode) names are
accepted. Anything that the C library would read as a number (``127.1``, ``0x7f000001``,
``2130706433``) is refused instead of being treated as a name, so an entry can never mean an
address by accident. Pure functions; no I/O.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "Allowlist",
    "HostPattern",
    "PatternKind",
    "normalize_host",
    "parse_pattern",
]

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_MAX_HOST = 253


class PatternKind(enum.Enum):
    NAME = "name"  # exactly this hostname
    WILDCARD = "wildcard"  # strict subdomains of ``host``
    ADDRESS = "address"  # exactly this IPv4 address


def _numeric(text: str) -> bool:
    """True if the C resolver would read ``text`` as an IPv4 address (any of its spellings)."""
    try:
        socket.inet_aton(text)
    except OSError:
        return False
    return True


def normalize_host(text: str) -> str:
    """The canonical form of a requested host: a dotted-quad IPv4, an IPv6 address (compressed,
    without brackets) or a lower-case hostname. Raises ValueError for anything else."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(host[1:-1]))
        except ValueError:
            raise ValueError(f"invalid IPv6 literal {text!r}") from None
    if ":" in host:
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            raise ValueError(f"invalid host {text!r}") from None
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > _MAX_HOST or not name.isascii():
        raise ValueError(f"invalid hostname {text!r}")
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"invalid hostname {text!r}")
    if labels[-1].isdigit() or _numeric(name):
        raise ValueError(f"{text!r} is a numeric address in disguise, not a hostname")
    return name


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _parse_port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"invalid port in {whole!r}")
    return int(text)


@dataclass(frozen=True)
class HostPattern:
    """One parsed allowlist entry. ``host`` is the name, the wildcard's parent domain, or the
    IPv4 address; ``port`` None means any port."""

    kind: PatternKind
    host: str
    port: int | None = None

    def __str__(self) -> str:
        base = f"*.{self.host}" if self.kind is PatternKind.WILDCARD else self.host
        return base if self.port is None else f"{base}:{self.port}"

    def _port_ok(self, port: int) -> bool:
        return self.port is None or self.port == port

    def matches(self, host: str, port: int) -> bool:
        """Does this entry allow ``host:port``? ``host`` must be normalised."""
        if not self._port_ok(port):
            return False
        if self.kind is PatternKind.WILDCARD:
            return host.endswith("." + self.host) and not _is_ipv4(host)
        return host == self.host

    def covers(self, other: HostPattern) -> bool:
        """Does this entry allow everything ``other`` allows? (policy cap ⊇ requested entry)"""
        if self.port is not None and other.port != self.port:
            return False
        if self.kind is PatternKind.WILDCARD:
            if other.kind is PatternKind.ADDRESS:
                return False
            return other.host.endswith("." + self.host) or (
                other.kind is PatternKind.WILDCARD and other.host == self.host
            )
        return other.kind is self.kind and other.host == self.host


def parse_pattern(text: str) -> HostPattern:
    """Parse one allowlist entry; raises ValueError naming the entry."""
    entry = text.strip()
    port: int | None = None
    host = entry
    if entry.count(":") == 1:
        host, _, port_text = entry.partition(":")
        port = _parse_port(port_text, entry)
    elif ":" in entry:
        raise ValueError(f"IPv6 entries are not supported: {entry!r}")
    if host.startswith("*."):
        parent = host[2:]
        if parent.startswith("*") or not parent:
            raise ValueError(f"invalid wildcard entry {entry!r}")
        name = normalize_host(parent)
        if _is_ipv4(name):
            raise ValueError(f"a wildcard needs a domain, not an address: {entry!r}")
        return HostPattern(PatternKind.WILDCARD, name, port)
    if "*" in host:
        raise ValueError(f"'*' is only allowed as the first label ('*.example.com'): {entry!r}")
    name = normalize_host(host)
    kind = PatternKind.ADDRESS if _is_ipv4(name) else PatternKind.NAME
    return HostPattern(kind, name, port)


@dataclass(frozen=True)
class Allowlist:
    """A parsed, deduplicated, sorted set of entries."""

    patterns: tuple[HostPattern, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        return cls(tuple(sorted({parse_pattern(entry) for entry in entries}, key=str)))

    def entries(self) -> tuple[str, ...]:
        """The canonical text of each entry (stable order)."""
        return tuple(str(pattern) for pattern in self.patterns)

    def permits(self, host: str, port: int) -> bool:
        """Is the requested (normalised) ``host:port`` named by some entry?"""
        return any(pattern.matches(host, port) for pattern in self.patterns)

    def names_address(self, address: str, port: int) -> bool:
        """Is ``address:port`` named by an IP-literal entry (the only way to reach a private one)?"""
        return any(
            pattern.kind is PatternKind.ADDRESS and pattern.matches(address, port)
            for pattern in self.patterns
        )

    def uncovered(self, requested: Allowlist) -> list[HostPattern]:
        """Entries of ``requested`` that no entry of this (cap) list covers."""
        return [want for want in requested.patterns if not any(cap.covers(want) for cap in self.patterns)]
