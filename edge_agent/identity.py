"""The edge's identity: its private key, the client certificate the control plane issued for it, and
the CA certificate it trusts for the tunnel.

The key is generated here and never leaves the edge (only a CSR does). On disk, under the state
directory::

    identity/             0700
        edge.key          0600  private key (PKCS#8 PEM); refused on load if group/world accessible
        edge.crt          0644  client certificate (PEM)
        ca.crt            0644  the control plane's CA (PEM)
        identity.json     0600  edge_id, environment_id, control_plane_url, tunnel_address
        edge.key.pending  0600  only during a certificate renewal: the new key (edge_agent.renew)
        edge.crt.pending  0644  only while a renewal is being committed: the new certificate
        .renew.lock       0600  serialises renewals (the daemon and `outpost-edge renew-certificate`)

Each file is written through a temp file and a rename, ``identity.json`` last; :meth:`Identity.load`
checks that the pieces belong together, so a torn write is reported instead of used.

A renewal replaces ``edge.key`` and ``edge.crt`` together (:meth:`Identity.commit_renewal`): the new
key is on disk (``edge.key.pending``) before it is sent anywhere, the new certificate is written
as ``edge.crt.pending``, then both are renamed into place. :meth:`Identity.load` finishes a commit
that a crash interrupted (a pending certificate that belongs to the pending or current key and was
issued by the CA) and drops a pending certificate that does not; a pending key on its own (the
answer never arrived or was never saved) is left for the next renewal to discard. The WebSocket
transport hands ``edge.crt`` / ``edge.key`` to its TLS context (:meth:`Identity.client_cert_files`).

This module depends on ``cryptography`` and the standard library only (no control-plane imports).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field, replace
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
    "discard_pending_key",
    "generate_key_and_csr",
    "write_pending_key",
]

log = logging.getLogger(__name__)

# The control plane's CA writes these SAN URIs (control_plane.enroll.ca); kept in step by hand
# because the two packages never import each other.
EDGE_URI_PREFIX = "urn:outpost:edge:"
ENVIRONMENT_URI_PREFIX = "urn:outpost:environment:"

IDENTITY_DIR = "identity"
_KEY_FILE = "edge.key"
_CERT_FILE = "edge.crt"
_CA_FILE = "ca.crt"
_META_FILE = "identity.json"
_PENDING_KEY_FILE = "edge.key.pending"
_PENDING_CERT_FILE = "edge.crt.pending"
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

    @property
    def not_before(self) -> datetime:
        """When the client certificate became valid (UTC)."""
        return self.certificate.not_valid_before_utc

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

    def commit_renewal(self, key_pem: bytes, cert_pem: bytes) -> Identity:
        """Make ``key_pem`` / ``cert_pem`` (a renewed certificate for this edge) the stored identity
        and return it. The key must already be on disk as the pending key
        (:func:`write_pending_key`). The CA and ``identity.json`` stay as they are.

        Raises :class:`IdentityError` if the new pieces do not belong together (nothing is changed
        then) or this identity is not stored on disk. Blocking file I/O.
        """
        if self.directory is None:
            raise IdentityError("this identity is not stored on disk: nothing to renew")
        renewed = replace(self, key_pem=key_pem, cert_pem=cert_pem)
        renewed.verify()
        directory = self.directory
        pending_key = directory / _PENDING_KEY_FILE
        try:
            on_disk = pending_key.read_bytes()
        except OSError as exc:
            raise IdentityError(f"the pending key {pending_key} is gone: {exc.strerror}") from None
        if on_disk != key_pem:
            raise IdentityError(f"{pending_key} holds another key than the one being committed")
        write_atomic(directory / _PENDING_CERT_FILE, cert_pem, 0o644)
        # Key, then certificate: a crash in between leaves edge.crt.pending, which load() finishes.
        os.replace(pending_key, directory / _KEY_FILE)
        os.replace(directory / _PENDING_CERT_FILE, directory / _CERT_FILE)
        _fsync_dir(directory)
        return renewed

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
        _finish_interrupted_renewal(directory)
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


def write_pending_key(directory: Path, key_pem: bytes) -> Path:
    """Store the key of a renewal in progress (0600, atomically) before its CSR goes anywhere."""
    path = directory / _PENDING_KEY_FILE
    write_atomic(path, key_pem, 0o600)
    return path


def discard_pending_key(directory: Path) -> bool:
    """Remove a pending key (and certificate) left by a renewal that did not finish; whether
    there was one. The current identity is untouched."""
    found = False
    for name in (_PENDING_KEY_FILE, _PENDING_CERT_FILE):
        path = directory / name
        if path.exists():
            found = True
            path.unlink(missing_ok=True)
    return found


# -- helpers --------------------------------------------------------------------------------------------
def _finish_interrupted_renewal(directory: Path) -> None:
    """Complete a renewal commit a crash interrupted: ``edge.crt.pending`` is installed if it belongs
    to the pending key (or to ``edge.key``, already replaced) and was issued by the stored CA;
    otherwise it is removed. Problems are left for the normal checks to report."""
    pending_cert = directory / _PENDING_CERT_FILE
    if not pending_cert.exists():
        return
    pending_key, key_path = directory / _PENDING_KEY_FILE, directory / _KEY_FILE
    source = pending_key if pending_key.exists() else key_path
    try:
        cert = x509.load_pem_x509_certificate(pending_cert.read_bytes())
        ca = x509.load_pem_x509_certificate((directory / _CA_FILE).read_bytes())
        cert.verify_directly_issued_by(ca)
        key = serialization.load_pem_private_key(source.read_bytes(), password=None)
        if _spki(_public_key(key)) != _spki(cert.public_key()):
            raise ValueError("it is not for the pending or the current key")
    except (OSError, ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm) as exc:
        log.warning("discarding an unusable pending certificate in %s: %s", directory, exc)
        with contextlib.suppress(OSError):
            pending_cert.unlink()
        return
    try:
        if source == pending_key:
            os.replace(pending_key, key_path)
        os.replace(pending_cert, directory / _CERT_FILE)
        _fsync_dir(directory)
    except OSError as exc:  # read-only (doctor as another user?): the checks report the rest
        log.warning("cannot finish the interrupted certificate renewal in %s: %s", directory, exc)
        return
    log.warning("finished an interrupted certificate renewal: the new certificate is in %s", directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
