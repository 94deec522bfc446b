"""The data directory's admin API key: made once, rotated on demand, never silently doubled.

``serve`` calls :func:`ensure_admin_key` at start:

* the file ``DATA_DIR/admin-api-key`` exists → nothing to do (a warning if the store no longer
  accepts the key in it);
* it is missing and the store holds no usable admin key → a new admin key is made and written
  there (0600, atomically);
* it is missing but an admin key is still usable → no second key is made (the old one would go on
  working unseen); a warning says how to get a new one: ``outpost-control api-keys rotate-admin``.

:func:`rotate_admin_key` makes a new admin key, writes it to the file (0600, atomically: readers
see the old key or the new one), then revokes the data directory's previous admin keys (those
named ``admin``; admin keys made through the API under other names stay, revoke those by id). It
works on the store directly, so it also recovers a lost key file; a running control plane refuses
the old key from its next request on.
"""

from __future__ import annotations

import hmac
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from control_plane.access_keys import KeyScope, create_api_key, hash_key, usable
from control_plane.store.base import ApiKeyRecord, Store
from outpost_wire.files import write_atomic

__all__ = ["ADMIN_KEY_FILE", "ADMIN_KEY_NAME", "Rotation", "ensure_admin_key", "rotate_admin_key", "usable"]

log = logging.getLogger(__name__)

ADMIN_KEY_FILE = "admin-api-key"
ADMIN_KEY_NAME = "admin"  # the name of the data directory's admin key in listings


def _write(path: Path, key: str) -> None:
    write_atomic(path, (key + "\n").encode(), 0o600)


async def ensure_admin_key(store: Store, data_dir: Path, now: datetime) -> ApiKeyRecord | None:
    """See the module docstring. Returns the key made, if one was."""
    path = data_dir / ADMIN_KEY_FILE
    if path.exists():
        held = path.read_text(encoding="utf-8").strip()
        record = await store.find_api_key(hash_key(held)) if held else None
        if (
            record is None
            or not hmac.compare_digest(record.key_hash, hash_key(held))
            or not usable(record, now)
            or record.scope != KeyScope.ADMIN
        ):
            log.warning(
                "the admin API key in %s is not a usable admin key (revoked, expired or unknown); "
                "to make a new one: outpost-control api-keys rotate-admin --data-dir %s",
                path,
                data_dir,
            )
        return None
    admins = [k for k in await store.list_api_keys() if k.scope == KeyScope.ADMIN and usable(k, now)]
    if admins:
        log.warning(
            "the admin API key file %s is missing, but the store holds %d usable admin key(s) (%s); no "
            "second key is made. To write a new admin key there and revoke the old one: "
            "outpost-control api-keys rotate-admin --data-dir %s",
            path,
            len(admins),
            ", ".join(k.id for k in admins),
            data_dir,
        )
        return None
    key, record = await create_api_key(store, ADMIN_KEY_NAME, now, scope=KeyScope.ADMIN)
    try:  # exclusive: of two processes starting at once on one data dir, one key is kept
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        await store.revoke_api_key(record.id, now)
        return None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")
        f.flush()
        os.fsync(f.fileno())
    log.info("created the admin API key %s in %s", record.id, path)
    return record


@dataclass(frozen=True, slots=True)
class Rotation:
    new: ApiKeyRecord
    revoked: list[ApiKeyRecord]
    path: Path


async def rotate_admin_key(store: Store, data_dir: Path, now: datetime) -> Rotation:
    """See the module docstring. The new key is in the file before any old one is revoked: a
    crash in between leaves both usable, and running it again finishes the job."""
    path = data_dir / ADMIN_KEY_FILE
    old = [
        k
        for k in await store.list_api_keys()
        if k.scope == KeyScope.ADMIN and k.name == ADMIN_KEY_NAME and usable(k, now)
    ]
    key, record = await create_api_key(store, ADMIN_KEY_NAME, now, scope=KeyScope.ADMIN)
    _write(path, key)
    revoked = [await store.revoke_api_key(k.id, now) for k in old]
    log.info("rotated the admin API key: %s in %s; revoked %s", record.id, path, [k.id for k in old])
    return Rotation(record, revoked, path)
