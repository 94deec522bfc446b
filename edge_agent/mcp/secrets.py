"""Resolve :class:`~edge_agent.mcp.config.SecretSource` values from the edge's own files and
environment.

A secret file must not be readable or writable by group or others (``chmod 600``); one that is
is refused, with a message naming the file and the fix. Messages name where a value comes from,
never the value. One trailing newline is stripped from a file's contents.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from edge_agent.errors import ConfigError
from edge_agent.mcp.config import SecretSource

__all__ = ["read_tunnel_tokens", "resolve_secret", "resolve_secrets"]

_MAX_TUNNEL_TOKEN_CHARS = 512


def resolve_secret(source: SecretSource, *, where: str) -> str:
    """The value of one secret. ``where`` names the config key, for messages
    (``mcp_servers[wiki].http.headers.Authorization``). Raises :class:`ConfigError`."""
    if source.value is not None:
        return source.value.get_secret_value()
    if source.from_env is not None:
        value = os.environ.get(source.from_env)
        if value is None:
            raise ConfigError(f"{where}: environment variable {source.from_env} is not set")
        return value
    assert source.from_file is not None
    return _read_secret_file(source.from_file, where=where)


def resolve_secrets(sources: Mapping[str, SecretSource], *, where: str) -> dict[str, str]:
    """Resolve a mapping of name -> source (headers, environment)."""
    return {name: resolve_secret(source, where=f"{where}.{name}") for name, source in sources.items()}


def read_tunnel_tokens(paths: Sequence[Path]) -> tuple[str, ...]:
    """The MCP tunnel connector tokens of ``tunnel_token_files``, one per file (a secret file,
    as above: ``chmod 600``). Raises :class:`ConfigError` naming the file, never the value."""
    tokens: list[str] = []
    for index, path in enumerate(paths):
        where = f"tunnel_token_files[{index}]"
        token = _read_secret_file(path, where=where).strip()
        if not token or len(token) > _MAX_TUNNEL_TOKEN_CHARS or any(c.isspace() for c in token):
            raise ConfigError(f"{where}: {os.fspath(path)} must hold one tunnel token on one line")
        tokens.append(token)
    return tuple(dict.fromkeys(tokens))


def _read_secret_file(path: os.PathLike[str], *, where: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot open secret file {os.fspath(path)}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{where}: secret file {os.fspath(path)} is not a regular file")
        if mode & 0o077:
            raise ConfigError(
                f"{where}: secret file {os.fspath(path)} is accessible by group or others "
                f"(mode {stat.S_IMODE(mode):04o}); fix it with: chmod 600 {os.fspath(path)}"
            )
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            data = handle.read()
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: secret file {os.fspath(path)} is not UTF-8 text") from None
    if text.endswith("\r\n"):
        return text[:-2]
    return text.removesuffix("\n")
