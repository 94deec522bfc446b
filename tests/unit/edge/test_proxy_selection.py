"""Proxy resolution (HTTPS_PROXY / NO_PROXY / config override) and the ``transport: auto`` state
machine with its memory on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.connection.proxy import no_proxy_matches, parse_proxy_url, resolve_proxy
from edge_agent.connection.selection import (
    CHOICE_FILE,
    Choice,
    TransportKind,
    TransportSelector,
    load_choice,
    save_choice,
)
from edge_agent.connection.ws_transport import tunnel_ws_url
from edge_agent.errors import ConfigError

G, W = TransportKind.GRPC, TransportKind.WEBSOCKET


# -- NO_PROXY ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "expected"),
    [
        ("cp.example.com", 443, "example.com", True),
        ("cp.example.com", 443, ".example.com", True),
        ("cp.example.com", 443, "*.example.com", True),
        ("example.com", 443, ".example.com", True),
        ("badexample.com", 443, "example.com", False),
        ("CP.Example.COM", 443, "example.com", True),
        ("cp.example.com", 443, "other.org, example.com", True),
        ("cp.example.com", 443, "other.org example.com", True),
        ("cp.example.com", 443, "example.com:8443", False),
        ("cp.example.com", 8443, "example.com:8443", True),
        ("anything", 1, "*", True),
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("127.0.0.1", 8080, "127.0.0.1", True),
        ("127.0.0.1", 8080, "localhost", False),
        ("::1", 443, "::1", True),
        ("[::1]", 443, "[::1]:443", True),
        ("cp.example.com", 443, "", False),
    ],
)
def test_no_proxy_matching(host: str, port: int, no_proxy: str, expected: bool) -> None:
    assert no_proxy_matches(host, port, no_proxy) is expected


# -- resolution ---------------------------------------------------------------------------------------
def test_env_proxy_lowercase_wins_and_no_proxy_applies() -> None:
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "NO_PROXY": "internal"}
    proxy = resolve_proxy("cp.example.com", 443, override=None, env=env)
    assert proxy is not None and (proxy.host, proxy.port) == ("lower", 2)
    assert resolve_proxy("cp.internal", 443, override=None, env=env) is None
    assert resolve_proxy("cp", 443, override=None, env={"no_proxy": "", "NO_PROXY": "*", **env}) is not None


def test_http_proxy_alone_is_not_used() -> None:
    assert resolve_proxy("cp.example.com", 443, override=None, env={"HTTP_PROXY": "http://p:1"}) is None


def test_config_override_beats_the_environment() -> None:
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    proxy = resolve_proxy("cp", 443, override="http://cfg:3128", env=env)
    assert proxy is not None and proxy.host == "cfg"
    assert resolve_proxy("cp", 443, override="none", env=env) is None


def test_proxy_url_credentials_are_parsed_and_redacted() -> None:
    proxy = parse_proxy_url("http://al%40ice:p%3Ass@proxy.local:3128")
    assert (proxy.username, proxy.password) == ("al@ice", "p:ss")
    assert proxy.redacted == "http://al@ice:***@proxy.local:3128"
    assert "p:ss" not in repr(proxy) and "p%3Ass" not in repr(proxy)
    assert parse_proxy_url("proxy.local").port == 80


@pytest.mark.parametrize("url", ["https://proxy:443", "socks5://proxy:1080", "http://", "http://h:99999"])
def test_unsupported_proxy_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_proxy_url(url)


def test_ws_url_is_derived_from_the_http_base() -> None:
    assert tunnel_ws_url("http://127.0.0.1:8080") == "ws://127.0.0.1:8080/v1/tunnel/ws"
    assert tunnel_ws_url("https://cp.example.com/outpost/") == "wss://cp.example.com/outpost/v1/tunnel/ws"


# -- the auto state machine ---------------------------------------------------------------------------
def test_fixed_modes_dial_one_transport() -> None:
    assert TransportSelector("grpc", Choice(W, 0)).plan(0) == (G,)
    assert TransportSelector("websocket").plan(0) == (W,)
    assert TransportSelector("grpc").succeeded(G, 0) is None


def test_auto_probes_grpc_first_then_pins_the_winner() -> None:
    selector = TransportSelector("auto")
    assert selector.plan(100) == (G, W)
    selector.failed(G)
    assert selector.succeeded(W, 100) == Choice(W, 100)
    assert selector.plan(101) == (W,)
    assert selector.succeeded(W, 102) is None  # unchanged: nothing to save


def test_auto_reprobes_after_repeated_failures_of_the_pinned_transport() -> None:
    selector = TransportSelector("auto", Choice(W, 0), reprobe_after_failures=3)
    for _ in range(2):
        selector.failed(W)
        assert selector.plan(1) == (W,)
    selector.failed(W)
    assert selector.plan(1) == (G, W)
    assert selector.succeeded(G, 2) == Choice(G, 2)


def test_a_success_resets_the_failure_count() -> None:
    selector = TransportSelector("auto", Choice(W, 0), reprobe_after_failures=2)
    selector.failed(W)
    selector.succeeded(W, 1)
    selector.failed(W)
    assert selector.plan(1) == (W,)


def test_an_old_choice_is_reprobed() -> None:
    selector = TransportSelector("auto", Choice(W, 0), memory_s=100)
    assert selector.plan(99) == (W,)
    assert selector.plan(100) == (G, W)


def test_the_choice_survives_a_restart(tmp_path: Path) -> None:
    assert load_choice(tmp_path) is None
    save_choice(tmp_path, Choice(W, 123.0))
    assert (tmp_path / CHOICE_FILE).stat().st_mode & 0o077 == 0
    assert load_choice(tmp_path) == Choice(W, 123.0)
    assert TransportSelector("auto", load_choice(tmp_path)).plan(124) == (W,)


def test_a_corrupt_choice_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / CHOICE_FILE).write_text("{not json")
    assert load_choice(tmp_path) is None
    (tmp_path / CHOICE_FILE).write_text('{"version": 1, "transport": "carrier-pigeon", "since": 1}')
    assert load_choice(tmp_path) is None


def test_connection_package_exports() -> None:
    import control_plane.tunnel
    import edge_agent.connection

    assert set(edge_agent.connection.__all__) == {
        "Backoff",
        "Dialer",
        "GrpcTransport",
        "Link",
        "LinkState",
        "ProxyConfig",
        "RequestHandler",
        "Transport",
        "TransportError",
        "TransportKind",
        "TransportSelector",
        "WsTransport",
        "connect_grpc",
        "connect_ws",
        "resolve_proxy",
    }
    assert {"WS_TUNNEL_PATH", "WsTunnelEndpoint", "GrpcTunnelServer"} <= set(control_plane.tunnel.__all__)
