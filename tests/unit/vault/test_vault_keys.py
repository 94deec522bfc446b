"""Key files (0600 enforced), key ids, and the keyring."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from control_plane.vault import FileKek, KeyEncryptionKey, KeyFileError, Keyring, UnknownKey
from control_plane.vault.capability import CapabilitySigner
from control_plane.vault.keys import create_key_file, read_key_file


def test_created_key_file_is_0600_and_reloads_to_the_same_key(tmp_path: Path) -> None:
    path = tmp_path / "vault.kek"
    kek = FileKek.load_or_create(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert path.stat().st_size == 32
    again = FileKek.load_or_create(path)
    assert again.key_id == kek.key_id == FileKek.load(path).key_id
    assert kek.key_id.startswith("kek_")
    assert isinstance(kek, KeyEncryptionKey)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o610, 0o601, 0o666])
def test_group_or_world_access_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "vault.kek"
    create_key_file(path)
    os.chmod(path, mode)
    with pytest.raises(KeyFileError, match="chmod 600"):
        FileKek.load(path)
    with pytest.raises(KeyFileError):
        FileKek.load_or_create(path)  # never "fixed" silently
    with pytest.raises(KeyFileError):
        CapabilitySigner.load(path)


def test_owner_read_only_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "vault.kek"
    create_key_file(path)
    os.chmod(path, 0o400)
    FileKek.load(path)


def test_wrong_size_missing_symlink_and_directory(tmp_path: Path) -> None:
    short = tmp_path / "short"
    fd = os.open(short, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"x" * 31)
    os.close(fd)
    with pytest.raises(KeyFileError, match="32 bytes"):
        FileKek.load(short)
    with pytest.raises(KeyFileError, match="does not exist"):
        FileKek.load(tmp_path / "missing")
    real = tmp_path / "real"
    create_key_file(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(KeyFileError):
        read_key_file(link)
    with pytest.raises(KeyFileError):
        FileKek.load_or_create(link)  # a symlink is not followed, nor replaced
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    with pytest.raises(KeyFileError):
        read_key_file(directory)


def test_create_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "k"
    create_key_file(path)
    with pytest.raises(FileExistsError):
        create_key_file(path)


def test_keys_of_the_wrong_length() -> None:
    with pytest.raises(KeyFileError):
        FileKek(b"x" * 16)
    with pytest.raises(KeyFileError):
        CapabilitySigner(b"x" * 31)


def test_key_ids_differ_and_reveal_nothing() -> None:
    one, two = FileKek(b"\x01" * 32), FileKek(b"\x02" * 32)
    assert one.key_id != two.key_id
    assert ("01" * 8) not in one.key_id


def test_keyring() -> None:
    old, new = FileKek.generate(), FileKek.generate()
    ring = Keyring(old)
    assert ring.current is old
    ring.promote(new)
    assert ring.current is new
    assert ring.get(old.key_id) is old
    assert set(ring.key_ids) == {old.key_id, new.key_id}
    with pytest.raises(ValueError):
        ring.retire(new.key_id)
    ring.retire(old.key_id)
    with pytest.raises(UnknownKey):
        ring.get(old.key_id)
    assert old.key_id not in repr(ring)
    assert new.key_id in repr(ring)
