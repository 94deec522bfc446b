"""Store settings beyond the URL, as the configuration gives them (``ControlPlaneConfig.store_options``).

Only the PostgreSQL store reads them today; the SQLite store has its own ``SqliteConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

__all__ = ["StoreOptions", "mask_url"]


@dataclass(frozen=True, slots=True)
class StoreOptions:
    pool_min: int = 2
    pool_max: int = 10
    password_file: Path | None = None
    ssl_mode: Literal["disable", "prefer", "require", "verify-ca", "verify-full"] | None = None
    ssl_root_cert_file: Path | None = None
    schema: str = "public"


def mask_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: the form for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an unparseable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
