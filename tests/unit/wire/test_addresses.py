"""The shared outbound address checks: classification, numeric spellings, allow-list, resolution."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from outpost_wire.addresses import (
    AddressClass,
    AddressPolicy,
    AddressRefused,
    ResolutionFailed,
    classify,
    literal_address,
    resolve,
)

C = AddressClass

TABLE = [
    ("127.0.0.1", C.LOOPBACK),
    ("127.255.0.9", C.LOOPBACK),
    ("::1", C.LOOPBACK),
    ("0.0.0.0", C.UNSPECIFIED),
    ("0.1.2.3", C.UNSPECIFIED),
    ("::", C.UNSPECIFIED),
    ("169.254.169.254", C.METADATA),
    ("169.254.170.2", C.METADATA),
    ("100.100.100.200", C.METADATA),
    ("fd00:ec2::254", C.METADATA),
    ("169.254.1.1", C.LINK_LOCAL),
    ("fe80::1", C.LINK_LOCAL),
    ("10.1.2.3", C.PRIVATE),
    ("172.16.0.1", C.PRIVATE),
    ("172.31.255.255", C.PRIVATE),
    ("192.168.1.1", C.PRIVATE),
    ("100.64.0.1", C.CGNAT),
    ("100.127.255.254", C.CGNAT),
    ("fc00::1", C.UNIQUE_LOCAL),
    ("fd12:3456::1", C.UNIQUE_LOCAL),
    ("224.0.0.1", C.MULTICAST),
    ("ff02::1", C.MULTICAST),
    ("255.255.255.255", C.RESERVED),
    ("240.0.0.1", C.RESERVED),
    ("192.0.2.1", C.RESERVED),
    ("198.18.0.1", C.RESERVED),
    ("2001:db8::1", C.RESERVED),
    # IPv4 inside IPv6: judged by the embedded address
    ("::ffff:127.0.0.1", C.LOOPBACK),
    ("::ffff:169.254.169.254", C.METADATA),
    ("::ffff:10.0.0.1", C.PRIVATE),
    ("::ffff:8.8.8.8", C.PUBLIC),
    ("64:ff9b::7f00:1", C.LOOPBACK),  # NAT64 of 127.0.0.1
    ("64:ff9b::a9fe:a9fe", C.METADATA),  # NAT64 of 169.254.169.254
    ("64:ff9b::808:808", C.PUBLIC),
    ("64:ff9b:1::1", C.PRIVATE),
    ("2002:7f00:1::1", C.LOOPBACK),  # 6to4 of 127.0.0.1
    ("2002:c0a8:101::1", C.PRIVATE),  # 6to4 of 192.168.1.1
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", C.RESERVED),  # Teredo, public ends
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", C.LOOPBACK),  # Teredo client ~ = 127.0.0.1
    ("::127.0.0.1", C.RESERVED),  # IPv4-compatible, deprecated: refused whatever it embeds
    ("::8.8.8.8", C.RESERVED),
    # public
    ("8.8.8.8", C.PUBLIC),
    ("1.1.1.1", C.PUBLIC),
    ("2606:4700:4700::1111", C.PUBLIC),
]


@pytest.mark.parametrize(("text", "expected"), TABLE)
def test_classify(text: str, expected: AddressClass) -> None:
    assert classify(ipaddress.ip_address(text)) is expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("[::1]", "::1"),
        ("169.254.169.254", "169.254.169.254"),
        ("example.com", None),
        ("cafe", None),
        ("1.2.3.4.5", None),
    ],
)
def test_literal_spellings(host: str, expected: str | None) -> None:
    address = literal_address(host)
    if expected is None:
        assert address is None
        return
    assert address is not None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    assert str(mapped or address) == expected


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "2130706433", "0177.0.0.1", "[::ffff:127.0.0.1]", "0.0.0.0", "localhost", "a.localhost",
     "169.254.169.254", "[fe80::1]"],
)  # fmt: skip
def test_static_check_refuses(host: str) -> None:
    with pytest.raises(AddressRefused) as caught:
        AddressPolicy().check_host(host)
    assert str(caught.value).startswith(host)


def test_static_check_passes_names_and_public_addresses() -> None:
    policy = AddressPolicy()
    for host in ("example.com", "8.8.8.8", "[2606:4700:4700::1111]"):
        policy.check_host(host)


def test_allow_list() -> None:
    policy = AddressPolicy.parse(["127.0.0.0/8", "10.20.0.0/16"])
    for host in ("127.0.0.1", "[::ffff:127.0.0.1]", "10.20.3.4", "localhost"):
        policy.check_host(host)
    with pytest.raises(AddressRefused) as caught:
        policy.check_host("10.21.0.1")
    assert caught.value.rule == "private"
    with pytest.raises(AddressRefused):
        policy.check_host("169.254.169.254")
    with pytest.raises(ValueError, match="CIDR"):
        AddressPolicy.parse(["not-a-net"])


def _resolver(answers: dict[str, Sequence[str]]):  # type: ignore[no-untyped-def]
    calls: list[str] = []

    async def resolver(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        if host not in answers:
            raise OSError("no such host")
        return answers[host]

    return resolver, calls


async def test_resolve_refuses_when_any_address_is_private() -> None:
    resolver, calls = _resolver({"mixed.test": ["93.184.216.34", "10.0.0.5"]})
    with pytest.raises(AddressRefused) as caught:
        await resolve("mixed.test", 443, AddressPolicy(), resolver=resolver)
    assert caught.value.rule == "private"
    assert calls == ["mixed.test"]


async def test_resolve_pins_the_checked_addresses() -> None:
    resolver, calls = _resolver({"ok.test": ["93.184.216.34", "2606:2800:220:1::1", "93.184.216.34"]})
    resolved = await resolve("ok.test", 443, AddressPolicy(), resolver=resolver)
    assert [str(a) for a in resolved.addresses] == ["93.184.216.34", "2606:2800:220:1::1"]
    assert str(resolved.pinned) == "93.184.216.34"
    assert calls == ["ok.test"]  # once


async def test_resolve_literals_without_dns_and_failures() -> None:
    resolver, calls = _resolver({})
    with pytest.raises(AddressRefused) as caught:
        await resolve("[::ffff:127.0.0.1]", 80, AddressPolicy(), resolver=resolver)
    assert caught.value.rule == "loopback"
    with pytest.raises(ResolutionFailed):
        await resolve("nowhere.test", 80, AddressPolicy(), resolver=resolver)
    resolved = await resolve("127.0.0.1", 80, AddressPolicy.parse(["127.0.0.0/8"]), resolver=resolver)
    assert str(resolved.pinned) == "127.0.0.1"
    assert calls == ["nowhere.test"]


async def test_system_resolver_localhost_is_loopback() -> None:
    with pytest.raises(AddressRefused) as caught:
        await resolve("localhost", 80, AddressPolicy())
    assert caught.value.rule == "loopback"


def test_exports() -> None:
    import outpost_wire.addresses as module

    assert sorted(module.__all__) == [
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
