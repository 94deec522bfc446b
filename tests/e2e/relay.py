"""A TCP relay in front of the control plane's tunnel port, for tests that take the network away."""

from __future__ import annotations

import asyncio


class SilentRelay:
    """A TCP relay between the edge and the control plane's tunnel port that can go silent the way
    a lost network path does: connections already open stay open but carry nothing (no FIN, no
    RST), new ones are refused. ``restore`` brings the path back for new connections."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._up = asyncio.Event()
        self._up.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> SilentRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def go_silent(self) -> None:
        self._up.clear()

    def restore(self) -> None:
        self._up.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._up.is_set():
            writer.close()  # nothing answers any more
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                await self._up.wait()  # silent: hold every byte, close nothing
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if self._up.is_set():
                dst.close()
