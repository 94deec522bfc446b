"""Log output for both daemons: plain lines or one JSON object per line, with context ids.

Only entry points call :func:`configure_logging`; library code logs through
``logging.getLogger(__name__)`` as usual. Context ids reach the output two ways, neither of which
touches existing log calls:

* ``extra={"session_id": ...}`` or a :class:`logging.LoggerAdapter` on a call puts the id on the
  record;
* :func:`log_context` binds ids for the current task (a :mod:`contextvars` variable, so tasks
  created inside inherit them) and :class:`ContextFilter` copies them onto every record.

JSON lines carry ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``, then
``session_id`` / ``edge_id`` / ``request_id`` when known and ``exception`` when there is one.
Plain lines append the ids present as ``[key=value ...]`` and leave out the timestamp when stderr
goes to the journal (``$JOURNAL_STREAM``), since journald adds its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Literal, TextIO

__all__ = [
    "CONTEXT_FIELDS",
    "ContextFilter",
    "JsonFormatter",
    "PlainFormatter",
    "configure_logging",
    "log_context",
]

#: The record attributes copied into JSON lines (and bound by :func:`log_context`).
CONTEXT_FIELDS = ("session_id", "edge_id", "request_id")

_context: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "outpost_log_context", default=None
)


@contextlib.contextmanager
def log_context(**ids: str | None) -> Iterator[None]:
    """Bind context ids (``session_id=...``) for the current task and the tasks it starts."""
    merged = {**(_context.get() or {}), **{k: v for k, v in ids.items() if v}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the ids bound by :func:`log_context`, then ``static`` ids (the process's edge id,
    say; settable later), onto records that do not carry them already."""

    def __init__(self, static: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.static: dict[str, str] = dict(static or {})

    def filter(self, record: logging.LogRecord) -> bool:
        for source in (_context.get() or {}, self.static):
            for key, value in source.items():
                if not getattr(record, key, None):
                    setattr(record, key, value)
        return True


class PlainFormatter(logging.Formatter):
    """``[time ]LEVEL logger: message`` followed by the context ids present, ``key=value``."""

    def __init__(self, *, timestamps: bool = True) -> None:
        prefix = "%(asctime)s " if timestamps else ""
        super().__init__(prefix + "%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = [f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if getattr(record, k, None)]
        if not ids:
            return text
        first, sep, rest = text.partition("\n")  # keep ids on the message line, not after a traceback
        return f"{first} [{' '.join(ids)}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time, level, logger, message`` plus the context ids present."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value:
                doc[key] = str(value)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def configure_logging(
    level: str | int,
    fmt: Literal["plain", "json"] = "plain",
    *,
    stream: TextIO | None = None,
    static: Mapping[str, str] | None = None,
) -> ContextFilter:
    """Install one stderr handler on the root logger (replacing any); returns its
    :class:`ContextFilter` so the caller can add static ids once it knows them."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(PlainFormatter(timestamps=not os.environ.get("JOURNAL_STREAM")))
    context = ContextFilter(static)
    handler.addFilter(context)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return context
