"""How the PostgreSQL store connects: the URL, pool sizes, TLS, the password file, the schema."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from control_plane.errors import ControlPlaneError, InvalidRequest
from control_plane.store.options import mask_url

__all__ = ["PostgresConfig", "SslMode", "mask_url"]

SslMode = Literal["disable", "prefer", "require", "verify-ca", "verify-full"]

_SCHEMES = ("postgres", "postgresql")


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    """``url``: ``postgresql://user@host:port/database`` (libpq's URL form; query parameters such
    as ``sslmode`` are understood too). A password is best kept in ``password_file`` (one line,
    mode 0600), not in the URL; logs and errors show the URL with any password masked."""

    url: str
    pool_min: int = 2
    pool_max: int = 10
    password_file: Path | None = None
    ssl_mode: SslMode | None = None  # None: as the URL says (libpq's default: prefer)
    ssl_root_cert_file: Path | None = None  # the CA that signs the server's certificate
    schema: str = "public"
    connect_timeout_s: float = 10.0
    #: A statement that has not answered by then fails (``ControlPlaneError``): a server that stopped
    #: answering, a lock held by a stuck transaction.
    command_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in _SCHEMES or not parts.netloc:
            raise InvalidRequest(
                f"store URL {mask_url(self.url)!r}: expected postgresql://user@host:port/database",
                param="store_url",
            )
        if not 1 <= self.pool_min <= self.pool_max:
            raise InvalidRequest("pool sizes: need 1 <= pool_min <= pool_max", param="store_pool_min")
        if self.ssl_mode == "disable" and self.ssl_root_cert_file is not None:
            raise InvalidRequest("a root certificate is given but sslmode is disable", param="store_ssl_mode")
        if not self.schema or len(self.schema) > 48:
            raise InvalidRequest("schema: 1 to 48 characters", param="schema")

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)

    @property
    def channel(self) -> str:
        """The NOTIFY channel of the feed: one per schema, so stores sharing a database do not
        hear each other."""
        return "outpost_log" if self.schema == "public" else f"outpost_log_{self.schema}"

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``asyncpg.connect`` / ``create_pool``. The password file is read
        for every new connection, so a rotated password is picked up without a restart."""
        kwargs: dict[str, Any] = {
            "dsn": self.url,
            "timeout": self.connect_timeout_s,
            "command_timeout": self.command_timeout_s,
            "server_settings": {"search_path": self.schema, "application_name": "outpost-control"},
        }
        if self.password_file is not None:
            kwargs["password"] = self._read_password
        if self.ssl_root_cert_file is not None:
            try:
                context = ssl.create_default_context(cafile=str(self.ssl_root_cert_file))
            except (OSError, ssl.SSLError) as exc:
                raise ControlPlaneError(
                    f"cannot load the store's root certificate {self.ssl_root_cert_file}: {exc}"
                ) from None
            context.check_hostname = self.ssl_mode in (None, "verify-full")
            kwargs["ssl"] = context
        elif self.ssl_mode is not None:
            kwargs["ssl"] = self.ssl_mode
        return kwargs

    def _read_password(self) -> str:
        assert self.password_file is not None
        try:
            return self.password_file.read_text().strip("\r\n")
        except OSError as exc:
            raise ControlPlaneError(
                f"cannot read the store's password file {self.password_file}: {exc.strerror}"
            ) from None
