"""The control plane's durable store: resources, session event logs, leases, edge identity.

``open_store(url)`` picks the implementation from a URL:

* ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (as in SQLAlchemy: what follows
  ``sqlite:///`` is the path) opens a :class:`SqliteStore`, the default durable store;
* ``postgresql://user@host:port/database`` (or ``postgres://``) opens a
  :class:`~control_plane.store.postgres.PostgresStore`, for several replicas on one database
  (``options`` carry its pool sizes, TLS, password file and schema);
* ``memory://`` gives a :class:`MemoryStore`, for unit tests.

Everything else talks to the :class:`Store` protocol only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from control_plane.store.options import StoreOptions, mask_url
from control_plane.store.sqlite import SqliteConfig, SqliteStore

if TYPE_CHECKING:
    from control_plane.store.postgres import PostgresConfig

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
    "StoreOptions",
    "mask_url",
    "open_store",
    "postgres_config",
]

_SQLITE_PREFIX = "sqlite:///"
_MEMORY_URL = "memory://"
_POSTGRES_SCHEMES = ("postgres", "postgresql")


def open_store(
    url: str, *, sqlite_config: SqliteConfig | None = None, options: StoreOptions | None = None
) -> Store:
    """Open the store named by ``url``. Opening a SQLite file is quick blocking I/O (create, migrate):
    call it at startup. A PostgreSQL store connects (and migrates) at its first call. Raises
    ``InvalidRequest`` for a URL it does not understand."""
    if url == _MEMORY_URL:
        return MemoryStore()
    if url.startswith(_SQLITE_PREFIX) and len(url) > len(_SQLITE_PREFIX):
        path = url[len(_SQLITE_PREFIX) :]
        if "?" in path or "#" in path:
            raise InvalidRequest(f"store URL {url!r}: query strings are not supported", param="store_url")
        return SqliteStore(path, sqlite_config)
    if url.partition("://")[0] in _POSTGRES_SCHEMES:
        from control_plane.store.postgres import PostgresStore  # imports the driver: only when used

        return PostgresStore(postgres_config(url, options))
    raise InvalidRequest(
        f"unsupported store URL {mask_url(url)!r} (expected sqlite:///path/to/file.db, "
        "postgresql://user@host/database or memory://)",
        param="store_url",
    )


def postgres_config(url: str, options: StoreOptions | None = None) -> PostgresConfig:
    """The PostgreSQL store's settings from a URL and the configuration's options."""
    from control_plane.store.postgres import PostgresConfig

    o = options or StoreOptions()
    return PostgresConfig(
        url,
        pool_min=o.pool_min,
        pool_max=o.pool_max,
        password_file=o.password_file,
        ssl_mode=o.ssl_mode,
        ssl_root_cert_file=o.ssl_root_cert_file,
        schema=o.schema,
    )
