"""A session's git repositories (``github_repository`` resources): validation, storage, views.

Create params (``resources[]`` of ``POST /v1/sessions``), as the SDK sends them::

    {"type": "github_repository", "url": "https://git.example.com/org/app.git",
     "authorization_token": "...",                   # optional, write-only
     "checkout": {"type": "branch", "name": "main"}  # or {"type": "commit", "sha": "..."}; optional
     "mount_path": "/workspace/app"}                 # optional; default /workspace/<repo name>

Any ``http``/``https`` git URL is accepted (not only github.com); the edge clones it. A resource is
stored as its own row (kind :data:`RESOURCE_KIND`, id ``sesrsc_...``) with body::

    {"session_id", "type": "github_repository", "url", "mount_path", "checkout",
     "sealed": <the token sealed by control_plane.sessions.repository_tokens> | null}

and the API shows it without the token (:func:`repository_json`). Mount paths are inside the
workspace volume (``/workspace/...``) so that a clone outlives the sandbox's container; two
repositories of a session may not share or nest their mount paths.
"""

from __future__ import annotations

import posixpath
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from control_plane.errors import InvalidRequest
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp
from control_plane.urls import MAX_URL_CHARS, normalize_url
from outpost_wire.frames import MAX_REPOSITORIES

__all__ = [
    "MAX_REPOSITORIES",
    "REPOSITORY_TYPE",
    "RESOURCE_KIND",
    "WORKSPACE",
    "RepositoryInput",
    "check_token",
    "new_resource_id",
    "parse_resources",
    "repository_body",
    "repository_json",
]

RESOURCE_KIND = "session_resource"
REPOSITORY_TYPE = "github_repository"
WORKSPACE = "/workspace"
MAX_TOKEN_CHARS = 4096
MAX_MOUNT_PATH_CHARS = 1024
_FIELDS = frozenset({"type", "url", "authorization_token", "checkout", "mount_path"})
_UNSUPPORTED_TYPES: frozenset[str] = frozenset()
_MEMORY_TYPE = "memory_store"  # parsed by control_plane.sessions.memory_resources
_FILE_TYPE = "file"  # parsed by control_plane.sessions.file_resources
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*@\{)[^\x00-\x20~^:?*\[\\\x7f]{1,255}(?<!\.lock)(?<![/.])$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: it goes into an HTTP header


def new_resource_id() -> str:
    return "sesrsc_" + secrets.token_hex(12)


@dataclass(frozen=True)
class RepositoryInput:
    """One validated ``github_repository`` create param. ``token`` is never shown by ``repr``."""

    url: str
    mount_path: str
    checkout: dict[str, str] | None
    token: str | None = field(default=None, repr=False)


def parse_resources(items: Sequence[Any], *, param: str = "resources") -> list[RepositoryInput]:
    """Validate ``resources`` of a session create; InvalidRequest naming the bad field (never
    echoing a token). ``memory_store`` and ``file`` items are skipped (see
    :mod:`control_plane.sessions.memory_resources`, :mod:`control_plane.sessions.file_resources`)."""
    items = [
        item
        for item in items
        if not (isinstance(item, Mapping) and item.get("type") in (_MEMORY_TYPE, _FILE_TYPE))
    ]
    if len(items) > MAX_REPOSITORIES:
        raise InvalidRequest(f"{param}: at most {MAX_REPOSITORIES} resources per session", param=param)
    parsed = [_parse_one(item, f"{param}[{index}]") for index, item in enumerate(items)]
    for index, repo in enumerate(parsed):
        for other in parsed[:index]:
            if _overlaps(repo.mount_path, other.mount_path):
                raise InvalidRequest(
                    f"{param}[{index}].mount_path: {repo.mount_path} overlaps {other.mount_path} of "
                    "another repository",
                    param=f"{param}[{index}].mount_path",
                )
    return parsed


def _parse_one(item: Any, where: str) -> RepositoryInput:
    if not isinstance(item, Mapping):
        raise InvalidRequest(f"{where}: must be an object", param=where)
    kind = item.get("type")
    if kind in _UNSUPPORTED_TYPES:
        raise InvalidRequest(
            f"{where}.type: {kind!r} resources are not supported by Outpost yet", param=f"{where}.type"
        )
    if kind != REPOSITORY_TYPE:
        raise InvalidRequest(f"{where}.type: must be {REPOSITORY_TYPE!r}", param=f"{where}.type")
    unknown = sorted(set(item) - _FIELDS)
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}", param=where)
    url = _check_url(item.get("url"), f"{where}.url")
    token = item.get("authorization_token")
    if token is not None:
        token = check_token(token, f"{where}.authorization_token")
    checkout = _check_checkout(item.get("checkout"), f"{where}.checkout")
    mount_path = item.get("mount_path")
    if mount_path is None:
        mount_path = _default_mount_path(url, f"{where}.mount_path")
    return RepositoryInput(url, _check_mount_path(mount_path, f"{where}.mount_path"), checkout, token)


def check_token(value: Any, where: str) -> str:
    """An ``authorization_token``: 1 to 4096 visible ASCII characters (never echoed)."""
    if not isinstance(value, str) or not value or len(value) > MAX_TOKEN_CHARS or not _TOKEN.match(value):
        raise InvalidRequest(f"{where}: must be 1 to {MAX_TOKEN_CHARS} visible ASCII characters", param=where)
    return value


def _check_url(value: Any, where: str) -> str:
    """The URL normalized (:func:`control_plane.urls.normalize_url`), without query or fragment,
    naming a repository."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{where}: required, a URL of at most {MAX_URL_CHARS} characters", param=where)
    url = normalize_url(value, param=where, allow_query=False)
    if not urlsplit(url).path.strip("/"):
        raise InvalidRequest(f"{where}: the URL names no repository", param=where)
    return url


def _check_checkout(value: Any, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"{where}: must be an object", param=where)
    kind = value.get("type")
    if kind == "branch" and set(value) == {"type", "name"}:
        name = value["name"]
        if not isinstance(name, str) or not _BRANCH.match(name):
            raise InvalidRequest(f"{where}.name: not a valid branch name", param=f"{where}.name")
        return {"type": "branch", "name": name}
    if kind == "commit" and set(value) == {"type", "sha"}:
        sha = value["sha"]
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise InvalidRequest(f"{where}.sha: must be 7 to 64 hex digits", param=f"{where}.sha")
        return {"type": "commit", "sha": sha.lower()}
    raise InvalidRequest(
        f'{where}: must be {{"type": "branch", "name"}} or {{"type": "commit", "sha"}}', param=where
    )


def _default_mount_path(url: str, where: str) -> str:
    name = posixpath.basename(urlsplit(url).path.rstrip("/")).removesuffix(".git")
    if not _NAME.match(name) or name in (".", ".."):
        raise InvalidRequest(
            f"{where}: the repository name in the URL is not a plain directory name; give mount_path",
            param=where,
        )
    return f"{WORKSPACE}/{name}"


def _check_mount_path(value: Any, where: str) -> str:
    ok = (
        isinstance(value, str)
        and 0 < len(value) <= MAX_MOUNT_PATH_CHARS
        and value.startswith(WORKSPACE + "/")
        and posixpath.normpath(value) == value
        and not any(ord(c) < 32 or c == "\x7f" for c in value)
    )
    if not ok:
        raise InvalidRequest(
            f"{where}: must be a normalized absolute path inside {WORKSPACE}/ (the workspace volume)",
            param=where,
        )
    return str(value)


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def repository_body(
    session_id: str, repo: RepositoryInput, sealed: Mapping[str, str] | None
) -> dict[str, Any]:
    """The stored body of a repository resource."""
    return {
        "session_id": session_id,
        "type": REPOSITORY_TYPE,
        "url": repo.url,
        "mount_path": repo.mount_path,
        "checkout": repo.checkout,
        "sealed": dict(sealed) if sealed else None,
    }


def repository_json(res: Resource) -> dict[str, Any]:
    """A repository resource as the API shows it: never the token (a memory store resource as
    :func:`~control_plane.sessions.memory_resources.memory_json` shows it)."""
    body = res.body
    if body.get("type") == _MEMORY_TYPE:
        from control_plane.sessions.memory_resources import memory_json

        return memory_json(res)
    if body.get("type") == _FILE_TYPE:
        from control_plane.sessions.file_resources import file_json

        return file_json(res)
    return {
        "type": REPOSITORY_TYPE,
        "id": res.id,
        "url": body["url"],
        "mount_path": body["mount_path"],
        "checkout": body.get("checkout"),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
    }
