"""The git relay: ``git pull`` / ``git push`` from a sandbox, with the credential added at the edge.

A sandbox's clone has ``origin = http://<proxy>/git/<session token>/<repository id>`` (see
:mod:`.remote`). The egress proxy hands requests under ``/git/`` to :meth:`GitRelay.serve` with the
session that owns the request's *source address*; the relay then requires the session token to be
that session's and the repository to be one of its current ones (:mod:`.routes`), so one sandbox
cannot use another's URL. Only the three smart-HTTP endpoints are relayed (``info/refs`` for
upload-pack and receive-pack, ``git-upload-pack``, ``git-receive-pack``).

The relay is a streaming reverse proxy for one request per connection: it forwards a short list
of headers (never the sandbox's ``Authorization`` or cookies), adds the credential chosen by
:class:`~.credentials.EdgeCredentials`, streams the body both ways (``Content-Length`` or chunked
in, raw bytes out) and closes. An upstream 401 becomes a 403 (so git in the sandbox does not
prompt), a redirect a 502. Logs name the session, repository, endpoint and status, never headers.

The repository must still pass the edge's ``repositories`` policy (:mod:`.policy`), and the
upstream connection goes only to addresses checked when it is made (:class:`_PinnedBackend`:
resolved once, loopback/metadata/private ... refused unless ``allow_networks`` has them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

import httpcore
import httpx

from edge_agent.egress.http import LocalRequest, render_response
from edge_agent.errors import RepositoryRefused
from edge_agent.git.credentials import EdgeCredentials
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.git.remote import RELAY_PREFIX, parse_relay_path, parse_remote
from edge_agent.git.routes import RelayRoutes
from outpost_wire.addresses import (
    AddressPolicy,
    AddressRefused,
    ResolutionFailed,
    Resolved,
    Resolver,
    pinned_connect,
    resolve,
    system_resolver,
)

__all__ = ["GitRelay"]

log = logging.getLogger(__name__)

_SERVICES = frozenset({"git-upload-pack", "git-receive-pack"})
_REQUEST_HEADERS = (
    "content-type",
    "accept",
    "accept-encoding",
    "content-encoding",
    "git-protocol",
    "user-agent",
)
_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Cache-Control", "Expires", "Pragma")
_T = TypeVar("_T")
_CHUNK = 64 * 1024
_MAX_CHUNK_LINE = 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 500: "Internal Server Error"}


class _ClientFailed(Exception):
    """The sandbox's side of the exchange failed: a body the relay cannot read, or a stall."""


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses ``pin`` resolved and checked."""

    def __init__(self, pin: Callable[[str, int], Awaitable[Resolved]]) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._pin = pin

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        errors = (httpcore.ConnectError, httpcore.ConnectTimeout)
        stream: httpcore.AsyncNetworkStream = await pinned_connect(
            self._inner, self._pin, errors, host, port, timeout, local_address, socket_options
        )
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the relay never uses a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GitRelay:
    """Serves relay requests for the proxy (its :class:`~edge_agent.egress.LocalService`)."""

    prefix = RELAY_PREFIX

    def __init__(
        self,
        routes: RelayRoutes,
        credentials: EdgeCredentials,
        *,
        idle_timeout_s: float = 300.0,
        connect_timeout_s: float = 15.0,
        transport: httpx.AsyncBaseTransport | None = None,
        policy: RepositoryPolicy | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        """``transport``: a test hook for the upstream HTTP client (default: one that dials only
        checked addresses); ``policy``: the ``repositories`` rule (default: nothing allowed)."""
        self._policy = policy or RepositoryPolicy()
        addresses = AddressPolicy.parse(self._policy.allow_networks)

        async def pin(host: str, port: int) -> Resolved:
            return await resolve(host, port, addresses, resolver=resolver)

        if transport is None:
            ssl_context = httpx.create_ssl_context()
            transport = httpx.AsyncHTTPTransport(verify=ssl_context)
            transport._pool = httpcore.AsyncConnectionPool(  # the same pool, dialling pinned addresses
                ssl_context=ssl_context, network_backend=_PinnedBackend(pin)
            )
        self._routes = routes
        self._credentials = credentials
        self._idle_timeout_s = idle_timeout_s
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(idle_timeout_s, connect=connect_timeout_s),
            follow_redirects=False,
            transport=transport,
        )

    async def __aenter__(self) -> GitRelay:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the upstream client (idempotent)."""
        await self._client.aclose()

    async def serve(
        self,
        session_id: str,
        request: LocalRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Answer one request of ``session_id``'s sandbox (see the module docstring)."""
        target = parse_relay_path(request.path)
        if target is None:
            await _refuse(writer, 404, "git.path", "not a git smart-HTTP endpoint of the relay")
            return
        if request.method != target.method:
            await _refuse(writer, 400, "git.method", f"{target.service_path} takes {target.method}")
            return
        if target.service_path == "/info/refs" and request.query.removeprefix("service=") not in _SERVICES:
            await _refuse(writer, 403, "git.service", "only the smart HTTP protocol is relayed")
            return
        repository = self._routes.lookup(session_id, target.session_token, target.repository_id)
        if repository is None:
            log.warning(
                "git relay session=%s: refused %s (not this sandbox's repository)",
                session_id,
                target.repository_id,
            )
            await _refuse(writer, 404, "git.repository", "no such repository for this sandbox")
            return
        try:
            remote = parse_remote(repository.url)
            self._policy.check(remote)
        except ValueError as exc:
            await _refuse(writer, 502, "git.upstream", str(exc))
            return
        except RepositoryRefused as exc:
            log.warning(
                "git relay session=%s: %s refused by policy (%s)", session_id, repository.id, exc.rule
            )
            await _refuse(writer, 403, exc.rule, exc.reason)
            return
        credential = await self._credentials.select(remote, repository.token)
        headers = {name: value for name, value in request.headers if name.lower() in _REQUEST_HEADERS}
        headers.setdefault("Accept-Encoding", "identity")
        if credential is not None:
            headers["Authorization"] = credential.authorization()
        url = remote.endpoint(target.service_path) + (f"?{request.query}" if request.query else "")
        what = f"session={session_id} repository={repository.id} {target.service_path}"
        answered = False
        try:
            body: AsyncIterator[bytes] | None = None
            if request.method == "POST":
                body, length = self._body(request, reader)
                if length is not None:
                    headers["Content-Length"] = length
                if (request.header("expect") or "").lower() == "100-continue":
                    writer.write(_CONTINUE)
            async with self._client.stream(request.method, url, headers=headers, content=body) as response:
                log.info("git relay %s -> %d", what, response.status_code)
                answered = True
                await self._answer(response, writer)
        except _ClientFailed as exc:
            log.info("git relay %s: the sandbox's side failed: %s", what, exc)
            if not answered:
                await _refuse(writer, 400, "git.body", str(exc))
        except (AddressRefused, ResolutionFailed) as exc:
            log.warning("git relay %s: upstream address refused: %s", what, exc)
            if not answered:
                await _refuse(writer, 403, "repositories.address", str(exc))
        except httpx.HTTPError as exc:
            log.warning("git relay %s: upstream failed: %s", what, type(exc).__name__)
            if not answered:
                reason = f"the repository's server failed ({type(exc).__name__})"
                await _refuse(writer, 502, "git.upstream", reason)

    async def _answer(self, response: httpx.Response, writer: asyncio.StreamWriter) -> None:
        status = response.status_code
        if status in (401, 407):
            log.warning("git relay: the repository's server refused the credential (%d)", status)
            reason = "the repository's server refused the credential the edge added (or wants one)"
            await _refuse(writer, 403, "git.upstream_auth", reason)
            return
        if 300 <= status < 400:
            reason = "the repository's server answered with a redirect"
            await _refuse(writer, 502, "git.upstream_redirect", reason)
            return
        reason = response.reason_phrase or _REASONS.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}"]
        lines += [
            f"{name}: {response.headers[name]}" for name in _RESPONSE_HEADERS if name in response.headers
        ]
        lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        async for data in response.aiter_raw(_CHUNK):
            writer.write(data)
            await self._read(writer.drain())
        await writer.drain()

    def _body(
        self, request: LocalRequest, reader: asyncio.StreamReader
    ) -> tuple[AsyncIterator[bytes], str | None]:
        """The request body as a stream, and its Content-Length if it was given one."""
        if "chunked" in (request.header("transfer-encoding") or "").lower():
            return self._chunked(reader), None
        length_text = request.header("content-length") or "0"
        if not length_text.isdigit():
            raise _ClientFailed("invalid Content-Length")
        length = int(length_text)
        return self._fixed(reader, length), str(length)

    async def _fixed(self, reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
        remaining = length
        while remaining:
            data = await self._read(reader.read(min(remaining, _CHUNK)))
            if not data:
                raise _ClientFailed("the body ended early")
            remaining -= len(data)
            yield data

    async def _chunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await self._read(reader.readuntil(b"\r\n"))
            size_text = line[:-2].split(b";", 1)[0].strip()
            if (
                len(line) > _MAX_CHUNK_LINE
                or not size_text
                or any(c not in b"0123456789abcdefABCDEF" for c in size_text)
            ):
                raise _ClientFailed("malformed chunk size")
            size = int(size_text, 16)
            if size == 0:
                while (await self._read(reader.readuntil(b"\r\n"))) != b"\r\n":
                    pass  # trailers: dropped
                return
            remaining = size
            while remaining:
                data = await self._read(reader.read(min(remaining, _CHUNK)))
                if not data:
                    raise _ClientFailed("the body ended early")
                remaining -= len(data)
                yield data
            if await self._read(reader.readexactly(2)) != b"\r\n":
                raise _ClientFailed("malformed chunk")

    async def _read(self, pending: Awaitable[_T]) -> _T:
        """``pending`` within the idle timeout; the sandbox's side failing is :class:`_ClientFailed`."""
        try:
            async with asyncio.timeout(self._idle_timeout_s):
                return await pending
        except TimeoutError:
            raise _ClientFailed(f"nothing moved for {self._idle_timeout_s:g} s") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            raise _ClientFailed(f"the connection failed ({type(exc).__name__})") from None


async def _refuse(writer: asyncio.StreamWriter, status: int, rule: str, reason: str) -> None:
    writer.write(render_response(status, rule, reason))
    await writer.drain()
