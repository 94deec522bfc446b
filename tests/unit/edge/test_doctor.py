"""``outpost-edge doctor`` with fake probes: each check's verdict and its plain-words fix."""

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
from edge_agent.doctor import CheckResult, Doctor, ProbeError, Proxy, Status, print_report, tunnel_proxy
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

    def tcp(self, host: str, port: int, proxy: Proxy | None) -> None:
        self._maybe_fail("tcp", proxy)

    def tls(self, host: str, port: int, proxy: Proxy | None, **kwargs: object) -> bytes:
        self._maybe_fail("tls", kwargs["server_name"])
        return self.server_der

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
        "ProbeError",
        "Probes",
        "Proxy",
        "Status",
        "SystemProbes",
        "print_report",
        "tunnel_proxy",
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
        "clock",
    ]
    assert {r.status for r in results.values()} == {Status.OK}, results
    out = io.StringIO()
    assert print_report(list(results.values()), out) == 0
    assert out.getvalue().splitlines()[-1] == "all checks passed"
    assert ("tls", "cp.example") in probes.calls


def test_tcp_refused_says_to_start_the_control_plane(config: EdgeConfig, probes: FakeProbes) -> None:
    probes.fail["tcp"] = ProbeError("refused", "connection refused")
    results = _run(config, probes)
    assert results["tcp"].status is Status.FAIL
    assert "nothing listens on cp.example:7443" in results["tcp"].fix
    assert results["tls"].status is Status.SKIP
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
    assert results["proxy"].status is Status.OK and "proxy.corp:3128" in results["proxy"].detail
    assert ("resolve", "proxy.corp") in probes.calls
    assert ("tcp", Proxy("proxy.corp", 3128, "https_proxy")) in probes.calls
    probes.fail["tcp"] = ProbeError("proxy", "the proxy answered CONNECT with 'HTTP/1.1 403 Forbidden'")
    assert "no_proxy" in _run(config, probes, env)["tcp"].fix


def test_upper_case_proxy_only_warns(config: EdgeConfig, probes: FakeProbes) -> None:
    result = _run(config, probes, {"HTTPS_PROXY": "http://proxy:3128"})["proxy"]
    assert result.status is Status.WARN and "https_proxy" in result.fix


@pytest.mark.parametrize(
    ("host", "env", "expected"),
    [
        ("cp.example", {}, None),
        ("cp.example", {"grpc_proxy": "p:1", "https_proxy": "q:2"}, Proxy("p", 1, "grpc_proxy")),
        ("cp.example", {"https_proxy": "q:2", "no_proxy": ".example"}, None),
        ("10.1.2.3", {"https_proxy": "q:2", "no_proxy": "10.0.0.0/8"}, None),
        ("cp.example", {"https_proxy": "q:2", "no_proxy": "*"}, None),
        ("cp.example", {"https_proxy": "q:2", "no_grpc_proxy": "other"}, Proxy("q", 2, "https_proxy")),
    ],
)
def test_tunnel_proxy_rules(host: str, env: dict[str, str], expected: Proxy | None) -> None:
    assert tunnel_proxy(host, env) == expected


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
