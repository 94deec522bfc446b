"""EnrollmentService: tokens (single use, expiry, unknown), enrollment, peer authentication, revocation."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from control_plane.enroll import (
    CertificateAuthority,
    EdgeAuthError,
    EnrollmentService,
    IssuedToken,
    hash_token,
)
from control_plane.errors import ControlPlaneError, InvalidRequest, NotFound, TokenRejected
from control_plane.store.memory import MemoryStore
from outpost_wire.errors import ErrorCode

from .conftest import ENV_ID, FakeClock
from .keys import ec_csr


def _der(cert_pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)


# -- tokens --------------------------------------------------------------------------------------------
async def test_create_token(service: EnrollmentService, ca: CertificateAuthority, clock: FakeClock) -> None:
    issued = await service.create_token(ENV_ID, ttl_s=600)
    assert issued.token.startswith("oet_")
    assert len(issued.token) > 40
    assert issued.environment_id == ENV_ID
    assert issued.expires_at == clock() + timedelta(seconds=600)
    assert issued.ca_fingerprint == ca.fingerprint_sha256
    assert issued.token not in repr(issued)
    other = await service.create_token(ENV_ID)
    assert other.token != issued.token and other.token_id != issued.token_id


async def test_token_is_stored_by_hash_only(
    service: EnrollmentService, store: MemoryStore, clock: FakeClock
) -> None:
    issued = await service.create_token(ENV_ID)
    record = await store.consume_enrollment_token(hash_token(issued.token), "edge_x", clock())
    assert record.id == issued.token_id
    assert record.token_hash == hash_token(issued.token)
    assert issued.token not in repr(record)


async def test_create_token_needs_a_live_environment(
    service: EnrollmentService, store: MemoryStore, clock: FakeClock
) -> None:
    with pytest.raises(NotFound):
        await service.create_token("env_missing")
    await store.archive_resource("environment", ENV_ID, clock())
    with pytest.raises(InvalidRequest, match="archived"):
        await service.create_token(ENV_ID)


@pytest.mark.parametrize("ttl_s", [0, -1, 8 * 24 * 3600])
async def test_create_token_ttl_bounds(service: EnrollmentService, ttl_s: float) -> None:
    with pytest.raises(InvalidRequest):
        await service.create_token(ENV_ID, ttl_s=ttl_s)


# -- enrollment ----------------------------------------------------------------------------------------
async def test_enroll_issues_a_certificate_and_records_the_edge(
    service: EnrollmentService, store: MemoryStore, ca: CertificateAuthority
) -> None:
    issued = await service.create_token(ENV_ID)
    key, csr = ec_csr()
    enrolled = await service.enroll(issued.token, csr, "build-box-1")

    assert enrolled.edge_id.startswith("edge_")
    assert enrolled.environment_id == ENV_ID
    assert enrolled.ca_certificate_pem == ca.ca_cert_pem
    cert = x509.load_pem_x509_certificate(enrolled.certificate_pem)
    assert cert.public_key() == key.public_key()
    assert ca.verify_issued_by_us(cert)

    edge = await store.get_edge(enrolled.edge_id)
    assert edge.environment_id == ENV_ID
    assert edge.name == "build-box-1"
    assert edge.cert_serial == format(cert.serial_number, "x")
    assert edge.cert_fingerprint == cert.fingerprint(hashes.SHA256()).hex()
    assert edge.cert_not_after == cert.not_valid_after_utc
    assert edge.revoked_at is None
    assert [e.id for e in await service.list_edges(ENV_ID)] == [enrolled.edge_id]


async def test_token_is_single_use(service: EnrollmentService) -> None:
    issued = await service.create_token(ENV_ID)
    await service.enroll(issued.token, ec_csr()[1], "a")
    with pytest.raises(TokenRejected) as info:
        await service.enroll(issued.token, ec_csr()[1], "b")
    assert info.value.reason == "used"
    assert len(await service.list_edges()) == 1


async def test_token_expires(service: EnrollmentService, clock: FakeClock) -> None:
    issued = await service.create_token(ENV_ID, ttl_s=60)
    clock.advance(59)
    fresh = await service.create_token(ENV_ID, ttl_s=60)
    clock.advance(1)  # issued expires exactly now
    with pytest.raises(TokenRejected) as info:
        await service.enroll(issued.token, ec_csr()[1], "late")
    assert info.value.reason == "expired"
    await service.enroll(fresh.token, ec_csr()[1], "on time")


async def test_unknown_token_is_rejected_and_logged_without_its_value(
    service: EnrollmentService, caplog: pytest.LogCaptureFixture
) -> None:
    token = "oet_this-token-does-not-exist"
    with caplog.at_level(logging.DEBUG), pytest.raises(TokenRejected) as info:
        await service.enroll(token, ec_csr()[1], "x")
    assert info.value.reason == "unknown"
    assert str(info.value) == "enrollment token rejected: unknown"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert hash_token(token)[:12] in warnings[0].getMessage()
    assert token not in caplog.text
    assert "does-not-exist" not in caplog.text


async def test_token_value_never_logged_on_success(
    service: EnrollmentService, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        issued = await service.create_token(ENV_ID)
        await service.enroll(issued.token, ec_csr()[1], "x")
    assert issued.token not in caplog.text
    assert issued.token_id in caplog.text


async def test_bad_csr_does_not_burn_the_token(service: EnrollmentService) -> None:
    issued = await service.create_token(ENV_ID)
    with pytest.raises(InvalidRequest):
        await service.enroll(issued.token, b"not a csr", "x")
    with pytest.raises(InvalidRequest):
        await service.enroll(issued.token, ec_csr()[1], "")
    await service.enroll(issued.token, ec_csr()[1], "x")


async def test_enroll_into_archived_environment_refused(
    service: EnrollmentService, store: MemoryStore, clock: FakeClock
) -> None:
    issued = await service.create_token(ENV_ID)
    await store.archive_resource("environment", ENV_ID, clock())
    with pytest.raises(InvalidRequest, match="archived"):
        await service.enroll(issued.token, ec_csr()[1], "x")
    assert await service.list_edges() == []


# -- peer authentication -------------------------------------------------------------------------------
async def _enroll(service: EnrollmentService) -> tuple[str, bytes]:
    issued = await service.create_token(ENV_ID)
    enrolled = await service.enroll(issued.token, ec_csr()[1], "edge")
    return enrolled.edge_id, _der(enrolled.certificate_pem)


async def test_authenticate_peer_accepts_an_enrolled_edge(service: EnrollmentService) -> None:
    edge_id, der = await _enroll(service)
    edge = await service.authenticate_peer(der)
    assert edge.id == edge_id
    assert edge.environment_id == ENV_ID


async def _reason(service: EnrollmentService, der: bytes) -> str:
    with pytest.raises(EdgeAuthError) as info:
        await service.authenticate_peer(der)
    return info.value.reason


async def test_revoked_edge_is_refused(service: EnrollmentService) -> None:
    edge_id, der = await _enroll(service)
    record = await service.revoke(edge_id)
    assert record.revoked_at is not None
    assert await _reason(service, der) == "revoked"


async def test_cert_from_a_foreign_ca_is_refused(
    service: EnrollmentService, tmp_path: Path, clock: FakeClock
) -> None:
    edge_id, _ = await _enroll(service)
    other = CertificateAuthority.load_or_create(tmp_path / "foreign", clock=clock)
    forged = other.sign_edge_csr(ec_csr()[1], edge_id, ENV_ID)  # same edge id, wrong CA
    assert await _reason(service, forged.public_bytes(serialization.Encoding.DER)) == "untrusted_issuer"


async def test_second_cert_for_the_same_edge_is_refused(
    service: EnrollmentService, ca: CertificateAuthority
) -> None:
    edge_id, _ = await _enroll(service)
    extra = ca.sign_edge_csr(ec_csr()[1], edge_id, ENV_ID)  # ours, but not the one recorded
    assert await _reason(service, extra.public_bytes(serialization.Encoding.DER)) == "certificate_mismatch"


async def test_cert_for_an_unknown_edge_is_refused(
    service: EnrollmentService, ca: CertificateAuthority
) -> None:
    cert = ca.sign_edge_csr(ec_csr()[1], "edge_nobody", ENV_ID)
    assert await _reason(service, cert.public_bytes(serialization.Encoding.DER)) == "unknown_edge"


async def test_expired_cert_is_refused(service: EnrollmentService, clock: FakeClock) -> None:
    _, der = await _enroll(service)
    clock.advance(366 * 24 * 3600)
    assert await _reason(service, der) == "expired"


async def test_server_and_ca_certs_are_refused(service: EnrollmentService, ca: CertificateAuthority) -> None:
    _, server_pem = ca.issue_server_cert(["localhost"], [])
    assert await _reason(service, _der(server_pem)) == "wrong_purpose"
    assert await _reason(service, _der(ca.ca_cert_pem)) == "wrong_purpose"
    assert await _reason(service, b"\x30\x03garbage") == "malformed_certificate"


def test_edge_auth_error_is_typed() -> None:
    error = EdgeAuthError("revoked", "edge_1")
    assert isinstance(error, ControlPlaneError)
    assert error.code is ErrorCode.UNAUTHENTICATED
    assert str(error) == "edge authentication failed: revoked"
    assert error.edge_id == "edge_1"


# -- revocation ----------------------------------------------------------------------------------------
async def test_revocation_listeners(service: EnrollmentService) -> None:
    edge_id, _ = await _enroll(service)
    calls: list[tuple[str, str]] = []

    def sync_listener(edge: str) -> None:
        calls.append(("sync", edge))

    async def async_listener(edge: str) -> None:
        calls.append(("async", edge))

    def broken_listener(edge: str) -> None:
        raise RuntimeError("boom")

    service.add_revocation_listener(broken_listener)
    remove_sync = service.add_revocation_listener(sync_listener)
    service.add_revocation_listener(async_listener)

    await service.revoke(edge_id)
    assert calls == [("sync", edge_id), ("async", edge_id)]

    remove_sync()
    remove_sync()  # idempotent
    calls.clear()
    await service.revoke(edge_id)  # already revoked: listeners still run
    assert calls == [("async", edge_id)]


async def test_revoke_unknown_edge(service: EnrollmentService) -> None:
    with pytest.raises(NotFound):
        await service.revoke("edge_nobody")


def test_issued_token_repr_hides_the_token() -> None:
    issued = IssuedToken("oet_secret", "etok_1", ENV_ID, datetime(2030, 1, 1, tzinfo=UTC), "ab" * 32)
    assert "oet_secret" not in repr(issued)
