"""Log output for both daemons: plain lines or one JSON object per line, with context ids.

Only entry points call :func:`configure_logging`; library code logs through
``logging.getLogger(__name__)`` as usual. Context ids reach the output two ways, neither of which
touches existing log calls:

* ``extra={"session_id": ...}`` or a :class:`logging.LoggerAdapter` on a call puts the id on the
  record;
* :func:`log_context` binds ids for the current task (a :mod:`contextvars` variable, so tasks
  created inside inherit them) and :class:`ContextFilter` copies them onto every record.

JSON lines carry ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``, then
``session_id`` / ``edge_id`` / ``request_id`` / ``api_key_id`` when known and ``exception`` when
there is one.
Plain lines append the ids present as ``[key=value ...]`` and leave out the timestamp when stderr
goes to the journal (``$JOURNAL_STREAM``), since journald adds its own.

Fields can carry what a peer sent (an edge's ``software_version``, a name, an error message), so
no field may start a line of its own: in plain lines, control characters (C0, DEL, C1) and the
Unicode line and paragraph separators in the message, logger name and ids are escaped (``\n``,
``\x1b``, ``\u2028``), and every line after the first (a traceback) is indented with ``| ``; JSON
lines escape the same characters inside their strings, so one record is always one line.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
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
    "escape_field",
    "log_context",
]

#: The record attributes copied into JSON lines (and bound by :func:`log_context`).
CONTEXT_FIELDS = ("session_id", "edge_id", "request_id", "api_key_id")

# What could break a line or drive a terminal: C0 controls, DEL, C1 controls, U+2028, U+2029.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# json.dumps already escapes C0; with ensure_ascii=False it leaves these as they are.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029]")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_field(text: str) -> str:
    """``text`` with every character that could start a new log line (or drive a terminal) escaped."""
    return _UNSAFE.sub(_escape_char, text)


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
    """``[time ]LEVEL logger: message`` followed by the context ids present, ``key=value``; fields
    escaped and continuation lines indented (see the module docstring)."""

    def __init__(self, *, timestamps: bool = True) -> None:
        prefix = "%(asctime)s " if timestamps else ""
        super().__init__(prefix + "%(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)
        safe.message = escape_field(record.message)
        safe.name = escape_field(str(record.name))
        return super().formatMessage(safe)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = [
            f"{k}={escape_field(str(getattr(record, k)))}" for k in CONTEXT_FIELDS if getattr(record, k, None)
        ]
        first, sep, rest = text.partition("\n")  # keep ids on the message line, not after a traceback
        if ids:
            first = f"{first} [{' '.join(ids)}]"
        if not sep:
            return first
        # A traceback (or stack) follows: no line of it may pass for a record of its own.
        return first + "".join(f"\n| {escape_field(line)}" for line in rest.split("\n"))


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
        line = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


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
