"""Envelope encryption: round trip, tampering, associated data, wrong keys, re-wrapping."""

from __future__ import annotations

import dataclasses

import pytest

from control_plane.vault import (
    DecryptionFailed,
    FileKek,
    Keyring,
    SealedSecret,
    UnknownKey,
    rewrap,
    seal,
    unseal,
)
from control_plane.vault.binding import credential_aad

AAD = credential_aad(
    "vlt_1", "vcrd_1", {"type": "static_bearer", "mcp_server_url": "https://mcp.example.com/x"}
)
PLAINTEXT = b'{"token":"s3cr3t-value"}'


async def test_round_trip() -> None:
    kek = FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    assert sealed.key_id == kek.key_id
    assert PLAINTEXT not in sealed.ciphertext
    assert await unseal(sealed, AAD, Keyring(kek)) == PLAINTEXT
    assert await unseal(SealedSecret.from_json(sealed.to_json()), AAD, Keyring(kek)) == PLAINTEXT


async def test_a_fresh_data_key_and_nonce_every_time() -> None:
    kek = FileKek.generate()
    one, two = await seal(PLAINTEXT, AAD, kek), await seal(PLAINTEXT, AAD, kek)
    assert one.wrapped_dek != two.wrapped_dek
    assert one.nonce != two.nonce
    assert one.ciphertext != two.ciphertext


def _flip(data: bytes, index: int = 0) -> bytes:
    return data[:index] + bytes([data[index] ^ 1]) + data[index + 1 :]


@pytest.mark.parametrize("field", ["wrapped_dek", "nonce", "ciphertext"])
@pytest.mark.parametrize("index", [0, -1])
async def test_tampering_with_any_field_fails(field: str, index: int) -> None:
    kek = FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    value = getattr(sealed, field)
    tampered = dataclasses.replace(sealed, **{field: _flip(value, index % len(value))})
    with pytest.raises(DecryptionFailed):
        await unseal(tampered, AAD, Keyring(kek))


async def test_truncation_fails() -> None:
    kek = FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    for field in ("wrapped_dek", "nonce", "ciphertext"):
        with pytest.raises(DecryptionFailed):
            await unseal(
                dataclasses.replace(sealed, **{field: getattr(sealed, field)[:-1]}), AAD, Keyring(kek)
            )


async def test_tampering_with_the_key_id_fails() -> None:
    kek, other = FileKek.generate(), FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    with pytest.raises(UnknownKey):
        await unseal(dataclasses.replace(sealed, key_id="kek_nope"), AAD, Keyring(kek))
    with pytest.raises(DecryptionFailed):  # names a key we hold, but not the one that wrapped it
        await unseal(dataclasses.replace(sealed, key_id=other.key_id), AAD, Keyring(kek, [other]))


@pytest.mark.parametrize(
    "aad",
    [
        credential_aad(
            "vlt_1", "vcrd_2", {"type": "static_bearer", "mcp_server_url": "https://mcp.example.com/x"}
        ),
        credential_aad(
            "vlt_2", "vcrd_1", {"type": "static_bearer", "mcp_server_url": "https://mcp.example.com/x"}
        ),
        credential_aad(
            "vlt_1", "vcrd_1", {"type": "static_bearer", "mcp_server_url": "https://evil.example/x"}
        ),
        credential_aad(
            "vlt_1", "vcrd_1", {"type": "mcp_oauth", "mcp_server_url": "https://mcp.example.com/x"}
        ),
        b"",
    ],
)
async def test_other_associated_data_fails(aad: bytes) -> None:
    kek = FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    with pytest.raises(DecryptionFailed):
        await unseal(sealed, aad, Keyring(kek))


async def test_the_wrapped_key_is_bound_too() -> None:
    """Splicing a wrapped data key from another row into this one fails at the unwrap."""
    kek = FileKek.generate()
    mine = await seal(PLAINTEXT, AAD, kek)
    other_aad = credential_aad(
        "vlt_1", "vcrd_9", {"type": "static_bearer", "mcp_server_url": "https://a.example/"}
    )
    theirs = await seal(b"{}", other_aad, kek)
    with pytest.raises(DecryptionFailed):
        await unseal(dataclasses.replace(mine, wrapped_dek=theirs.wrapped_dek), AAD, Keyring(kek))


async def test_wrong_kek_fails() -> None:
    kek, impostor = FileKek.generate(), FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    with pytest.raises(UnknownKey):
        await unseal(sealed, AAD, Keyring(impostor))
    # An impostor key under the same key id (a swapped key file) fails to authenticate.
    forged = dataclasses.replace(sealed, key_id=impostor.key_id)
    with pytest.raises(DecryptionFailed):
        await unseal(forged, AAD, Keyring(impostor))


async def test_rewrap_changes_only_the_wrapped_key() -> None:
    old, new = FileKek.generate(), FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, old)
    moved = await rewrap(sealed, AAD, Keyring(old), new)
    assert moved.key_id == new.key_id
    assert (moved.nonce, moved.ciphertext) == (sealed.nonce, sealed.ciphertext)
    assert await unseal(moved, AAD, Keyring(new)) == PLAINTEXT  # the old key is not needed any more
    assert await rewrap(moved, AAD, Keyring(new), new) is moved
    with pytest.raises(DecryptionFailed):
        await rewrap(sealed, b"other", Keyring(old), new)


def test_malformed_stored_form() -> None:
    for bad in (
        {},
        {"key_id": 1, "wrapped_dek": "", "nonce": "", "ciphertext": ""},
        {"key_id": "k", "wrapped_dek": "!!", "nonce": "", "ciphertext": ""},
    ):
        with pytest.raises(DecryptionFailed):
            SealedSecret.from_json(bad)


async def test_reprs_show_no_key_material() -> None:
    kek = FileKek.generate()
    sealed = await seal(PLAINTEXT, AAD, kek)
    assert repr(kek) == f"FileKek(key_id={kek.key_id!r})"
    assert sealed.ciphertext.hex() not in repr(sealed)
    assert "wrapped" not in repr(sealed)
