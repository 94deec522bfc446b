"""EnrollmentService.renew with a fake clock: the proof of possession, the previous certificate's
lifetime (until the new one is used, or until it expires), the crash window, revocation."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from control_plane.enroll import CertificateAuthority, EdgeAuthError, EnrollmentService, renewal_audience
from control_plane.errors import InvalidRequest
from control_plane.store.memory import MemoryStore
from outpost_wire.pop import PopError, audience_for, create_token

from .conftest import ENV_ID, FakeClock
from .keys import ec_csr, tampered_signature_csr


class Edge:
    """An edge's key and certificate, as it holds them."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert_pem: bytes) -> None:
        self.key = key
        self.cert_pem = cert_pem

    @property
    def der(self) -> bytes:
        return x509.load_pem_x509_certificate(self.cert_pem).public_bytes(serialization.Encoding.DER)

    @property
    def fingerprint(self) -> str:
        return x509.load_pem_x509_certificate(self.cert_pem).fingerprint(hashes.SHA256()).hex()

    def token(self, edge_id: str, audience: str, clock: FakeClock) -> str:
        key_pem = self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return create_token(
            key_pem=key_pem,
            cert_pem=self.cert_pem,
            edge_id=edge_id,
            audience=audience,
            now=clock().timestamp(),
        )


async def _enroll(service: EnrollmentService) -> tuple[str, Edge]:
    issued = await service.create_token(ENV_ID)
    key, csr = ec_csr()
    enrolled = await service.enroll(issued.token, csr, "edge")
    return enrolled.edge_id, Edge(key, enrolled.certificate_pem)


async def _renew(
    service: EnrollmentService, ca: CertificateAuthority, edge_id: str, edge: Edge, clock: FakeClock
) -> Edge:
    key, csr = ec_csr()
    renewed = await service.renew(edge.token(edge_id, renewal_audience(ca.fingerprint_sha256), clock), csr)
    return Edge(key, renewed.certificate_pem)


async def test_renewal_issues_a_certificate_for_the_same_edge_and_keeps_the_old_one_until_the_new_one_is_used(
    service: EnrollmentService, ca: CertificateAuthority, store: MemoryStore, clock: FakeClock
) -> None:
    edge_id, old = await _enroll(service)
    clock.advance(300 * 86400)
    key, csr = ec_csr(cn="ignored")
    renewed = await service.renew(old.token(edge_id, renewal_audience(ca.fingerprint_sha256), clock), csr)
    new = Edge(key, renewed.certificate_pem)
    cert = x509.load_pem_x509_certificate(renewed.certificate_pem)
    assert renewed.edge_id == edge_id and renewed.environment_id == ENV_ID
    assert renewed.ca_certificate_pem == ca.ca_cert_pem
    assert renewed.not_after == cert.not_valid_after_utc == clock() + timedelta(days=365)
    record = await store.get_edge(edge_id)
    assert (record.cert_fingerprint, record.previous_cert_fingerprint) == (new.fingerprint, old.fingerprint)
    # Both authenticate until the new one is used; then only the new one.
    assert (await service.authenticate_peer(old.der)).id == edge_id
    assert (await store.get_edge(edge_id)).previous_cert_fingerprint == old.fingerprint
    assert (await service.authenticate_peer(new.der)).id == edge_id
    assert (await store.get_edge(edge_id)).previous_cert_fingerprint is None
    with pytest.raises(EdgeAuthError) as info:
        await service.authenticate_peer(old.der)
    assert info.value.reason == "certificate_mismatch"


async def test_crash_window_the_edge_renews_again_with_its_old_certificate(
    service: EnrollmentService, ca: CertificateAuthority, store: MemoryStore, clock: FakeClock
) -> None:
    edge_id, old = await _enroll(service)
    lost = await _renew(service, ca, edge_id, old, clock)  # the edge never saved this one
    clock.advance(60)
    assert (await service.authenticate_peer(old.der)).id == edge_id
    new = await _renew(service, ca, edge_id, old, clock)
    record = await store.get_edge(edge_id)
    assert (record.cert_fingerprint, record.previous_cert_fingerprint) == (new.fingerprint, old.fingerprint)
    with pytest.raises(EdgeAuthError):
        await service.authenticate_peer(lost.der)
    assert (await service.authenticate_peer(new.der)).id == edge_id


async def test_the_previous_certificate_is_refused_once_it_expires(
    service: EnrollmentService, ca: CertificateAuthority, store: MemoryStore, clock: FakeClock
) -> None:
    edge_id, old = await _enroll(service)
    clock.advance(360 * 86400)
    await _renew(service, ca, edge_id, old, clock)
    clock.advance(6 * 86400)  # past the old certificate's 365 days
    with pytest.raises(EdgeAuthError) as info:
        await service.authenticate_peer(old.der)
    assert info.value.reason == "expired"
    assert (await store.get_edge(edge_id)).previous_cert_fingerprint is None  # and forgotten


async def test_a_revoked_edge_cannot_renew_with_either_certificate(
    service: EnrollmentService, ca: CertificateAuthority, clock: FakeClock
) -> None:
    edge_id, old = await _enroll(service)
    new = await _renew(service, ca, edge_id, old, clock)
    await service.revoke(edge_id)
    for held in (old, new):
        with pytest.raises(EdgeAuthError) as info:
            await _renew(service, ca, edge_id, held, clock)
        assert info.value.reason in ("revoked", "certificate_mismatch")
    with pytest.raises(EdgeAuthError) as info:
        await _renew(service, ca, edge_id, new, clock)
    assert info.value.reason == "revoked"


async def test_tokens_are_checked_before_anything_else(
    service: EnrollmentService, ca: CertificateAuthority, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    edge_id, old = await _enroll(service)
    _, csr = ec_csr()
    caplog.set_level(logging.INFO)
    with pytest.raises(PopError) as info:
        await service.renew(None, csr)
    assert info.value.reason == "missing"
    with pytest.raises(PopError) as info:
        await service.renew("not-a-token", csr)
    assert info.value.reason == "malformed"
    # A tunnel token (another audience) does not renew: it cannot be turned into a certificate.
    tunnel_token = old.token(edge_id, audience_for(ca.ca_cert_pem), clock)
    with pytest.raises(PopError) as info:
        await service.renew(tunnel_token, csr)
    assert info.value.reason == "wrong_audience"
    # A token is good for one renewal.
    token = old.token(edge_id, renewal_audience(ca.fingerprint_sha256), clock)
    await service.renew(token, csr)
    with pytest.raises(PopError) as info:
        await service.renew(token, csr)
    assert info.value.reason == "replayed"
    # Expired tokens are refused.
    stale = old.token(edge_id, renewal_audience(ca.fingerprint_sha256), clock)
    clock.advance(120)
    with pytest.raises(PopError) as info:
        await service.renew(stale, csr)
    assert info.value.reason == "expired"
    assert token not in caplog.text and stale not in caplog.text


async def test_a_token_naming_another_edge_is_refused(
    service: EnrollmentService, ca: CertificateAuthority, clock: FakeClock
) -> None:
    _, old = await _enroll(service)
    other_id, _ = await _enroll(service)
    _, csr = ec_csr()
    with pytest.raises(PopError) as info:
        await service.renew(old.token(other_id, renewal_audience(ca.fingerprint_sha256), clock), csr)
    assert info.value.reason == "edge_mismatch"


async def test_a_bad_csr_is_invalid_request_and_changes_nothing(
    service: EnrollmentService, ca: CertificateAuthority, store: MemoryStore, clock: FakeClock
) -> None:
    edge_id, old = await _enroll(service)
    before = await store.get_edge(edge_id)
    for csr in (b"not a csr", tampered_signature_csr()):
        with pytest.raises(InvalidRequest):
            await service.renew(old.token(edge_id, renewal_audience(ca.fingerprint_sha256), clock), csr)
    assert await store.get_edge(edge_id) == before
