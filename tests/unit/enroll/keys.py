"""Key and CSR helpers for the enrollment tests."""

from __future__ import annotations

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import NameOID


def csr_for(key: CertificateIssuerPrivateKeyTypes, *, cn: str = "whatever", dns: str | None = None) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    )
    if dns is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    edwards = isinstance(key, ed448.Ed448PrivateKey | ed25519.Ed25519PrivateKey)
    algorithm = None if edwards else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(serialization.Encoding.PEM)


def ec_csr(**kwargs: str) -> tuple[ec.EllipticCurvePrivateKey, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, csr_for(key, **kwargs)


def tampered_signature_csr() -> bytes:
    """A CSR whose signature no longer verifies (last byte of the signature flipped)."""
    _, pem = ec_csr()
    der = bytearray(x509.load_pem_x509_csr(pem).public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01
    return x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM)


def foreign_key_csr() -> bytes:
    """A CSR naming someone else's public key: signed by key A, carrying key B."""
    key_a, pem = ec_csr()
    key_b = ec.generate_private_key(ec.SECP256R1())
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    der = x509.load_pem_x509_csr(pem).public_bytes(serialization.Encoding.DER)
    swapped = der.replace(key_a.public_key().public_bytes(*spki), key_b.public_key().public_bytes(*spki))
    assert swapped != der
    return x509.load_der_x509_csr(swapped).public_bytes(serialization.Encoding.PEM)


def rsa_csr(bits: int) -> bytes:
    return csr_for(rsa.generate_private_key(public_exponent=65537, key_size=bits))
