"""Address classification and the proxy's two checks (allowlist, then resolved addresses)."""

from __future__ import annotations

import ipaddress

import pytest

from edge_agent.egress.addresses import IPAddress, refusal_reason
from edge_agent.egress.hosts import Allowlist
from edge_agent.egress.rules import Refusal, check_target, permitted_addresses


def ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.18.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "metadata endpoint"),
        ("169.254.170.2", "metadata endpoint"),
        ("168.63.129.16", "metadata endpoint"),
        ("100.100.100.200", "metadata endpoint"),
        ("fd00:ec2::254", "metadata endpoint"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "not globally routable"),
        ("::ffff:127.0.0.1", "loopback (embedded in ::ffff:7f00:1)"),
        ("::ffff:169.254.169.254", "metadata endpoint (embedded in ::ffff:a9fe:a9fe)"),
        ("64:ff9b::a9fe:a9fe", "metadata endpoint (embedded in 64:ff9b::a9fe:a9fe)"),
        ("2002:7f00:1::", "loopback (embedded in 2002:7f00:1::)"),
    ],
)
def test_non_public_addresses_are_named(address: str, reason: str) -> None:
    assert refusal_reason(ip(address)) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "151.101.0.223", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ip(address)) is None


ALLOW = Allowlist.parse(["allowed.test", "evil.test", "127.0.0.1:8001", "*.cdn.test", "10.0.0.7"])


def test_check_target() -> None:
    assert check_target(ALLOW, "allowed.test", 9999) is None
    assert check_target(ALLOW, "127.0.0.1", 8001) is None
    refusal = check_target(ALLOW, "127.0.0.1", 8002)
    assert refusal == Refusal(403, "egress.allowlist", "127.0.0.1:8002 is not on this sandbox's allowlist")
    assert check_target(ALLOW, "other.test", 80) is not None
    assert check_target(ALLOW, "::1", 80) == Refusal(
        403, "egress.allowlist", "[::1]:80 is not on this sandbox's allowlist"
    )


def test_public_resolution_is_allowed_in_resolver_order() -> None:
    resolved = [ip("203.0.113.1"), ip("8.8.8.8"), ip("1.0.0.1"), ip("8.8.8.8")]
    assert permitted_addresses(ALLOW, "a.cdn.test", 443, resolved) == [ip("8.8.8.8"), ip("1.0.0.1")]


def test_a_name_resolving_to_loopback_is_refused_unless_the_ip_is_listed() -> None:
    refused = permitted_addresses(ALLOW, "evil.test", 8002, [ip("127.0.0.1")])
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.rule) == (403, "egress.resolved_address")
    assert "127.0.0.1 (loopback)" in refused.reason
    # The explicit entry 127.0.0.1:8001 names that address on that port: allowed.
    assert permitted_addresses(ALLOW, "evil.test", 8001, [ip("127.0.0.1")]) == [ip("127.0.0.1")]
    # An explicit IP without a port names every port.
    assert permitted_addresses(ALLOW, "evil.test", 1, [ip("10.0.0.7")]) == [ip("10.0.0.7")]


def test_forbidden_addresses_are_dropped_from_a_mixed_answer() -> None:
    resolved = [ip("169.254.169.254"), ip("8.8.8.8"), ip("::ffff:10.0.0.1")]
    assert permitted_addresses(ALLOW, "evil.test", 80, resolved) == [ip("8.8.8.8")]
    only_bad = permitted_addresses(ALLOW, "evil.test", 80, [ip("169.254.169.254"), ip("10.1.1.1")])
    assert isinstance(only_bad, Refusal) and "metadata endpoint" in only_bad.reason


def test_ip_literal_requests_stand_on_their_entry_and_empty_answers_fail() -> None:
    assert permitted_addresses(ALLOW, "127.0.0.1", 8001, []) == [ip("127.0.0.1")]
    empty = permitted_addresses(ALLOW, "allowed.test", 80, [])
    assert isinstance(empty, Refusal) and empty.rule == "egress.resolve"
