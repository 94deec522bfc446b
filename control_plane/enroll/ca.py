"""The control plane's small certificate authority.

One EC P-256 key signs every certificate of the tunnel:

* **edge client certificates**, from a CSR the edge made with a key that never leaves it. The CSR's
  subject and extensions are ignored; the CA writes its own: ``CN=<edge_id>``, SAN URIs
  ``urn:outpost:edge:<edge_id>`` and ``urn:outpost:environment:<environment_id>``, EKU clientAuth.
* **the tunnel server certificate** (EKU serverAuth), kept next to the CA and reused while it is
  valid and names the same hosts.

Files, in one directory of mode 0700::

    ca.key      0600  the CA's private key (PKCS#8 PEM)
    ca.crt      0644  the CA certificate (PEM); its sha256 fingerprint is what edges pin
    server.key  0600  tunnel server key
    server.crt  0644  tunnel server certificate
    .lock             serialises creation between processes

Loading and creation do blocking file I/O: call them at startup, not on the event loop's hot path.
Signing is pure CPU and takes well under a millisecond.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from control_plane.errors import ControlPlaneError, InvalidRequest
from outpost_wire.files import write_atomic

__all__ = [
    "EDGE_URI_PREFIX",
    "ENVIRONMENT_URI_PREFIX",
    "CAError",
    "CertificateAuthority",
    "edge_id_from_cert",
    "environment_id_from_cert",
    "load_csr",
]

logger = logging.getLogger(__name__)

EDGE_URI_PREFIX = "urn:outpost:edge:"
ENVIRONMENT_URI_PREFIX = "urn:outpost:environment:"

CA_VALIDITY_DAYS = 3650
SERVER_CERT_VALIDITY_DAYS = 365
MAX_EDGE_CERT_VALIDITY_DAYS = 3650
# Certificates start a little in the past so that a peer whose clock is slightly behind accepts them.
CLOCK_SKEW = timedelta(minutes=5)
# A stored server certificate is replaced when less than this is left of it.
SERVER_CERT_RENEW_BEFORE = timedelta(days=30)
MIN_RSA_BITS = 2048
_ALLOWED_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                          r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")  # fmt: skip

_CA_KEY = "ca.key"
_CA_CERT = "ca.crt"
_SERVER_KEY = "server.key"
_SERVER_CERT = "server.crt"


class CAError(ControlPlaneError):
    """The CA's files are missing, partial, corrupt or readable by others."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class CertificateAuthority:
    """Issues and checks the tunnel's certificates. Build one with :meth:`load_or_create`."""

    def __init__(
        self,
        directory: Path,
        key: ec.EllipticCurvePrivateKey,
        cert: x509.Certificate,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if _spki(key.public_key()) != _spki(cert.public_key()):
            raise CAError(f"{directory / _CA_CERT} does not belong to {directory / _CA_KEY}")
        self._directory = directory
        self._key = key
        self._cert = cert
        self._clock = clock

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def load_or_create(
        cls,
        directory: Path,
        *,
        common_name: str = "Outpost CA",
        clock: Callable[[], datetime] = _utcnow,
    ) -> CertificateAuthority:
        """Load the CA kept in ``directory``, creating the directory and a new CA if there is none.

        Idempotent, and safe against a concurrent call in another process (a lock file serialises
        creation). Raises :class:`CAError` if only one of ``ca.key`` / ``ca.crt`` exists, if the files
        do not parse or do not match, or if ``ca.key`` is readable by group or others.
        """
        _ensure_private_dir(directory)
        with _locked(directory):
            key_path, cert_path = directory / _CA_KEY, directory / _CA_CERT
            has_key, has_cert = key_path.exists(), cert_path.exists()
            if has_key and has_cert:
                return cls._load(directory, clock=clock)
            if has_key or has_cert:
                present, missing = (key_path, cert_path) if has_key else (cert_path, key_path)
                raise CAError(
                    f"found {present} but not {missing}; refusing to create a new CA over a partial one "
                    f"(restore {missing.name} from a backup, or remove {present} on a fresh install)"
                )
            key = ec.generate_private_key(ec.SECP256R1())
            now = clock()
            name = x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Outpost"),
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                ]
            )
            cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - CLOCK_SKEW)
                .not_valid_after(now + timedelta(days=CA_VALIDITY_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=True,
                        crl_sign=True,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256())
            )
            write_atomic(key_path, _private_pem(key), 0o600)
            write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
            ca = cls(directory, key, cert, clock=clock)
            logger.info("created certificate authority in %s (sha256 %s)", directory, ca.fingerprint_sha256)
            return ca

    @classmethod
    def _load(cls, directory: Path, *, clock: Callable[[], datetime]) -> CertificateAuthority:
        key_path, cert_path = directory / _CA_KEY, directory / _CA_CERT
        mode = key_path.stat().st_mode & 0o777
        if mode & 0o077:
            raise CAError(
                f"{key_path} is accessible by group or others (mode {mode:04o}); "
                f"fix with: chmod 600 {key_path}"
            )
        try:
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise CAError(f"cannot read the CA in {directory}: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CAError(f"{key_path} is not an EC private key")
        if cert.not_valid_after_utc <= clock():
            raise CAError(f"the CA certificate {cert_path} expired at {cert.not_valid_after_utc.isoformat()}")
        return cls(directory, key, cert, clock=clock)

    # -- facts ----------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        """The directory holding the CA's files."""
        return self._directory

    @property
    def certificate(self) -> x509.Certificate:
        """The CA certificate."""
        return self._cert

    @property
    def ca_cert_pem(self) -> bytes:
        """The CA certificate, PEM: what edges use to verify the tunnel server."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def fingerprint_sha256(self) -> str:
        """sha256 of the CA certificate's DER, lower-case hex without separators."""
        return self._cert.fingerprint(hashes.SHA256()).hex()

    # -- issuing --------------------------------------------------------------------------------
    def sign_edge_csr(
        self,
        csr_pem: bytes,
        edge_id: str,
        environment_id: str,
        *,
        valid_days: int = 365,
        now: datetime | None = None,
    ) -> x509.Certificate:
        """Issue a client certificate for ``edge_id`` over the public key in ``csr_pem``.

        The CSR's signature must verify (proof that the requester holds the key); its subject and
        extensions are ignored. The certificate never outlives the CA. Raises :class:`InvalidRequest`
        for an unparseable CSR, a bad signature, RSA keys under 2048 bits, or other key types than
        RSA, EC P-256/384/521 and Ed25519.
        """
        _check_id("edge_id", edge_id)
        _check_id("environment_id", environment_id)
        if not 1 <= valid_days <= MAX_EDGE_CERT_VALIDITY_DAYS:
            raise InvalidRequest(f"valid_days must be 1..{MAX_EDGE_CERT_VALIDITY_DAYS}", param="valid_days")
        csr = load_csr(csr_pem)
        public_key = csr.public_key()
        now = self._clock() if now is None else now
        not_after = min(now + timedelta(days=valid_days), self._cert.not_valid_after_utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, edge_id)]))
            .issuer_name(self._cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_leaf_key_usage(), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.UniformResourceIdentifier(EDGE_URI_PREFIX + edge_id),
                        x509.UniformResourceIdentifier(ENVIRONMENT_URI_PREFIX + environment_id),
                    ]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        return builder.sign(self._key, hashes.SHA256())

    def issue_server_cert(self, hostnames: list[str], ips: list[str]) -> tuple[bytes, bytes]:
        """PEM ``(key, certificate)`` for the tunnel server, EKU serverAuth, signed by this CA.

        Stored as ``server.key`` / ``server.crt`` and reused while it is issued by this CA, matches its
        key, names exactly ``hostnames`` and ``ips``, and has more than 30 days left; otherwise a new
        key and certificate replace it. Raises :class:`InvalidRequest` for a bad host name or IP.
        """
        dns_names = sorted({_check_hostname(h) for h in hostnames})
        addresses = sorted({_check_ip(i) for i in ips}, key=lambda a: (a.version, int(a)))
        if not dns_names and not addresses:
            raise InvalidRequest(
                "the server certificate needs at least one host name or IP", param="hostnames"
            )
        wanted_sans = _san_set(dns_names, addresses)
        key_path, cert_path = self._directory / _SERVER_KEY, self._directory / _SERVER_CERT
        with _locked(self._directory):
            reused = self._load_server_cert(key_path, cert_path, wanted_sans)
            if reused is not None:
                return reused
            key = ec.generate_private_key(ec.SECP256R1())
            now = self._clock()
            first_name = dns_names[0] if dns_names else str(addresses[0])
            general_names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
            general_names += [x509.IPAddress(a) for a in addresses]
            cert = (
                x509.CertificateBuilder()
                .subject_name(
                    x509.Name(
                        [
                            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Outpost"),
                            x509.NameAttribute(NameOID.COMMON_NAME, first_name[:64]),
                        ]
                    )
                )
                .issuer_name(self._cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - CLOCK_SKEW)
                .not_valid_after(
                    min(now + timedelta(days=SERVER_CERT_VALIDITY_DAYS), self._cert.not_valid_after_utc)
                )
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(_leaf_key_usage(), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.SubjectAlternativeName(general_names), critical=False)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
                )
                .sign(self._key, hashes.SHA256())
            )
            key_pem = _private_pem(key)
            cert_pem = cert.public_bytes(serialization.Encoding.PEM)
            # Key first: a crash in between leaves a mismatched pair, which the next call replaces.
            write_atomic(key_path, key_pem, 0o600)
            write_atomic(cert_path, cert_pem, 0o644)
            logger.info("issued tunnel server certificate for %s", ", ".join(sorted(wanted_sans)))
            return key_pem, cert_pem

    def _load_server_cert(
        self, key_path: Path, cert_path: Path, wanted_sans: set[str]
    ) -> tuple[bytes, bytes] | None:
        """The stored server key and certificate if they can be reused, else ``None``."""
        if not (key_path.exists() and cert_path.exists()):
            return None
        if key_path.stat().st_mode & 0o077:
            logger.warning("%s is accessible by group or others; issuing a new server key", key_path)
            return None
        key_pem, cert_pem = key_path.read_bytes(), cert_path.read_bytes()
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
            cert = x509.load_pem_x509_certificate(cert_pem)
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except (ValueError, TypeError, UnsupportedAlgorithm, x509.ExtensionNotFound):
            logger.warning("stored tunnel server certificate is unreadable; issuing a new one")
            return None
        have_sans = _san_set(san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress))
        fresh = cert.not_valid_after_utc - self._clock() > SERVER_CERT_RENEW_BEFORE
        matches_key = _spki(key.public_key()) == _spki(cert.public_key())
        if fresh and matches_key and have_sans == wanted_sans and self.verify_issued_by_us(cert):
            return key_pem, cert_pem
        return None

    # -- checking -------------------------------------------------------------------------------
    def verify_issued_by_us(self, cert: x509.Certificate) -> bool:
        """Whether ``cert`` names this CA as issuer and carries a valid signature of its key.

        Validity dates, purpose and revocation are not checked here.
        """
        try:
            cert.verify_directly_issued_by(self._cert)
        except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
            return False
        return True


# -- helpers for peers' certificates ------------------------------------------------------------------
def _uri_with_prefix(cert: x509.Certificate, prefix: str, what: str) -> str:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise InvalidRequest(f"certificate has no subjectAltName carrying an outpost {what} id") from None
    found = [
        uri[len(prefix) :]
        for uri in san.get_values_for_type(x509.UniformResourceIdentifier)
        if uri.startswith(prefix) and len(uri) > len(prefix)
    ]
    if len(found) != 1:
        raise InvalidRequest(f"certificate must carry exactly one {prefix}<id> URI, found {len(found)}")
    return found[0]


def edge_id_from_cert(cert: x509.Certificate) -> str:
    """The edge id in the ``urn:outpost:edge:<id>`` SAN URI. Raises :class:`InvalidRequest`."""
    return _uri_with_prefix(cert, EDGE_URI_PREFIX, "edge")


def environment_id_from_cert(cert: x509.Certificate) -> str:
    """The environment id in the ``urn:outpost:environment:<id>`` SAN URI. Raises :class:`InvalidRequest`."""
    return _uri_with_prefix(cert, ENVIRONMENT_URI_PREFIX, "environment")


def load_csr(csr_pem: bytes) -> x509.CertificateSigningRequest:
    """Parse a PEM CSR and check its signature and key type. Raises :class:`InvalidRequest`."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
        public_key = csr.public_key()
        signature_ok = csr.is_signature_valid
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        message = f"csr_pem is not a valid PEM certificate signing request ({exc})"
        raise InvalidRequest(message, param="csr_pem") from exc
    if not signature_ok:
        raise InvalidRequest("the CSR's signature does not verify", param="csr_pem")
    if isinstance(public_key, rsa.RSAPublicKey):
        if public_key.key_size < MIN_RSA_BITS:
            raise InvalidRequest(
                f"RSA key of {public_key.key_size} bits is too small (minimum {MIN_RSA_BITS})",
                param="csr_pem",
            )
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        if not isinstance(public_key.curve, _ALLOWED_CURVES):
            raise InvalidRequest(f"EC curve {public_key.curve.name} is not supported", param="csr_pem")
    elif not isinstance(public_key, ed25519.Ed25519PublicKey):
        raise InvalidRequest(f"key type {type(public_key).__name__} is not supported", param="csr_pem")
    return csr


# -- private helpers ----------------------------------------------------------------------------------
def _leaf_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def _check_id(param: str, value: str) -> None:
    if not _ID_RE.fullmatch(value):
        raise InvalidRequest(f"{param} must be 1-64 characters of [A-Za-z0-9._-]", param=param)


def _check_hostname(name: str) -> str:
    if not _HOSTNAME_RE.fullmatch(name):
        raise InvalidRequest(f"{name!r} is not a valid host name", param="hostnames")
    return name.lower()


def _check_ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        raise InvalidRequest(f"{value!r} is not an IP address", param="ips") from None


def _san_set(dns_names: Iterable[str], addresses: Iterable[object]) -> set[str]:
    return {f"dns:{n.lower()}" for n in dns_names} | {f"ip:{a}" for a in addresses}


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ensure_private_dir(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = directory.stat().st_mode & 0o777
    if mode != 0o700:
        logger.warning("tightening permissions of %s from %04o to 0700", directory, mode)
        directory.chmod(0o700)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
