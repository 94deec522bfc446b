"""Helpers of the tunnel transport tests (WebSocket and mTLS)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge_agent.identity import EDGE_URI_PREFIX, ENVIRONMENT_URI_PREFIX, Identity


async def connected_edges(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The control plane's connected edges, as its admin API lists them."""
    r = await api.get("/v1/connected_edges")
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def self_signed_edge_cert(identity: Identity) -> tuple[bytes, bytes]:
    """A key and a certificate naming our edge, issued by a CA the control plane does not know."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "foreign")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(EDGE_URI_PREFIX + identity.edge_id),
                    x509.UniformResourceIdentifier(ENVIRONMENT_URI_PREFIX + identity.environment_id),
                ]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)
