"""Metadata maps (agents, environments, sessions, vaults, credentials): the documented limits and
the patch rules of an update.

Below both the HTTP layer and the domain: services check and patch metadata without importing
``control_plane.api`` (which re-exports these names from ``control_plane.api.models``)."""

from __future__ import annotations

from control_plane.errors import InvalidRequest

__all__ = [
    "MAX_METADATA_KEY",
    "MAX_METADATA_PAIRS",
    "MAX_METADATA_VALUE",
    "apply_metadata_patch",
    "check_metadata",
]

MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


def check_metadata(metadata: dict[str, str], param: str = "metadata") -> dict[str, str]:
    """Enforce the documented limits: 16 pairs, keys ≤ 64 chars, values ≤ 512 chars."""
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequest(f"{param}: at most {MAX_METADATA_PAIRS} key-value pairs", param=param)
    for key, value in metadata.items():
        if not key or len(key) > MAX_METADATA_KEY:
            raise InvalidRequest(f"{param}: keys must be 1-{MAX_METADATA_KEY} characters", param=param)
        if len(value) > MAX_METADATA_VALUE:
            raise InvalidRequest(
                f"{param}[{key!r}]: values must be at most {MAX_METADATA_VALUE} characters", param=param
            )
    return metadata


def apply_metadata_patch(
    current: dict[str, str], patch: dict[str, str | None] | None, *, empty_deletes: bool = False
) -> dict[str, str]:
    """Upsert string values, delete keys set to ``null`` (and to ``""`` with ``empty_deletes``)."""
    merged = dict(current)
    for key, value in (patch or {}).items():
        if value is None or (empty_deletes and value == ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    return check_metadata(merged)
