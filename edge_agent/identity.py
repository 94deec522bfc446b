"""The edge's identity: its private key, the client certificate the control plane issued for it, and
the CA certificate it trusts for the tunnel.

The key is generated here and never leaves the edge (only a CSR does). On disk, under the state
directory::

    identity/             0700
        edge.key          0600  private key (PKCS#8 PEM); refused on load if group/world accessible
        edge.crt          0644  client certificate (PEM)
        ca.crt            0644  the control plane's CA (PEM)
        identity.json     0600  edge_id, environment_id, control_plane_url, tunnel_address

Each file is written through a temp file and a rename, ``identity.json`` last; :meth:`Identity.load`
checks that the pieces belong together, so a torn write is reported instead of used. The WebSocket
transport hands ``edge.crt`` / ``edge.key`` to its TLS context (:meth:`Identity.client_cert_files`).

This module depends on ``cryptography`` and the standard library only (no control-plane imports).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.x509.oid import NameOID

from edge_agent.errors import EdgeError
from outpost_wire.files import write_atomic

__all__ = [
    "EDGE_URI_PREFIX",
    "ENVIRONMENT_URI_PREFIX",
    "IDENTITY_DIR",
    "Identity",
    "IdentityError",
    "generate_key_and_csr",
]

# The control plane's CA writes these SAN URIs (control_plane.enroll.ca); kept in step by hand
# because the two packages never import each other.
EDGE_URI_PREFIX = "urn:outpost:edge:"
ENVIRONMENT_URI_PREFIX = "urn:outpost:environment:"

IDENTITY_DIR = "identity"
_KEY_FILE = "edge.key"
_CERT_FILE = "edge.crt"
_CA_FILE = "ca.crt"
_META_FILE = "identity.json"
_FORMAT_VERSION = 1


class IdentityError(EdgeError):
    """The edge's identity is missing, corrupt, inconsistent or stored with unsafe permissions."""


def generate_key_and_csr() -> tuple[bytes, bytes]:
    """A new EC P-256 private key and a CSR for it, both PEM: ``(key_pem, csr_pem)``.

    The CSR's subject is a placeholder: the control plane sets the certificate's names itself.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "outpost-edge")]))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class Identity:
    """Everything the edge needs to open the tunnel. ``key_pem`` is kept out of ``repr``."""

    edge_id: str
    environment_id: str
    key_pem: bytes = field(repr=False)
    cert_pem: bytes = field(repr=False)
    ca_pem: bytes = field(repr=False)
    control_plane_url: str
    tunnel_address: str | None = None
    #: The ``identity`` directory this was loaded from or saved to (``None``: only in memory).
    directory: Path | None = field(default=None, compare=False, repr=False)

    generate_key_and_csr = staticmethod(generate_key_and_csr)

    # -- facts ----------------------------------------------------------------------------------
    @property
    def certificate(self) -> x509.Certificate:
        """The client certificate, parsed."""
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def not_after(self) -> datetime:
        """When the client certificate expires (UTC)."""
        return self.certificate.not_valid_after_utc

    @property
    def fingerprint(self) -> str:
        """sha256 hex of the client certificate's DER (what the control plane stores)."""
        return self.certificate.fingerprint(hashes.SHA256()).hex()

    @property
    def ca_fingerprint(self) -> str:
        """sha256 hex of the CA certificate's DER (what ``register`` pins)."""
        return x509.load_pem_x509_certificate(self.ca_pem).fingerprint(hashes.SHA256()).hex()

    def client_cert_files(self) -> tuple[Path, Path] | None:
        """``(certificate, key)`` files holding exactly this identity's certificate and key, for a
        TLS client context (``ssl`` loads them from files only); ``None`` if there are none.

        Blocking file I/O (two small reads)."""
        if self.directory is None:
            return None
        cert_path, key_path = self.directory / _CERT_FILE, self.directory / _KEY_FILE
        try:
            if cert_path.read_bytes() != self.cert_pem or key_path.read_bytes() != self.key_pem:
                return None  # replaced on disk (registered again) since we read it
        except OSError:
            return None
        return cert_path, key_path

    # -- checks ---------------------------------------------------------------------------------
    def verify(self) -> None:
        """Check that the pieces belong together: the certificate is for our key, was issued by the
        CA, and names our edge and environment. Raises :class:`IdentityError`."""
        try:
            key = serialization.load_pem_private_key(self.key_pem, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise IdentityError("the private key is not a valid unencrypted PEM key") from None
        try:
            cert = x509.load_pem_x509_certificate(self.cert_pem)
            ca = x509.load_pem_x509_certificate(self.ca_pem)
        except ValueError:
            raise IdentityError("the certificate or the CA certificate is not valid PEM") from None
        if _spki(_public_key(key)) != _spki(cert.public_key()):
            raise IdentityError("the certificate does not belong to the private key")
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
            raise IdentityError("the certificate was not issued by the stored CA") from None
        edge_ids, environment_ids = _outpost_ids(cert)
        if edge_ids != [self.edge_id] or environment_ids != [self.environment_id]:
            raise IdentityError(
                f"the certificate names edge {edge_ids} / environment {environment_ids}, "
                f"not {self.edge_id} / {self.environment_id}"
            )

    # -- storage --------------------------------------------------------------------------------
    def save(self, state_dir: Path) -> Path:
        """Write the identity under ``state_dir/identity`` (created 0700); returns that directory.

        Blocking file I/O: from async code call it through ``asyncio.to_thread``.
        """
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory = state_dir / IDENTITY_DIR
        directory.mkdir(exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        meta = {
            "version": _FORMAT_VERSION,
            "edge_id": self.edge_id,
            "environment_id": self.environment_id,
            "control_plane_url": self.control_plane_url,
            "tunnel_address": self.tunnel_address,
        }
        write_atomic(directory / _KEY_FILE, self.key_pem, 0o600)
        write_atomic(directory / _CERT_FILE, self.cert_pem, 0o644)
        write_atomic(directory / _CA_FILE, self.ca_pem, 0o644)
        write_atomic(directory / _META_FILE, (json.dumps(meta, indent=2) + "\n").encode(), 0o600)
        return directory

    @classmethod
    def exists(cls, state_dir: Path) -> bool:
        """Whether ``state_dir`` holds an identity (complete or not)."""
        directory = state_dir / IDENTITY_DIR
        return any((directory / name).exists() for name in (_KEY_FILE, _META_FILE))

    @classmethod
    def load(cls, state_dir: Path) -> Identity:
        """Read and check the identity under ``state_dir/identity``.

        Raises :class:`IdentityError` if it is missing, unreadable, inconsistent, or if the key file is
        accessible by group or others (the message says how to fix it).
        """
        directory = state_dir / IDENTITY_DIR
        key_path = directory / _KEY_FILE
        meta_path = directory / _META_FILE
        if not meta_path.exists() or not key_path.exists():
            raise IdentityError(
                f"no edge identity in {directory}: register this edge first "
                "(outpost-edge register with an enrollment token)"
            )
        try:
            mode = key_path.stat().st_mode & 0o777
        except OSError as exc:
            raise IdentityError(f"cannot read {key_path}: {exc.strerror}") from None
        if mode & 0o077:
            raise IdentityError(
                f"private key {key_path} is accessible by group or others (mode {mode:04o}); "
                f"fix with: chmod 600 {key_path}"
            )
        try:
            key_pem = key_path.read_bytes()
            cert_pem = (directory / _CERT_FILE).read_bytes()
            ca_pem = (directory / _CA_FILE).read_bytes()
            meta_raw = meta_path.read_bytes()
        except OSError as exc:
            raise IdentityError(f"cannot read the edge identity in {directory}: {exc}") from None
        meta = _parse_meta(meta_raw, meta_path)
        identity = cls(
            edge_id=meta["edge_id"],
            environment_id=meta["environment_id"],
            key_pem=key_pem,
            cert_pem=cert_pem,
            ca_pem=ca_pem,
            control_plane_url=meta["control_plane_url"],
            tunnel_address=meta["tunnel_address"],
            directory=directory,
        )
        try:
            identity.verify()
        except IdentityError as exc:
            raise IdentityError(f"edge identity in {directory} is inconsistent: {exc}") from None
        return identity


# -- helpers --------------------------------------------------------------------------------------------
def _parse_meta(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(raw)
    except ValueError:
        raise IdentityError(f"{path} is not valid JSON") from None
    if not isinstance(meta, dict) or meta.get("version") != _FORMAT_VERSION:
        raise IdentityError(f"{path} is not an identity file of version {_FORMAT_VERSION}")
    for name in ("edge_id", "environment_id", "control_plane_url"):
        if not isinstance(meta.get(name), str) or not meta[name]:
            raise IdentityError(f"{path}: {name} is missing")
    if not isinstance(meta.get("tunnel_address"), str | None):
        raise IdentityError(f"{path}: tunnel_address must be a string or null")
    meta.setdefault("tunnel_address", None)
    return meta


def _outpost_ids(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    edges = [u.removeprefix(EDGE_URI_PREFIX) for u in uris if u.startswith(EDGE_URI_PREFIX)]
    environments = [
        u.removeprefix(ENVIRONMENT_URI_PREFIX) for u in uris if u.startswith(ENVIRONMENT_URI_PREFIX)
    ]
    return edges, environments


def _public_key(key: PrivateKeyTypes) -> PublicKeyTypes:
    return key.public_key()


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
