"""Connection limits of the HTTP port that uvicorn does not have built in.

uvicorn arms no timer on a fresh connection, nor on one whose next request head is still
arriving: a client that sends half a request line and then nothing holds a socket, and a file
descriptor, for as long as it likes (a "slowloris"). :func:`http_protocol` returns uvicorn's
HTTP/1.1 protocol with a **header-read deadline**: from the moment a connection opens, or the first
byte of its next request arrives, the whole request head must be in within ``header_timeout_s``, or
the connection is closed. The deadline is not pushed back by a trickle of bytes. The protocol is
uvicorn's ``httptools`` one (a C parser) when ``httptools`` is installed (the ``control`` extra
installs it), else its pure-Python ``h11`` one (:func:`h11_protocol`, :func:`httptools_protocol`).
Once the head is in, the request is the application's (bodies are capped by
``BodyLimitMiddleware``; uvicorn's ``limit_concurrency`` answers 503 past the connection limit);
between requests uvicorn's own keep-alive timeout applies.

:func:`raise_open_file_limit` lifts the process's soft ``RLIMIT_NOFILE`` towards its hard limit at
start-up (the systemd units set ``LimitNOFILE``; a shell's default soft limit is often 1,024).
"""

from __future__ import annotations

import asyncio
import logging
import resource

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from control_plane.head_deadline import HeadDeadline

__all__ = ["h11_protocol", "http_protocol", "httptools_protocol", "raise_open_file_limit"]

log = logging.getLogger(__name__)


class _HeaderDeadlineProtocol(HeadDeadline, H11Protocol):
    """uvicorn's h11 protocol plus a header-read deadline (see the module docstring)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_head():
            self._arm_header_timer()  # no-op when armed: a trickle does not move the deadline
        else:
            self._cancel_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        """A request head is (partly) expected: no request in progress on this connection."""
        return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE


def h11_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a header-read deadline of ``header_timeout_s`` (for
    ``uvicorn.Config(http=...)``)."""
    _check_timeout(header_timeout_s)
    return type(
        "HeaderDeadlineH11Protocol", (_HeaderDeadlineProtocol,), {"header_timeout_s": header_timeout_s}
    )


def httptools_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a header-read deadline of ``header_timeout_s``; raises
    ``ImportError`` without ``httptools``."""
    _check_timeout(header_timeout_s)
    from control_plane._httptools_deadline import HeaderDeadlineHttpToolsProtocol

    return type(
        "HeaderDeadlineHttpToolsProtocol",
        (HeaderDeadlineHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s},
    )


def http_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """:func:`httptools_protocol` where ``httptools`` is installed, else :func:`h11_protocol`."""
    try:
        return httptools_protocol(header_timeout_s)
    except ImportError:
        return h11_protocol(header_timeout_s)


def _check_timeout(header_timeout_s: float) -> None:
    if not header_timeout_s > 0:
        raise ValueError(f"header_timeout_s must be positive, got {header_timeout_s!r}")


def raise_open_file_limit(wanted: int) -> int:
    """Raise the soft limit on open files to ``wanted`` (at most the hard limit); return the soft
    limit in force afterwards. Never lowers it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft
        return target
    return soft
