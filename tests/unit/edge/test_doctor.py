"""``outpost-edge doctor`` with fake probes: each check's verdict and its plain-words fix. The
routes and proxies are the link's own (``Dialer`` routes), not faked."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

import edge_agent.doctor as doctor
from control_plane.enroll import CertificateAuthority
from edge_agent.config import EdgeConfig
from edge_agent.connection.proxy import ProxyConfig, parse_proxy_url
from edge_agent.connection.selection import TransportKind
from edge_agent.doctor import CheckResult, Doctor, HelloAnswer, ProbeError, Status, print_report
from edge_agent.identity import Identity, generate_key_and_csr

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class FakeProbes:
    def __init__(self, now: datetime = T0 + timedelta(days=1)) -> None:
        self.current = now
        self.fail: dict[str, ProbeError] = {}
        self.image_present = True
        self.server_date: datetime | None = None
        self.server_der = b""
        self.calls: list[tuple[str, object]] = []

    def now(self) -> datetime:
        return self.current

    def _maybe_fail(self, name: str, arg: object) -> None:
        self.calls.append((name, arg))
        if name in self.fail:
            raise self.fail[name]

    def resolve(self, host: str, port: int) -> list[str]:
        self._maybe_fail("resolve", host)
        return ["127.0.0.1"]

    def tcp(self, host: str, port: int, proxy: ProxyConfig | None) -> None:
        self._maybe_fail("tcp", proxy)
        self.calls.append(("tcp-target", f"{host}:{port}"))

    def tls(self, host: str, port: int, proxy: ProxyConfig | None, **kwargs: object) -> bytes:
        self._maybe_fail("tls", kwargs["server_name"])
        return self.server_der

    def hello(self, config: EdgeConfig, identity: Identity, env: Mapping[str, str]) -> HelloAnswer:
        self._maybe_fail("hello", identity.edge_id)
        return HelloAnswer("cp_test", "0.1.0", TransportKind.GRPC, 0.01)

    def docker(self, base_url: str | None, image: str) -> bool:
        self._maybe_fail("docker", image)
        return self.image_present

    def http_date(self, url: str) -> datetime | None:
        self._maybe_fail("http_date", url)
        return self.server_date if self.server_date is not None else self.current


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.load_or_create(tmp_path / "ca", clock=lambda: T0)


@pytest.fixture
def config(tmp_path: Path, ca: CertificateAuthority) -> EdgeConfig:
    key_pem, csr_pem = generate_key_and_csr()
    cert = ca.sign_edge_csr(csr_pem, "edge_1", "env_1", valid_days=60)
    Identity(
        edge_id="edge_1",
        environment_id="env_1",
        key_pem=key_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        ca_pem=ca.ca_cert_pem,
        control_plane_url="https://cp.example",
        tunnel_address="cp.example:7443",
    ).save(tmp_path / "state")
    return EdgeConfig(state_dir=tmp_path / "state")


@pytest.fixture
def probes(ca: CertificateAuthority) -> FakeProbes:
    fake = FakeProbes()
    _, server_cert = ca.issue_server_cert(["cp.example"], [])
    from cryptography import x509

    fake.server_der = x509.load_pem_x509_certificate(server_cert).public_bytes(serialization.Encoding.DER)
    return fake


def _run(
    config: EdgeConfig, probes: FakeProbes, env: Mapping[str, str] | None = None
) -> dict[str, CheckResult]:
    return {r.name: r for r in Doctor(config, probes, env or {}).run()}


def test_exports() -> None:
    assert set(doctor.__all__) == {
        "CERT_WARN_DAYS",
        "CheckResult",
        "Doctor",
        "HelloAnswer",
        "ProbeError",
        "Probes",
        "Status",
        "SystemProbes",
        "print_report",
    }


def test_all_ok(config: EdgeConfig, probes: FakeProbes) -> None:
    results = _run(config, probes)
    assert list(results) == [
        "config",
        "identity",
        "certificate",
        "docker",
        "proxy",
        "dns",
        "tcp",
        "tls",
        "tunnel",
        "clock",
    ]
    assert {r.status for r in results.values()} == {Status.OK}, results
    assert "authenticated hello answered over grpc by control plane cp_test" in results["tunnel"].detail
    out = io.StringIO()
    assert print_report(list(results.values()), out) == 0
    assert out.getvalue().splitlines()[-1] == "all checks passed"
    assert ("tls", "cp.example") in probes.calls


def test_tcp_refused_says_to_start_the_control_plane(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["tcp"] = ProbeError("refused", "connection refused")
    results = _run(config, probes)
    assert results["tcp"].status is Status.FAIL
    assert "nothing listens on cp.example:7443" in results["tcp"].fix
    assert results["tls"].status is Status.SKIP and results["tunnel"].status is Status.SKIP
    out = io.StringIO()
    assert print_report(list(results.values()), out) == 1
    assert "FAIL tcp: cannot connect to cp.example:7443: connection refused" in out.getvalue()
    assert "     fix: nothing listens on" in out.getvalue()


def test_tcp_timeout_points_at_a_firewall(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["tcp"] = ProbeError("timeout", "no answer within 5 s")
    assert "firewall" in _run(config, probes)["tcp"].fix


def test_dns_failure_skips_the_rest(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["resolve"] = ProbeError("dns", "Name or service not known")
    results = _run(config, probes)
    assert results["dns"].status is Status.FAIL
    assert "resolv.conf" in results["dns"].fix
    assert results["tcp"].status is Status.SKIP and results["tls"].status is Status.SKIP


def test_tls_verify_failure_mentions_tls_server_name(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["tls"] = ProbeError("verify", "Hostname mismatch")
    result = _run(config, probes)["tls"]
    assert result.status is Status.FAIL and "tls_server_name" in result.fix


def test_tls_rejected_client_certificate_says_register_again(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["tls"] = ProbeError("rejected", "certificate unknown")
    assert "register the edge again" in _run(config, probes)["tls"].fix


def test_missing_identity(tmp_path: Path, probes: FakeProbes) -> None:
    results = _run(EdgeConfig(state_dir=tmp_path / "empty", control_plane={"tunnel_address": "h:1"}), probes)
    assert results["identity"].status is Status.FAIL
    assert "outpost-edge register" in results["identity"].fix
    assert results["certificate"].status is Status.SKIP
    assert results["tls"].status is Status.SKIP


def test_key_readable_by_others(config: EdgeConfig, probes: FakeProbes) -> None:
    (config.state_dir / "identity" / "edge.key").chmod(0o644)
    result = _run(config, probes)["identity"]
    assert result.status is Status.FAIL and "chmod 600" in result.detail


def test_certificate_expiry(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.current = T0 + timedelta(days=50)  # 60-day certificate: 10 days left
    result = _run(config, probes)["certificate"]
    assert result.status is Status.WARN and "10 days left" in result.detail
    probes.current = T0 + timedelta(days=61)
    result = _run(config, probes)["certificate"]
    assert result.status is Status.FAIL and "expired" in result.detail


def test_docker_unreachable_and_image_missing(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.image_present = False
    result = _run(config, probes)["docker"]
    assert result.status is Status.FAIL and "outpost-sandbox:1" in result.fix
    probes.fail["docker"] = ProbeError("docker", "permission denied")
    result = _run(config, probes)["docker"]
    assert result.status is Status.FAIL and "docker group" in result.fix


def test_clock_skew(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.server_date = probes.current - timedelta(seconds=30)
    result = _run(config, probes)["clock"]
    assert result.status is Status.WARN and "30 s ahead of" in result.detail
    probes.server_date = probes.current + timedelta(minutes=10)
    result = _run(config, probes)["clock"]
    assert result.status is Status.FAIL and "timedatectl" in result.fix


def test_proxy_in_effect_is_used_for_tcp(config: EdgeConfig, probes: FakeProbes) -> None:
    env = {"https_proxy": "http://proxy.corp:3128", "no_proxy": "localhost"}
    results = _run(config, probes, env)
    assert results["proxy"].status is Status.OK
    detail = results["proxy"].detail
    assert "grpc to cp.example:7443 through proxy http://proxy.corp:3128 (https_proxy)" in detail
    assert ("resolve", "proxy.corp") in probes.calls
    assert ("tcp", parse_proxy_url("http://proxy.corp:3128")) in probes.calls
    probes.fail["tcp"] = ProbeError("proxy", "the proxy answered CONNECT with 'HTTP/1.1 403 Forbidden'")
    assert "no_proxy" in _run(config, probes, env)["tcp"].fix


def test_the_configured_proxy_url_wins_over_the_environment(config: EdgeConfig, probes: FakeProbes) -> None:
    """The link's rule, and so the doctor's: connection.proxy_url first (the old doctor ignored it)."""
    connection = config.connection.model_copy(update={"proxy_url": "http://u:pw@cfg.corp:8080"})
    results = _run(
        config.model_copy(update={"connection": connection}), probes, {"https_proxy": "http://env:1"}
    )
    detail = results["proxy"].detail
    assert "through proxy http://u:***@cfg.corp:8080 (connection.proxy_url)" in detail and "pw" not in detail
    assert ("tcp", parse_proxy_url("http://u:pw@cfg.corp:8080")) in probes.calls


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "directly (no connection.proxy_url, no https_proxy/HTTPS_PROXY)"),
        ({"HTTPS_PROXY": "http://p:3128"}, "through proxy http://p:3128 (HTTPS_PROXY)"),
        ({"https_proxy": "http://p:3128", "NO_PROXY": ".example"}, "directly (NO_PROXY matches cp.example)"),
        ({"https_proxy": "http://p:3128", "no_proxy": "*"}, "directly (no_proxy matches cp.example)"),
    ],
)
def test_proxy_rules_are_the_links(
    config: EdgeConfig, probes: FakeProbes, env: dict[str, str], expected: str
) -> None:
    assert expected in _run(config, probes, env)["proxy"].detail


def test_plain_http_proxy_only_warns(config: EdgeConfig, probes: FakeProbes) -> None:
    result = _run(config, probes, {"HTTP_PROXY": "http://proxy:3128"})["proxy"]
    assert result.status is Status.WARN and "connection.proxy_url" in result.fix


def test_a_revoked_edge_fails_the_tunnel_check_with_the_way_back(
    config: EdgeConfig, probes: FakeProbes
) -> None:
    probes.fail["hello"] = ProbeError(
        "revoked",
        "control plane closed the tunnel: UNAUTHENTICATED: edge authentication failed: revoked",
        reason="revoked",
    )
    result = _run(config, probes)["tunnel"]
    assert result.status is Status.FAIL
    assert result.detail == "the control plane refuses this edge (edge_1): revoked"
    assert result.fix.startswith("re-enroll: ") and "outpost-edge register --force" in result.fix
    assert "tokens create --environment env_1" in result.fix


def test_tunnel_failures_say_what_to_check(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["hello"] = ProbeError("unauthenticated", "HTTP 401 outpost: unauthenticated: token expired")
    result = _run(config, probes)["tunnel"]
    assert result.status is Status.FAIL and "timedatectl" in result.fix
    probes.fail["hello"] = ProbeError("tunnel", "could not connect to the tunnel within 10 s")
    result = _run(config, probes)["tunnel"]
    assert result.status is Status.FAIL and "no authenticated hello: could not connect" in result.detail


def test_websocket_only_checks_the_http_port_and_leaves_tls_to_the_hello(
    config: EdgeConfig, probes: FakeProbes
) -> None:
    connection = config.connection.model_copy(update={"transport": "websocket"})
    results = _run(config.model_copy(update={"connection": connection}), probes)
    assert "websocket to wss://cp.example/v1/tunnel/ws directly" in results["proxy"].detail
    assert ("tcp-target", "cp.example:443") in probes.calls
    assert results["tls"].status is Status.SKIP and results["tunnel"].status is Status.OK


def test_nothing_to_dial(tmp_path: Path, probes: FakeProbes) -> None:
    results = _run(EdgeConfig(state_dir=tmp_path / "empty"), probes)
    assert results["identity"].status is Status.FAIL
    assert results["proxy"].status is Status.FAIL and "no control plane configured" in results["proxy"].detail
    assert results["tunnel"].status is Status.SKIP


def test_certificate_overdue_for_renewal_points_at_automatic_renewal(
    config: EdgeConfig, probes: FakeProbes
) -> None:
    # A 60-day certificate renews when a third of it is left (from day 40), or up to half a window
    # earlier (spread by edge id over a fleet): between day 30 and day 40.
    result = _run(config, probes)["certificate"]
    assert result.status is Status.OK
    found = re.search(r"renewed automatically from (\d{4}-\d{2}-\d{2})", result.detail)
    assert found is not None
    renew_on = datetime.strptime(found.group(1), "%Y-%m-%d").replace(tzinfo=UTC)
    assert T0 + timedelta(days=29) <= renew_on <= T0 + timedelta(days=40)
    probes.current = T0 + timedelta(days=42)  # 18 days left, two days past its renewal: overdue
    result = _run(config, probes)["certificate"]
    assert result.status is Status.WARN
    assert "renews its certificate by itself" in result.fix and "renew-certificate" in result.fix
    probes.current = T0 + timedelta(days=61)
    result = _run(config, probes)["certificate"]
    assert result.status is Status.FAIL and "register this edge again" in result.fix
