"""The CA certificate a tunnel trusts, checked and summarized: one PEM, one X.509 certificate.

:func:`parse_ca_certificate` takes what an API caller sent as ``ca_certificate_pem`` and refuses,
with an :class:`~control_plane.errors.InvalidRequest` naming the reason, anything but exactly one
PEM ``CERTIFICATE`` block of at most :data:`MAX_PEM_BYTES` (UTF-8) that ``cryptography`` parses:
no private key of any kind, no second certificate, nothing that is not PEM. Text around the block
(comments, blank lines) is allowed, as ``openssl x509`` writes it. The certificate's validity is
not judged here (an expired CA is accepted and shows its ``expires_at``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from control_plane.errors import InvalidRequest

__all__ = ["MAX_PEM_BYTES", "CaCertificate", "parse_ca_certificate"]

MAX_PEM_BYTES = 8 * 1024
_PARAM = "ca_certificate_pem"
_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")


@dataclass(frozen=True, slots=True)
class CaCertificate:
    pem: str  # the certificate block alone, re-encoded
    fingerprint: str  # lowercase hex sha256 of the DER encoding
    expires_at: datetime  # not_valid_after, UTC


def parse_ca_certificate(text: str) -> CaCertificate:
    """The one certificate in ``text``; raises :class:`InvalidRequest` (``param``
    ``ca_certificate_pem``) for anything else."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PEM_BYTES:
        raise InvalidRequest(f"{_PARAM} must be at most {MAX_PEM_BYTES} bytes", param=_PARAM)
    labels = _BEGIN.findall(text)
    if any("PRIVATE KEY" in label for label in labels):
        raise InvalidRequest(f"{_PARAM} must not contain private-key material", param=_PARAM)
    if not labels:
        raise InvalidRequest(f"{_PARAM} is not a PEM-encoded certificate", param=_PARAM)
    if labels != ["CERTIFICATE"]:
        shown = ", ".join(sorted(set(labels)))
        raise InvalidRequest(
            f"{_PARAM} must contain exactly one CERTIFICATE block (found {len(labels)}: {shown})",
            param=_PARAM,
        )
    try:
        cert = x509.load_pem_x509_certificate(text.encode("utf-8"))
    except (ValueError, UnicodeEncodeError):
        raise InvalidRequest(f"{_PARAM} is not a valid X.509 certificate", param=_PARAM) from None
    der = cert.public_bytes(Encoding.DER)
    return CaCertificate(
        pem=cert.public_bytes(Encoding.PEM).decode("ascii"),
        fingerprint=hashlib.sha256(der).hexdigest(),
        expires_at=cert.not_valid_after_utc.astimezone(UTC),
    )
