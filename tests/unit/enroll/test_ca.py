"""CertificateAuthority: files and modes, signing edge CSRs, the tunnel server certificate."""

from __future__ import annotations

import hashlib
import ipaddress
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from control_plane.enroll import CAError, CertificateAuthority, edge_id_from_cert, environment_id_from_cert
from control_plane.errors import InvalidRequest

from .conftest import FakeClock
from .keys import csr_for, ec_csr, foreign_key_csr, rsa_csr, tampered_signature_csr


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- files ---------------------------------------------------------------------------------------------
def test_creates_key_and_cert_with_private_modes(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "state" / "ca"
    ca = CertificateAuthority.load_or_create(directory, common_name="Acme CA", clock=clock)
    assert _mode(directory) == 0o700
    assert _mode(directory / "ca.key") == 0o600
    assert _mode(directory / "ca.crt") == 0o644
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    cert = ca.certificate
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "Acme CA"
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert isinstance(cert.public_key().curve, ec.SECP256R1)
    assert ca.ca_cert_pem == (directory / "ca.crt").read_bytes()


def test_fingerprint_is_sha256_of_der_and_stable_across_reload(tmp_path: Path, clock: FakeClock) -> None:
    first = CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    second = CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    der = x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.crt").read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    assert first.fingerprint_sha256 == second.fingerprint_sha256 == hashlib.sha256(der).hexdigest()
    assert len(first.fingerprint_sha256) == 64


def test_loose_directory_is_tightened(tmp_path: Path, clock: FakeClock) -> None:
    directory = tmp_path / "ca"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    CertificateAuthority.load_or_create(directory, clock=clock)
    assert _mode(directory) == 0o700


def test_refuses_group_readable_key(tmp_path: Path, clock: FakeClock) -> None:
    CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    (tmp_path / "ca" / "ca.key").chmod(0o640)
    with pytest.raises(CAError, match="chmod 600"):
        CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)


def test_refuses_partial_ca(tmp_path: Path, clock: FakeClock) -> None:
    CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    (tmp_path / "ca" / "ca.crt").unlink()
    with pytest.raises(CAError, match="partial"):
        CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    assert (tmp_path / "ca" / "ca.key").exists()  # never overwritten


def test_refuses_corrupt_ca(tmp_path: Path, clock: FakeClock) -> None:
    CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    (tmp_path / "ca" / "ca.crt").write_bytes(b"not a certificate")
    with pytest.raises(CAError, match="cannot read"):
        CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)


def test_refuses_expired_ca(tmp_path: Path, clock: FakeClock) -> None:
    CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    clock.advance(timedelta(days=3651).total_seconds())
    with pytest.raises(CAError, match="expired"):
        CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)


# -- edge certificates ---------------------------------------------------------------------------------
def test_sign_sets_our_names_and_ignores_the_csr_subject(ca: CertificateAuthority, clock: FakeClock) -> None:
    key, csr = ec_csr(cn="admin", dns="evil.example")
    cert = ca.sign_edge_csr(csr, "edge_abc", "env_1", valid_days=30)

    assert cert.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge_abc")])
    assert cert.issuer == ca.certificate.subject
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [
        "urn:outpost:edge:edge_abc",
        "urn:outpost:environment:env_1",
    ]
    assert san.get_values_for_type(x509.DNSName) == []  # the CSR's SAN is not copied
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.public_key() == key.public_key()
    assert cert.not_valid_after_utc == (clock() + timedelta(days=30)).replace(microsecond=0)
    assert cert.not_valid_before_utc < clock()
    assert ca.verify_issued_by_us(cert)
    assert edge_id_from_cert(cert) == "edge_abc"
    assert environment_id_from_cert(cert) == "env_1"


def test_cert_never_outlives_the_ca(ca: CertificateAuthority) -> None:
    _, csr = ec_csr()
    cert = ca.sign_edge_csr(csr, "edge_a", "env_1", valid_days=3650)
    assert cert.not_valid_after_utc <= ca.certificate.not_valid_after_utc


@pytest.mark.parametrize(
    ("csr", "message"),
    [
        (b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", "not a valid"),
        (b"garbage", "not a valid"),
        (tampered_signature_csr(), "signature"),
        (foreign_key_csr(), "signature"),
        (rsa_csr(1024), "too small"),
        (csr_for(ec.generate_private_key(ec.SECP256K1())), "curve"),
        (csr_for(ed448.Ed448PrivateKey.generate()), "not supported"),
    ],
    ids=["bad-base64", "garbage", "tampered", "foreign-key", "rsa-1024", "secp256k1", "ed448"],
)
def test_sign_rejects_bad_csrs(ca: CertificateAuthority, csr: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as info:
        ca.sign_edge_csr(csr, "edge_a", "env_1")
    assert info.value.param == "csr_pem"


@pytest.mark.parametrize(
    "key",
    [lambda: ed25519.Ed25519PrivateKey.generate(), lambda: ec.generate_private_key(ec.SECP384R1())],
    ids=["ed25519", "p384"],
)
def test_sign_accepts_other_strong_keys(ca: CertificateAuthority, key: object) -> None:
    private = key()  # type: ignore[operator]
    cert = ca.sign_edge_csr(csr_for(private), "edge_a", "env_1")
    assert ca.verify_issued_by_us(cert)


def test_sign_accepts_rsa_2048(ca: CertificateAuthority) -> None:
    assert ca.verify_issued_by_us(ca.sign_edge_csr(rsa_csr(2048), "edge_a", "env_1"))


@pytest.mark.parametrize("edge_id", ["", "edge/../x", "edge:1", "a" * 65, "é"])
def test_sign_rejects_bad_ids(ca: CertificateAuthority, edge_id: str) -> None:
    _, csr = ec_csr()
    with pytest.raises(InvalidRequest):
        ca.sign_edge_csr(csr, edge_id, "env_1")


def test_foreign_ca_is_not_us(tmp_path: Path, ca: CertificateAuthority, clock: FakeClock) -> None:
    other = CertificateAuthority.load_or_create(tmp_path / "other", common_name="Outpost CA", clock=clock)
    _, csr = ec_csr()
    foreign = other.sign_edge_csr(csr, "edge_a", "env_1")
    assert not ca.verify_issued_by_us(foreign)  # same subject name, different key
    assert other.verify_issued_by_us(foreign)


def test_ids_from_a_cert_without_outpost_uris(ca: CertificateAuthority) -> None:
    with pytest.raises(InvalidRequest):
        edge_id_from_cert(ca.certificate)
    with pytest.raises(InvalidRequest):
        environment_id_from_cert(ca.certificate)


# -- tunnel server certificate -----------------------------------------------------------------------------
def test_server_cert_names_hosts_and_is_reused(ca: CertificateAuthority) -> None:
    key_pem, cert_pem = ca.issue_server_cert(["tunnel.example.com", "localhost"], ["127.0.0.1", "::1"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert cert.public_key() == key.public_key()
    assert ca.verify_issued_by_us(cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(san.get_values_for_type(x509.DNSName)) == ["localhost", "tunnel.example.com"]
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    assert _mode(ca.directory / "server.key") == 0o600

    # Same names in another order: reused, byte for byte.
    assert ca.issue_server_cert(["localhost", "tunnel.example.com"], ["::1", "127.0.0.1"]) == (
        key_pem,
        cert_pem,
    )
    # Different names: a new key and certificate.
    key2, cert2 = ca.issue_server_cert(["localhost"], ["127.0.0.1"])
    assert (key2, cert2) != (key_pem, cert_pem)
    assert ca.issue_server_cert(["localhost"], ["127.0.0.1"]) == (key2, cert2)


def test_server_cert_renewed_near_expiry(ca: CertificateAuthority, clock: FakeClock) -> None:
    first = ca.issue_server_cert(["localhost"], [])
    clock.advance(timedelta(days=300).total_seconds())
    assert ca.issue_server_cert(["localhost"], []) == first
    clock.advance(timedelta(days=40).total_seconds())
    assert ca.issue_server_cert(["localhost"], []) != first


def test_server_cert_from_another_ca_is_replaced(tmp_path: Path, clock: FakeClock) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    first = ca.issue_server_cert(["localhost"], [])
    for name in ("ca.key", "ca.crt"):
        (tmp_path / "ca" / name).unlink()
    new_ca = CertificateAuthority.load_or_create(tmp_path / "ca", clock=clock)
    _, cert_pem = new_ca.issue_server_cert(["localhost"], [])
    assert cert_pem != first[1]
    assert new_ca.verify_issued_by_us(x509.load_pem_x509_certificate(cert_pem))


@pytest.mark.parametrize(("hostnames", "ips"), [([], []), (["bad host"], []), ([], ["300.1.1.1"])])
def test_server_cert_rejects_bad_names(
    ca: CertificateAuthority, hostnames: list[str], ips: list[str]
) -> None:
    with pytest.raises(InvalidRequest):
        ca.issue_server_cert(hostnames, ips)
