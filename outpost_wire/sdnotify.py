"""systemd readiness and watchdog notifications (``sd_notify``), without a dependency; used by both
daemons under ``Type=notify``.

The edge says:

* ``READY=1`` once, when its first tunnel is up (``systemctl start`` returns then);
* ``WATCHDOG=1`` every ``WatchdogSec/2`` while it is healthy: the link is connected, or was
  connected (or started) less than ``grace_s`` ago, so a reconnect with backoff is not a failure but
  a hung event loop or a link stuck for good is (systemd kills and, with ``Restart=on-failure``,
  restarts it);
* ``STOPPING=1`` when it starts to drain.

The control plane says ``READY=1`` once its API and tunnel listen and its harness runs, then
``WATCHDOG=1`` while its event loop turns (its ``connected`` event is set for good), and
``STOPPING=1`` when SIGTERM starts its drain.

Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op. The socket may be a path or an
abstract-namespace name (``@name``). :class:`WatchdogClock` is the pure decision, fed ``now``;
:func:`supervise` is the driver that sleeps and sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

__all__ = ["Notifier", "WatchdogClock", "supervise", "watchdog_interval_s"]

log = logging.getLogger(__name__)


class Notifier:
    """Sends ``KEY=VALUE`` datagrams to systemd's notification socket; a no-op without one."""

    def __init__(self, address: str | None) -> None:
        if address and address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace
        self.address = address or None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Notifier:
        return cls(environ.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, message: str) -> bool:
        """Send one message; False (and a debug line) if there is no socket or sending failed."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self.address)
                sock.sendall(message.encode())
        except OSError as exc:
            log.debug("sd_notify %r failed: %s", message, exc)
            return False
        return True

    def ready(self) -> bool:
        return self.notify("READY=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")


def watchdog_interval_s(environ: Mapping[str, str], pid: int | None = None) -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds, or None when the watchdog is off or meant for another
    process (``WATCHDOG_PID``)."""
    usec = environ.get("WATCHDOG_USEC", "")
    owner = environ.get("WATCHDOG_PID", "")
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2e6 if value > 0 else None


class WatchdogClock:
    """Decides whether to pet the watchdog: yes while connected, and for ``grace_s`` after the last
    moment the link was seen connected (or after start, if it never was)."""

    def __init__(self, grace_s: float, now: float) -> None:
        self.grace_s = grace_s
        self.last_healthy = now

    def healthy(self, connected: bool, now: float) -> bool:
        if connected:
            self.last_healthy = now
        return now - self.last_healthy <= self.grace_s


async def supervise(
    notifier: Notifier,
    connected: asyncio.Event,
    *,
    interval_s: float | None,
    grace_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Send READY=1 when ``connected`` is first set, then WATCHDOG=1 every ``interval_s`` while
    healthy. Runs until cancelled; returns at once when there is no socket."""
    if not notifier.enabled:
        return
    watchdog = WatchdogClock(grace_s, clock())
    ready = False
    while True:
        if not ready and connected.is_set():
            ready = True
            notifier.ready()
            log.info("told systemd this service is ready (READY=1)")
        if interval_s is None:  # no watchdog: only READY=1 to send
            if ready:
                return
            await connected.wait()
            continue
        if watchdog.healthy(connected.is_set(), clock()):
            notifier.watchdog()
        else:
            log.warning("no tunnel for over %.0f s: no longer petting the systemd watchdog", grace_s)
        if ready:
            await asyncio.sleep(interval_s)
        else:  # wake at once when the first tunnel comes up
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(connected.wait(), interval_s)
