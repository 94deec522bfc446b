"""The control plane's server certificates are replaced while it runs: the tunnel (gRPC, dynamic
credentials) and the HTTPS port (the live SSL context reloaded) serve the new certificate from the
next handshake on, edges connect with it (they trust the CA, not the leaf) and tunnels already up
stay up. No restart, no Docker."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from control_plane.enroll import CertificateAuthority
from control_plane.server import ControlPlane
from edge_agent.enroll import register
from edge_agent.identity import Identity
from outpost_wire.files import write_atomic
from tests.support.edge_link import (
    api_client,
    make_dialer,
    running_control_plane,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


def _serial(pem: str | bytes) -> int:
    data = pem.encode() if isinstance(pem, str) else pem
    return x509.load_pem_x509_certificate(data).serial_number


async def _https_serial(cp: ControlPlane) -> int:
    port = int(cp.http_url.rsplit(":", 1)[1])
    pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", port))
    return _serial(pem)


async def _tunnel_serial(cp: ControlPlane, identity: Identity, tmp_path: Path) -> int:
    """The certificate the tunnel port presents to an edge (its client certificate offered)."""
    assert cp.ca is not None
    cert, key = tmp_path / "probe.crt", tmp_path / "probe.key"
    cert.write_bytes(identity.cert_pem)
    key.write_bytes(identity.key_pem)
    context = ssl.create_default_context(cadata=cp.ca.ca_cert_pem.decode())
    context.load_cert_chain(str(cert), str(key))
    context.set_alpn_protocols(["h2"])
    host, port = cp.tunnel_address.rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), ssl=context, server_hostname="localhost")
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


async def test_server_certificates_are_replaced_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_control_plane(tmp_path, monkeypatch, http_tls=True) as cp:
        assert cp.ca is not None
        trust = ssl.create_default_context(cadata=cp.ca.ca_cert_pem.decode())
        async with api_client(cp, verify=trust) as api:
            r = await api.post("/v1/environments", json={"name": "rot", "config": {"type": "self_hosted"}})
            environment = r.json()["id"]
            r = await api.post(f"/v1/environments/{environment}/enrollment_tokens", json={})
            token = r.json()
        identity = await register(
            cp.http_url, token["token"], tmp_path / "edge", name="rot", ca_fingerprint=token["ca_fingerprint"]
        )
        old_https, old_tunnel = await _https_serial(cp), await _tunnel_serial(cp, identity, tmp_path)
        assert old_https == old_tunnel  # one server certificate for both ports

        assert await cp.refresh_server_certificates() is False  # plenty of time left: kept
        async with running_link(identity, make_dialer(identity, tmp_path / "edge")) as first:
            await asyncio.wait_for(first.connected.wait(), 10)
            # The certificate is due (here: its files are gone, as if it had expired).
            (cp.config.data_dir / "ca" / "server.crt").unlink()
            assert await cp.refresh_server_certificates() is True

            new_https, new_tunnel = await _https_serial(cp), await _tunnel_serial(cp, identity, tmp_path)
            assert new_https == new_tunnel != old_tunnel
            # The tunnel that was up stays up; a new edge connection gets in with the new certificate.
            assert first.connected.is_set() and first.connections == 1
            async with running_link(identity, make_dialer(identity, tmp_path / "edge2")) as second:
                await asyncio.wait_for(second.connected.wait(), 10)  # with the new certificate
            # And the API still answers over HTTPS, verified against the CA.
            async with api_client(cp, verify=trust) as api:
                assert (await api.get("/v1/environments")).status_code == 200


async def test_an_operators_https_certificate_is_reloaded_from_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``http_tls_cert_file`` / ``http_tls_key_file`` replaced on disk (a certbot renewal, say): the
    next check serves them, without a restart."""
    public = CertificateAuthority.load_or_create(tmp_path / "public-ca")

    def install() -> int:
        key_pem, cert_pem = public.issue_server_cert(["localhost"], ["127.0.0.1"])
        write_atomic(tmp_path / "op.key", key_pem, 0o600)
        write_atomic(tmp_path / "op.crt", cert_pem, 0o644)
        (public.directory / "server.crt").unlink()  # the next issue is a new certificate
        return _serial(cert_pem)

    first = install()
    files = {"http_tls_cert_file": tmp_path / "op.crt", "http_tls_key_file": tmp_path / "op.key"}
    async with running_control_plane(tmp_path, monkeypatch, http_tls=True, **files) as cp:
        assert await _https_serial(cp) == first
        second = install()
        assert await cp.refresh_server_certificates() is False  # ours (the tunnel's) did not change
        assert await _https_serial(cp) == second != first
