"""Proof-of-possession tokens: what verifies, what is refused and why, and the replay cache."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from outpost_wire.pop import MAX_TTL_S, NonceCache, PopError, audience_for, create_token, verify_token

NOW = 1_800_000_000.0
AUD = "outpost-tunnel:abc"


def _key_and_cert() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge")])
    start = datetime(2020, 1, 1, tzinfo=UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=9999))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem, cert.public_bytes(serialization.Encoding.PEM)


KEY, CERT = _key_and_cert()
OTHER_KEY, _ = _key_and_cert()


def _token(**overrides: object) -> str:
    args: dict[str, object] = {
        "key_pem": KEY,
        "cert_pem": CERT,
        "edge_id": "edge_1",
        "audience": AUD,
        "now": NOW,
    }
    args.update(overrides)
    return create_token(**args)  # type: ignore[arg-type]


def _reason(token: str, now: float = NOW, audience: str = AUD) -> str:
    with pytest.raises(PopError) as info:
        verify_token(token, audience=audience, now=now)
    return info.value.reason


def test_a_good_token_verifies_and_carries_the_certificate() -> None:
    claims = verify_token(_token(nonce="n1"), audience=AUD, now=NOW + 5)
    assert claims.edge_id == "edge_1"
    assert claims.nonce == "n1"
    assert claims.expires_at - claims.issued_at == 30
    cert = x509.load_pem_x509_certificate(CERT)
    assert claims.cert_der == cert.public_bytes(serialization.Encoding.DER)


def test_refusals_say_why() -> None:
    assert _reason(_token(key_pem=OTHER_KEY)) == "bad_signature"
    assert _reason(_token(), now=NOW + 30 + 31) == "expired"
    assert _reason(_token(now=NOW + 120)) == "not_yet_valid"
    assert _reason(_token(ttl_s=MAX_TTL_S + 1)) == "bad_lifetime"
    assert _reason(_token(), audience="outpost-tunnel:other") == "wrong_audience"
    assert _reason("garbage") == "malformed"
    assert _reason("a.b") == "malformed"
    assert _reason("x" * 10_000) == "malformed"
    # Deeply nested claims (a RecursionError traceback before) and claims that are not UTF-8.
    nested = base64.urlsafe_b64encode(b"[" * 2500).rstrip(b"=").decode()
    assert _reason(f"{nested}.c2ln") == "malformed"
    not_utf8 = base64.urlsafe_b64encode(b"\xff\xfe{}").rstrip(b"=").decode()
    assert _reason(f"{not_utf8}.c2ln") == "malformed"


def test_tampering_with_the_claims_breaks_the_signature() -> None:
    import base64
    import json

    payload, sig = _token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["edge_id"] = "edge_2"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert _reason(f"{forged}.{sig}") == "bad_signature"


def test_clock_skew_is_tolerated_within_bounds() -> None:
    verify_token(_token(now=NOW + 20), audience=AUD, now=NOW)  # edge clock 20 s ahead
    verify_token(_token(now=NOW - 50), audience=AUD, now=NOW)  # expired 20 s ago by our clock


def test_nonce_cache_refuses_replays_until_the_token_is_dead() -> None:
    cache = NonceCache(skew_s=30)
    claims = verify_token(_token(nonce="same"), audience=AUD, now=NOW)
    cache.use(claims, NOW)
    with pytest.raises(PopError) as info:
        cache.use(claims, NOW + 10)
    assert info.value.reason == "replayed"
    cache.use(verify_token(_token(nonce="other"), audience=AUD, now=NOW), NOW)
    assert len(cache) == 2


def test_nonce_cache_is_bounded_and_forgets_dead_nonces() -> None:
    cache = NonceCache(skew_s=0, max_entries=2)
    for nonce in ("a", "b"):
        cache.use(verify_token(_token(nonce=nonce), audience=AUD, now=NOW), NOW)
    with pytest.raises(PopError) as info:
        cache.use(verify_token(_token(nonce="c"), audience=AUD, now=NOW), NOW)
    assert info.value.reason == "busy"
    later = NOW + 31  # a and b are past exp: forgotten, room again
    cache.use(verify_token(_token(nonce="d", now=later), audience=AUD, now=later), later)
    assert len(cache) == 1


def test_audience_is_the_ca_fingerprint() -> None:
    aud = audience_for(CERT)
    assert aud.startswith("outpost-tunnel:") and len(aud) == len("outpost-tunnel:") + 64
