"""edge_agent.identity: key and CSR generation, save/load round trip, file modes, refusals."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from control_plane.enroll import CertificateAuthority
from edge_agent.identity import Identity, IdentityError, generate_key_and_csr

from .conftest import FakeClock


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def identity(ca: CertificateAuthority) -> Identity:
    key_pem, csr_pem = generate_key_and_csr()
    cert = ca.sign_edge_csr(csr_pem, "edge_1", "env_1")
    return Identity(
        edge_id="edge_1",
        environment_id="env_1",
        key_pem=key_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        ca_pem=ca.ca_cert_pem,
        control_plane_url="https://cp.example",
        tunnel_address="cp.example:7443",
    )


def test_generate_key_and_csr() -> None:
    key_pem, csr_pem = generate_key_and_csr()
    key = serialization.load_pem_private_key(key_pem, password=None)
    csr = x509.load_pem_x509_csr(csr_pem)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(key.curve, ec.SECP256R1)
    assert csr.is_signature_valid
    assert csr.public_key() == key.public_key()
    assert Identity.generate_key_and_csr is generate_key_and_csr


def test_save_and_load_round_trip(identity: Identity, tmp_path: Path) -> None:
    state = tmp_path / "state"
    directory = identity.save(state)
    assert directory == state / "identity"
    assert Identity.load(state) == identity
    assert Identity.exists(state)


def test_file_modes(identity: Identity, tmp_path: Path) -> None:
    directory = identity.save(tmp_path)
    assert _mode(directory) == 0o700
    assert _mode(directory / "edge.key") == 0o600
    assert _mode(directory / "identity.json") == 0o600
    assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "edge.crt", "edge.key", "identity.json"]
    meta = json.loads((directory / "identity.json").read_text())
    assert meta["edge_id"] == "edge_1"
    assert "PRIVATE KEY" not in (directory / "identity.json").read_text()


def test_save_twice_replaces_atomically(identity: Identity, tmp_path: Path) -> None:
    identity.save(tmp_path)
    (tmp_path / "identity").chmod(0o755)
    identity.save(tmp_path)
    assert _mode(tmp_path / "identity") == 0o700
    assert Identity.load(tmp_path) == identity


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_refuses_key_readable_by_others(identity: Identity, tmp_path: Path, mode: int) -> None:
    directory = identity.save(tmp_path)
    (directory / "edge.key").chmod(mode)
    with pytest.raises(IdentityError, match=r"chmod 600 .*edge\.key"):
        Identity.load(tmp_path)


def test_missing_identity(tmp_path: Path) -> None:
    assert not Identity.exists(tmp_path)
    with pytest.raises(IdentityError, match="register"):
        Identity.load(tmp_path)


def test_corrupt_metadata(identity: Identity, tmp_path: Path) -> None:
    directory = identity.save(tmp_path)
    (directory / "identity.json").write_text("{not json")
    with pytest.raises(IdentityError, match="not valid JSON"):
        Identity.load(tmp_path)
    (directory / "identity.json").write_text(json.dumps({"version": 1, "edge_id": "edge_1"}))
    with pytest.raises(IdentityError, match="environment_id is missing"):
        Identity.load(tmp_path)


def test_corrupt_certificate(identity: Identity, tmp_path: Path) -> None:
    directory = identity.save(tmp_path)
    (directory / "edge.crt").write_bytes(b"garbage")
    with pytest.raises(IdentityError, match="not valid PEM"):
        Identity.load(tmp_path)


def test_key_that_does_not_match_the_cert(identity: Identity, tmp_path: Path) -> None:
    directory = identity.save(tmp_path)
    other_key, _ = generate_key_and_csr()
    (directory / "edge.key").write_bytes(other_key)
    with pytest.raises(IdentityError, match="does not belong"):
        Identity.load(tmp_path)


def test_cert_from_another_ca(identity: Identity, tmp_path: Path, clock: FakeClock) -> None:
    directory = identity.save(tmp_path / "state")
    other = CertificateAuthority.load_or_create(tmp_path / "other", clock=clock)
    (directory / "ca.crt").write_bytes(other.ca_cert_pem)
    with pytest.raises(IdentityError, match="not issued by the stored CA"):
        Identity.load(tmp_path / "state")


def test_cert_naming_another_edge(identity: Identity, tmp_path: Path) -> None:
    directory = identity.save(tmp_path)
    meta = json.loads((directory / "identity.json").read_text())
    (directory / "identity.json").write_text(json.dumps({**meta, "edge_id": "edge_2"}))
    with pytest.raises(IdentityError, match="names edge"):
        Identity.load(tmp_path)


def test_repr_hides_the_key(identity: Identity) -> None:
    text = repr(identity)
    assert "PRIVATE KEY" not in text
    assert "edge_1" in text


def test_not_after_and_fingerprints(identity: Identity, ca: CertificateAuthority) -> None:
    cert = x509.load_pem_x509_certificate(identity.cert_pem)
    assert identity.not_after == cert.not_valid_after_utc
    assert identity.fingerprint == cert.fingerprint(hashes.SHA256()).hex()
    assert identity.ca_fingerprint == ca.fingerprint_sha256
