"""Outbound address checks, shared by both daemons (stdlib only, no HTTP library).

Both sides dial URLs that a user or the control plane names: the control plane an OAuth token
endpoint or an MCP server, the edge a session's repository. Such a URL must not reach the host's
own services, its cloud metadata endpoint or the private network around it. This module says
which addresses are *not public* and why (:func:`classify`), and resolves a host once, refusing it
when any of its addresses is not public (:func:`resolve`); the caller then dials the returned,
checked address (*pinned*), so a DNS answer that changes between the check and the connect
(DNS rebinding) cannot swap it.

An operator may allow networks (:class:`AddressPolicy` ``allow_networks``, CIDR strings): an
address inside one is allowed whatever its class (e.g. ``10.20.0.0/16`` for an internal OAuth
server, ``127.0.0.0/8`` in tests).

Classes (first match wins; ``rule`` is the name errors carry):

============================ =====================================================================
``unspecified``              ``0.0.0.0/8``, ``::``
``loopback``                 ``127.0.0.0/8``, ``::1``
``metadata``                 cloud metadata: ``169.254.169.254``, ``169.254.170.2``,
                             ``100.100.100.200``, ``fd00:ec2::254``
``link-local``               ``169.254.0.0/16``, ``fe80::/10``
``private``                  RFC 1918 ``10/8``, ``172.16/12``, ``192.168/16``; ``fec0::/10``;
                             local-use NAT64 ``64:ff9b:1::/48``
``cgnat``                    shared address space ``100.64.0.0/10``
``unique-local``             IPv6 ULA ``fc00::/7``
``multicast``                ``224.0.0.0/4``, ``ff00::/8``
``reserved``                 everything else that is not globally routable (``240/4``, broadcast,
                             documentation, benchmarking, ``::/96`` IPv4-compatible, Teredo ...)
============================ =====================================================================

Addresses that embed an IPv4 address are judged by it: IPv4-mapped ``::ffff:0:0/96``, NAT64
``64:ff9b::/96``, 6to4 ``2002::/16`` and Teredo ``2001::/32`` (server and client). Numeric host
spellings that the C resolver accepts (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) are read as the
addresses they are (:func:`literal_address`), so a static check sees through them too.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AddressClass",
    "AddressPolicy",
    "AddressRefused",
    "IPAddress",
    "ResolutionFailed",
    "Resolved",
    "Resolver",
    "classify",
    "embedded_ipv4",
    "literal_address",
    "pinned_connect",
    "resolve",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``resolver(host, port)``: the addresses ``host`` resolves to, as text (tests inject fakes)."""

_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)
_LOCALHOST_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class AddressClass(enum.Enum):
    """Why an address is not public (``PUBLIC`` when it is). The value is the rule's name."""

    PUBLIC = "public"
    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    METADATA = "metadata"
    LINK_LOCAL = "link-local"
    PRIVATE = "private"
    CGNAT = "cgnat"
    UNIQUE_LOCAL = "unique-local"
    MULTICAST = "multicast"
    RESERVED = "reserved"

    @property
    def describe(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    AddressClass.PUBLIC: "a public address",
    AddressClass.UNSPECIFIED: "an unspecified address (0.0.0.0 or ::)",
    AddressClass.LOOPBACK: "a loopback address",
    AddressClass.METADATA: "a cloud metadata endpoint",
    AddressClass.LINK_LOCAL: "a link-local address",
    AddressClass.PRIVATE: "a private-network address",
    AddressClass.CGNAT: "a carrier-grade NAT (shared) address",
    AddressClass.UNIQUE_LOCAL: "an IPv6 unique-local address",
    AddressClass.MULTICAST: "a multicast address",
    AddressClass.RESERVED: "a reserved, not globally routable address",
}

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network
_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_RULES_V4: tuple[tuple[ipaddress.IPv4Network, AddressClass], ...] = (
    (_V4("0.0.0.0/8"), AddressClass.UNSPECIFIED),
    (_V4("127.0.0.0/8"), AddressClass.LOOPBACK),
    (_V4("169.254.0.0/16"), AddressClass.LINK_LOCAL),
    (_V4("10.0.0.0/8"), AddressClass.PRIVATE),
    (_V4("172.16.0.0/12"), AddressClass.PRIVATE),
    (_V4("192.168.0.0/16"), AddressClass.PRIVATE),
    (_V4("100.64.0.0/10"), AddressClass.CGNAT),
    (_V4("224.0.0.0/4"), AddressClass.MULTICAST),
    (_V4("240.0.0.0/4"), AddressClass.RESERVED),  # incl. 255.255.255.255
    (_V4("192.0.0.0/24"), AddressClass.RESERVED),
    (_V4("192.0.2.0/24"), AddressClass.RESERVED),
    (_V4("198.18.0.0/15"), AddressClass.RESERVED),
    (_V4("198.51.100.0/24"), AddressClass.RESERVED),
    (_V4("203.0.113.0/24"), AddressClass.RESERVED),
    (_V4("192.88.99.0/24"), AddressClass.RESERVED),
)
_RULES_V6: tuple[tuple[ipaddress.IPv6Network, AddressClass], ...] = (
    (_V6("::/128"), AddressClass.UNSPECIFIED),
    (_V6("::1/128"), AddressClass.LOOPBACK),
    (_V6("fe80::/10"), AddressClass.LINK_LOCAL),
    (_V6("fec0::/10"), AddressClass.PRIVATE),
    (_V6("64:ff9b:1::/48"), AddressClass.PRIVATE),
    (_V6("fc00::/7"), AddressClass.UNIQUE_LOCAL),
    (_V6("ff00::/8"), AddressClass.MULTICAST),
    (_V6("::/96"), AddressClass.RESERVED),  # IPv4-compatible (deprecated)
)
_NAT64 = _V6("64:ff9b::/96")
_SIX_TO_FOUR = _V6("2002::/16")
_TEREDO = _V6("2001::/32")


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address stands for (mapped, NAT64, 6to4, Teredo); ``()`` if none."""
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address in _NAT64:
        return (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF),)
    if address in _SIX_TO_FOUR and address.sixtofour is not None:
        return (address.sixtofour,)
    if address in _TEREDO and address.teredo is not None:
        return address.teredo
    return ()


def classify(address: IPAddress) -> AddressClass:
    """Why ``address`` is not public, or ``PUBLIC``."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(address.compressed.partition("%")[0])
    if address in _METADATA:
        return AddressClass.METADATA
    if isinstance(address, ipaddress.IPv4Address):
        for network, kind in _RULES_V4:
            if address in network:
                return kind
        return AddressClass.PUBLIC if address.is_global else AddressClass.RESERVED
    embedded = embedded_ipv4(address)
    if embedded:
        for inner in embedded:
            kind = classify(inner)
            if kind is not AddressClass.PUBLIC:
                return kind
        if address.ipv4_mapped is not None or address in _NAT64 or address in _SIX_TO_FOUR:
            return AddressClass.PUBLIC
        return AddressClass.RESERVED  # Teredo: a tunnel to a public host is still not a host
    for network6, kind in _RULES_V6:
        if address in network6:
            return kind
    return AddressClass.PUBLIC if address.is_global else AddressClass.RESERVED


def literal_address(host: str) -> IPAddress | None:
    """``host`` (as in a URL, brackets allowed) read as an IP address, in any spelling the C
    resolver takes as numeric (``2130706433``, ``0177.0.0.1``, ``0x7f.1``); None for a name."""
    text = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


class AddressRefused(Exception):
    """A host resolves to (or is) an address the policy does not allow. ``rule`` names its class
    (``loopback``, ``metadata`` ...); the message names the host and the address."""

    def __init__(self, host: str, address: IPAddress, kind: AddressClass) -> None:
        self.host = host
        self.address = address
        self.kind = kind
        self.rule = kind.value
        shown = host if host.strip("[]") == str(address) else f"{host} ({address})"
        super().__init__(f"{shown} is {kind.describe}")


class ResolutionFailed(Exception):
    """The host could not be resolved (no address, or the resolver failed)."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        super().__init__(f"{host} could not be resolved ({reason})")


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which addresses may be dialled: public ones, and any inside ``allow_networks``."""

    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, networks: Iterable[str]) -> AddressPolicy:
        """From CIDR strings (``10.0.0.0/8``, ``fd00::/8``; a bare address is one host);
        ValueError names a bad entry."""
        parsed = []
        for entry in networks:
            try:
                parsed.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise ValueError(f"{entry!r} is not a network in CIDR notation") from None
        return cls(tuple(parsed))

    def allowed_by_operator(self, address: IPAddress) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(a.version == n.version and a in n for a in candidates for n in self.allow_networks)

    def refusal(self, host: str, address: IPAddress) -> AddressRefused | None:
        """The refusal for dialling ``address`` (for ``host``), or None when it is allowed."""
        kind = classify(address)
        if kind is AddressClass.PUBLIC or self.allowed_by_operator(address):
            return None
        return AddressRefused(host, address, kind)

    def check_host(self, host: str) -> None:
        """A static check of a URL's host, without DNS: a numeric host must be allowed, and the
        ``localhost`` names are loopback. Raises :class:`AddressRefused`."""
        address = literal_address(host)
        name = host.strip().lower().rstrip(".")
        if address is None and (name in _LOCALHOST_NAMES or name.endswith(".localhost")):
            address = ipaddress.IPv4Address("127.0.0.1")
        if address is not None:
            refused = self.refusal(host, address)
            if refused is not None:
                raise refused


@dataclass(frozen=True, slots=True)
class Resolved:
    """A host resolved once and checked: dial ``addresses`` (in order), never the name again."""

    host: str
    port: int
    addresses: tuple[IPAddress, ...]

    @property
    def pinned(self) -> IPAddress:
        return self.addresses[0]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """``getaddrinfo`` in the loop's executor (never on the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve(
    host: str, port: int, policy: AddressPolicy, *, resolver: Resolver = system_resolver
) -> Resolved:
    """Resolve ``host`` once; :class:`AddressRefused` if ANY of its addresses is not allowed,
    :class:`ResolutionFailed` if it has none."""
    bare = host.strip().strip("[]")
    literal = literal_address(bare)
    if literal is not None:
        texts: Sequence[str] = [str(literal)]
    else:
        try:
            texts = await resolver(bare, port)
        except (OSError, UnicodeError) as exc:
            raise ResolutionFailed(host, type(exc).__name__) from None
    addresses: list[IPAddress] = []
    for text in texts:
        try:
            address = ipaddress.ip_address(text.partition("%")[0])
        except ValueError:
            raise ResolutionFailed(host, f"the resolver answered {text!r}") from None
        refused = policy.refusal(host, address)
        if refused is not None:
            raise refused
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ResolutionFailed(host, "no address")
    return Resolved(host, port, tuple(addresses))


class _Connector(Protocol):
    """An ``httpcore``/``httpcore2`` network backend (duck-typed: this module imports neither)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any: ...


async def pinned_connect(
    inner: _Connector,
    pin: Callable[[str, int], Awaitable[Resolved]],
    connect_errors: tuple[type[BaseException], ...],
    host: str,
    port: int,
    connect_timeout_s: float | None,
    local_address: str | None,
    socket_options: Iterable[Any] | None,
) -> Any:
    """The body of a pinning network backend's ``connect_tcp``: ``pin`` resolves and checks the
    host once (raising its refusal), then ``inner`` connects to the checked addresses in order
    (the first that answers). TLS above it still names ``host`` (SNI, certificate check)."""
    resolved = await pin(host, port)
    options = list(socket_options) if socket_options is not None else None
    failure: BaseException | None = None
    for address in resolved.addresses:
        try:
            return await inner.connect_tcp(
                str(address),
                port,
                timeout=connect_timeout_s,
                local_address=local_address,
                socket_options=options,
            )
        except connect_errors as exc:
            failure = exc
    assert failure is not None
    raise failure
