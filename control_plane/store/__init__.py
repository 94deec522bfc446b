"""The control plane's durable store: resources, session event logs, leases, edge identity.

``open_store(url)`` picks the implementation from a URL:

* ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (as in SQLAlchemy: what follows
  ``sqlite:///`` is the path) opens a :class:`SqliteStore`, the default durable store;
* ``memory://`` gives a :class:`MemoryStore`, for unit tests.

Everything else talks to the :class:`Store` protocol only.
"""

from __future__ import annotations

from control_plane.errors import InvalidRequest
from control_plane.store.base import (
    ApiKeyRecord,
    EdgeRecord,
    EnrollmentTokenRecord,
    Event,
    Lease,
    NewEvent,
    Order,
    Page,
    Resource,
    Store,
)
from control_plane.store.memory import MemoryStore
from control_plane.store.sqlite import SqliteConfig, SqliteStore

__all__ = [
    "ApiKeyRecord",
    "EdgeRecord",
    "EnrollmentTokenRecord",
    "Event",
    "Lease",
    "MemoryStore",
    "NewEvent",
    "Order",
    "Page",
    "Resource",
    "SqliteConfig",
    "SqliteStore",
    "Store",
    "open_store",
]

_SQLITE_PREFIX = "sqlite:///"
_MEMORY_URL = "memory://"


def open_store(url: str, *, sqlite_config: SqliteConfig | None = None) -> Store:
    """Open the store named by ``url``. Opening a SQLite file is quick blocking I/O (create, migrate):
    call it at startup. Raises ``InvalidRequest`` for a URL it does not understand."""
    if url == _MEMORY_URL:
        return MemoryStore()
    if url.startswith(_SQLITE_PREFIX) and len(url) > len(_SQLITE_PREFIX):
        path = url[len(_SQLITE_PREFIX) :]
        if "?" in path or "#" in path:
            raise InvalidRequest(f"store URL {url!r}: query strings are not supported", param="store_url")
        return SqliteStore(path, sqlite_config)
    raise InvalidRequest(
        f"unsupported store URL {url!r} (expected sqlite:///path/to/file.db or memory://)", param="store_url"
    )
