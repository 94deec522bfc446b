"""sd_notify over a fake NOTIFY_SOCKET: path and abstract sockets, watchdog interval, READY/WATCHDOG."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from outpost_wire.sdnotify import Notifier, WatchdogClock, supervise, watchdog_interval_s


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_sends_to_a_path_socket(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    n = Notifier.from_environ({"NOTIFY_SOCKET": path})
    assert n.ready() and n.watchdog() and n.stopping()
    assert [sock.recv(64) for _ in range(3)] == [b"READY=1", b"WATCHDOG=1", b"STOPPING=1"]


def test_sends_to_an_abstract_socket() -> None:
    name = f"outpost-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert Notifier(f"@{name}").ready()
        assert sock.recv(64) == b"READY=1"


def test_without_a_socket_or_with_a_dead_one_nothing_happens(tmp_path: Path) -> None:
    assert not Notifier.from_environ({}).enabled
    assert not Notifier.from_environ({}).ready()
    assert not Notifier(str(tmp_path / "gone")).ready()


def test_watchdog_interval_is_half_the_timeout_for_this_process_only() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, pid=7) == 15.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"}, pid=8) is None
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None


def test_watchdog_clock_allows_a_grace_after_the_link_was_last_up() -> None:
    clock = WatchdogClock(grace_s=10, now=0)
    assert clock.healthy(False, now=5)  # starting up
    assert not clock.healthy(False, now=11)  # never connected within the grace
    assert clock.healthy(True, now=12)
    assert clock.healthy(False, now=21)  # reconnecting
    assert not clock.healthy(False, now=23)


async def test_supervise_sends_ready_once_connected_then_pets_the_watchdog(
    listener: tuple[socket.socket, str],
) -> None:
    sock, path = listener
    sock.setblocking(False)
    connected = asyncio.Event()
    task = asyncio.create_task(supervise(Notifier(path), connected, interval_s=0.01, grace_s=60))
    loop = asyncio.get_running_loop()
    assert await asyncio.wait_for(loop.sock_recv(sock, 64), 5) == b"WATCHDOG=1"  # healthy: in grace
    connected.set()
    received: list[bytes] = []
    while received.count(b"WATCHDOG=1") < 2:
        received.append(await asyncio.wait_for(loop.sock_recv(sock, 64), 5))
    assert received.count(b"READY=1") == 1 and received.index(b"READY=1") < len(received) - 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
