"""A session's memory stores (``memory_store`` resources): validation, storage, views, the prompt.

Create params (``resources[]`` of ``POST /v1/sessions``), as the SDK sends them::

    {"type": "memory_store", "memory_store_id": "memstore_...",
     "access": "read_write",            # or "read_only"; optional, default read_write
     "instructions": "..."}             # optional, at most 4,096 characters

Stored as a resource of kind ``session_resource`` (like repositories) with the store's name and
description snapshotted at attach time (later edits do not propagate, as in the hosted product)
and its mount path ``/mnt/memory/<slug>``, the slug derived from the name (lower case,
``[a-z0-9._-]``, ``-2``, ``-3`` ... when two stores of a session would share one). Mounts are
fixed for the session's life. :func:`memory_prompt` is the system prompt's memory section.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control_plane.errors import InvalidRequest
from control_plane.store.base import MEMORY_STORE_KIND, Resource, Resources
from control_plane.timestamps import timestamp
from outpost_wire.frames import MAX_MEMORY_MOUNTS, MemoryMount

__all__ = [
    "MEMORY_TYPE",
    "MemoryStoreInput",
    "memory_body",
    "memory_json",
    "memory_mounts",
    "memory_prompt",
    "parse_memory_resource",
    "resolve_memory_resources",
]

MEMORY_TYPE = "memory_store"
MOUNT_ROOT = "/mnt/memory"
MAX_INSTRUCTIONS = 4096
_FIELDS = frozenset({"type", "memory_store_id", "access", "instructions"})
_ACCESS = ("read_write", "read_only")
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class MemoryStoreInput:
    memory_store_id: str
    access: str
    instructions: str | None


def parse_memory_resource(item: Mapping[str, Any], where: str) -> MemoryStoreInput:
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}", param=where)
    store_id = item.get("memory_store_id")
    if not isinstance(store_id, str) or not store_id:
        raise InvalidRequest(
            f"{where}.memory_store_id: required, a memory store id", param=f"{where}.memory_store_id"
        )
    access = item.get("access") or "read_write"
    if access not in _ACCESS:
        raise InvalidRequest(f"{where}.access: must be 'read_write' or 'read_only'", param=f"{where}.access")
    instructions = item.get("instructions")
    if instructions is not None and (
        not isinstance(instructions, str) or len(instructions) > MAX_INSTRUCTIONS
    ):
        raise InvalidRequest(
            f"{where}.instructions: a string of at most {MAX_INSTRUCTIONS} characters",
            param=f"{where}.instructions",
        )
    return MemoryStoreInput(store_id, str(access), instructions)


async def resolve_memory_resources(
    store: Resources, items: Sequence[tuple[str, MemoryStoreInput]]
) -> list[dict[str, Any]]:
    """The stored bodies (without ``session_id``) of a new session's memory stores: each store
    read (``NotFound`` if it does not exist), its name and description snapshotted, a slug each."""
    if len(items) > MAX_MEMORY_MOUNTS:
        raise InvalidRequest(
            f"resources: at most {MAX_MEMORY_MOUNTS} memory stores per session", param="resources"
        )
    bodies: list[dict[str, Any]] = []
    slugs: set[str] = set()
    for where, item in items:
        if any(b["memory_store_id"] == item.memory_store_id for b in bodies):
            raise InvalidRequest(
                f"{where}.memory_store_id: the store is given twice", param=f"{where}.memory_store_id"
            )
        res = await store.get_resource(MEMORY_STORE_KIND, item.memory_store_id)
        if res.archived_at is not None and item.access == "read_write":
            raise InvalidRequest(
                f"{where}.memory_store_id: the store is archived; mount it read_only",
                param=f"{where}.memory_store_id",
            )
        name = str(res.body.get("name") or "")
        slug = _slug(name, item.memory_store_id, slugs)
        slugs.add(slug)
        bodies.append(
            {
                "type": MEMORY_TYPE,
                "memory_store_id": item.memory_store_id,
                "access": item.access,
                "instructions": item.instructions,
                "name": name,
                "description": str(res.body.get("description") or ""),
                "slug": slug,
                "mount_path": f"{MOUNT_ROOT}/{slug}",
            }
        )
    return bodies


def _slug(name: str, store_id: str, taken: set[str]) -> str:
    base = _UNSAFE.sub("-", name.lower()).strip("-.")[:90] or store_id.lower()
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    return slug


def memory_body(session_id: str, resolved: Mapping[str, Any]) -> dict[str, Any]:
    return {"session_id": session_id, **resolved}


def memory_json(res: Resource) -> dict[str, Any]:
    """A memory store resource as the API shows it (the SDK's
    ``BetaManagedAgentsMemoryStoreResource``, with Outpost's resource ``id``)."""
    body = res.body
    return {
        "type": MEMORY_TYPE,
        "id": res.id,
        "memory_store_id": body["memory_store_id"],
        "access": body["access"],
        "instructions": body.get("instructions"),
        "name": body.get("name"),
        "description": body.get("description", ""),
        "mount_path": body["mount_path"],
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
    }


def memory_mounts(resources: Sequence[Resource]) -> tuple[MemoryMount, ...]:
    """The wire mounts of a session's resources (its memory stores, in order)."""
    return tuple(
        MemoryMount(
            store_id=str(r.body["memory_store_id"]),
            slug=str(r.body["slug"]),
            read_only=r.body.get("access") == "read_only",
        )
        for r in resources
        if r.body.get("type") == MEMORY_TYPE
    )


def memory_prompt(resources: Sequence[Mapping[str, Any]]) -> str | None:
    """The system prompt's memory section for the stores' resource bodies (None: no store).
    Fixed for the session's life (the name and description are the attach-time snapshot), so
    the prompt's cached prefix stays stable."""
    stores = [r for r in resources if r.get("type") == MEMORY_TYPE]
    if not stores:
        return None
    lines = [
        "# Memory",
        "",
        "Memory stores are mounted in your sandbox as directories of plain text files. They persist "
        "beyond this session: read them before you start, and keep what is worth remembering there "
        "(every tool sees them, bash included; each file is one memory of at most 100 KB of UTF-8 text).",
    ]
    for body in stores:
        access = "read-only" if body.get("access") == "read_only" else "read-write"
        lines += [
            "",
            f"## {body.get('name') or body['memory_store_id']}",
            f"- Path: {body['mount_path']} ({access})",
        ]
        if body.get("description"):
            lines.append(f"- Description: {body['description']}")
        if body.get("instructions"):
            lines.append(f"- Instructions: {body['instructions']}")
    return "\n".join(lines)
