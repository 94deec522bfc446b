"""The held channel to the tool daemon of one sandbox.

One attached ``docker exec`` per container runs ``sandboxd`` (its source is sent over stdin, see
:mod:`.sandboxd`); the exec's socket is handed to asyncio and stays open for the container's life,
so a tool call costs one write and one read on a local socket instead of a ``docker exec``.
Concurrent calls are multiplexed by request id. When the stream ends (container killed, daemon
died, channel closed) every pending call fails with
:class:`~edge_agent.errors.SandboxUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Mapping
from typing import Any

from outpost_wire.results import ToolResult

from ..errors import SandboxUnavailable
from .container_runtime import ContainerRuntime, ExecStream
from .protocol import (
    STDERR,
    FrameDecoder,
    StreamDemuxer,
    bootstrap_payload,
    decode_message,
    encode_frame,
    to_tool_result,
)
from .sandboxd import BOOTSTRAP, payload
from .tool_call import ToolCall

__all__ = ["CallTimeout", "DaemonChannel", "daemon_source", "report_margin_s"]

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024
_STDERR_TAIL = 4096
_LARGE_FRAME = 1024 * 1024  # decode bigger frames off the event loop
_DRAIN_ABOVE = 256 * 1024
_REPORT_MARGIN_S = 1.0


class CallTimeout(SandboxUnavailable):
    """The daemon did not answer by the call's deadline (the channel itself is still up)."""


def report_margin_s(remaining_s: float) -> float:
    """How long before a call's deadline the daemon's own timeout ends: a second, or a quarter of
    the time left when less than four seconds are."""
    return min(_REPORT_MARGIN_S, max(0.0, remaining_s) / 4)


@functools.cache
def daemon_source() -> bytes:
    """:mod:`edge_agent.sandbox.sandboxd`, as sent to every sandbox: one script (see its ``bundle``)."""
    return payload()


def _decode(frame: bytes) -> tuple[dict[str, Any], ToolResult | None]:
    message = decode_message(frame)
    return message, (to_tool_result(message) if "id" in message else None)


class DaemonChannel:
    """A connected sandboxd. Build it with :meth:`open`; :meth:`close` is idempotent."""

    def __init__(
        self, stream: ExecStream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, label: str
    ) -> None:
        self._stream = stream
        self._reader = reader
        self._writer = writer
        self._label = label
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[ToolResult]] = {}
        self._hello: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._drain_lock = asyncio.Lock()
        self._stderr = bytearray()
        self._closed = False
        self._close_reason = "channel closed"
        self.hello: dict[str, Any] = {}
        self._reader_task = asyncio.create_task(self._read_loop(), name=f"sandboxd-reader-{label}")

    @classmethod
    async def open(
        cls,
        runtime: ContainerRuntime,
        container_id: str,
        *,
        user: str,
        workdir: str,
        env: Mapping[str, str] | None = None,
        handshake_timeout_s: float = 15.0,
    ) -> DaemonChannel:
        """Start sandboxd in the container and wait for its hello."""
        stream = await runtime.open_exec_stream(
            container_id, ["python3", "-u", "-c", BOOTSTRAP], user=user, workdir=workdir, env=env
        )
        try:
            reader, writer = await asyncio.open_connection(sock=stream.sock, limit=_READ_CHUNK)
        except OSError as exc:
            stream.close()
            raise SandboxUnavailable(f"sandbox channel could not be set up: {exc}") from None
        channel = cls(stream, reader, writer, label=container_id[:12])
        try:
            writer.write(bootstrap_payload(daemon_source()))
            async with asyncio.timeout(handshake_timeout_s):
                channel.hello = await asyncio.shield(channel._hello)
        except BaseException as exc:
            await channel.close()
            if isinstance(exc, TimeoutError):
                raise SandboxUnavailable(
                    f"sandbox daemon did not start within {handshake_timeout_s:g}s{channel._diagnostics()}"
                ) from None
            if isinstance(exc, (SandboxUnavailable, OSError)):
                raise SandboxUnavailable(
                    f"sandbox daemon failed to start: {exc}{channel._diagnostics()}"
                ) from None
            raise
        return channel

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def close_reason(self) -> str:
        return self._close_reason

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one checked tool call; wait for the answer until ``call.deadline``. The daemon is
        told the tool's own timeout, cut to end :func:`report_margin_s` before the deadline (so
        that it reports its timeout, with the partial output, before the edge gives up). Raises
        :class:`SandboxUnavailable` if the channel is or goes down, :class:`CallTimeout` if no
        answer arrives by the deadline (the call is cancelled)."""
        if self._closed:
            raise SandboxUnavailable(self._close_reason)
        loop = asyncio.get_running_loop()
        remaining = call.deadline - loop.time()
        timeout_ms = min(call.timeout_ms, int((remaining - report_margin_s(remaining)) * 1000))
        if timeout_ms < 1:
            raise CallTimeout("the call's deadline passed before the sandbox was ready to run it")
        req_id = next(self._ids)
        future: asyncio.Future[ToolResult] = loop.create_future()
        self._pending[req_id] = future
        try:
            frame = encode_frame(
                {"id": req_id, "tool": call.tool, "input": call.input, "timeout_ms": timeout_ms}
            )
            self._writer.write(frame)
            if self._writer.transport.get_write_buffer_size() > _DRAIN_ABOVE:
                async with self._drain_lock:
                    await self._writer.drain()
            async with asyncio.timeout_at(call.deadline):
                return await future
        except TimeoutError:
            self._send_cancel(req_id)
            raise CallTimeout(f"the sandbox did not answer within {remaining:.1f}s") from None
        except asyncio.CancelledError:
            self._send_cancel(req_id)
            raise
        except (ConnectionError, OSError) as exc:
            raise SandboxUnavailable(f"sandbox channel broke: {exc}") from None
        finally:
            self._pending.pop(req_id, None)

    def _send_cancel(self, req_id: int) -> None:
        if self._closed:
            return
        with contextlib.suppress(OSError, RuntimeError):
            self._writer.write(encode_frame({"cancel": req_id}))

    async def close(self) -> None:
        """Close the stream: the daemon sees EOF on stdin, kills its shells and exits."""
        if not self._closed:
            self._mark_closed("channel closed")
        with contextlib.suppress(Exception):
            self._writer.close()  # first: asyncio stops watching the fd before it is closed
        self._stream.close()
        if not self._reader_task.done():
            self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader_task

    # reading ---------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        demux = StreamDemuxer()
        frames = FrameDecoder()
        reason = "sandbox channel closed (the container or its daemon exited)"
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    break
                for stream, payload in demux.feed(data):
                    if stream == STDERR:
                        self._stderr += payload
                        del self._stderr[:-_STDERR_TAIL]
                        continue
                    for frame in frames.feed(payload):
                        await self._dispatch(frame)
        except SandboxUnavailable as exc:
            reason = f"{exc}{self._raw_hint(frames)}"
            log.warning("sandbox %s: %s", self._label, reason)
        except (ConnectionError, OSError) as exc:
            reason = f"sandbox channel broke: {exc}"
        finally:
            if not self._closed:
                if self._stderr:
                    log.info("sandbox %s daemon stderr: %s", self._label, self._stderr_text())
                self._mark_closed(reason)

    async def _dispatch(self, frame: bytes) -> None:
        if len(frame) > _LARGE_FRAME:
            message, result = await asyncio.to_thread(_decode, frame)
        else:
            message, result = _decode(frame)
        if message.get("event") == "hello":
            if not self._hello.done():
                self._hello.set_result(message)
            return
        req_id = message.get("id")
        future = self._pending.get(req_id) if isinstance(req_id, int) else None
        if future is None or result is None:
            if req_id is None:
                log.warning("sandbox %s: daemon reported: %s", self._label, message.get("content"))
            return  # a late answer to a cancelled or timed-out call
        if not future.done():
            future.set_result(result)

    def _mark_closed(self, reason: str) -> None:
        self._closed = True
        self._close_reason = reason
        error = SandboxUnavailable(reason)
        if not self._hello.done():
            self._hello.set_exception(error)
            self._hello.exception()  # mark retrieved: nobody may be waiting
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SandboxUnavailable(reason))
        self._pending.clear()

    # diagnostics -----------------------------------------------------------------------------

    def _stderr_text(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()

    def _diagnostics(self) -> str:
        text = self._stderr_text()
        return f" (stderr: {text[-500:]})" if text else ""

    @staticmethod
    def _raw_hint(frames: FrameDecoder) -> str:
        raw = frames.buffered[:200]
        return f" (output: {raw.decode('utf-8', 'replace')!r})" if raw else ""
