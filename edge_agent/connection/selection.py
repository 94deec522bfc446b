"""Which transport to dial: the ``transport: auto`` state machine and its memory on disk.

Pure (no I/O, ``now`` passed in) except :func:`load_choice` / :func:`save_choice`. In ``auto``::

    PROBING ──(a transport connects)──► PINNED(kind)      plan: gRPC, then WebSocket
    PINNED(kind) ──(kind fails reprobe_after_failures times in a row)──► PROBING
    PINNED(kind) ──(the choice is older than memory_s)──► PROBING          plan while pinned: [kind]

The choice survives restarts in ``<state_dir>/transport.json``, so an edge behind a proxy that
blocks gRPC does not wait for gRPC's timeout on every start; PROBING again now and then lets it move
back to gRPC once the network allows it. ``grpc`` and ``websocket`` modes always dial that one.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "CHOICE_FILE",
    "Choice",
    "TransportKind",
    "TransportMode",
    "TransportSelector",
    "load_choice",
    "save_choice",
]

log = logging.getLogger(__name__)

CHOICE_FILE = "transport.json"
_FORMAT_VERSION = 1

TransportMode = Literal["grpc", "websocket", "auto"]


class TransportKind(enum.Enum):
    GRPC = "grpc"
    WEBSOCKET = "websocket"


_PROBE_ORDER = (TransportKind.GRPC, TransportKind.WEBSOCKET)


@dataclass(frozen=True)
class Choice:
    """The transport that last connected in ``auto`` mode, and since when (unix seconds)."""

    kind: TransportKind
    since: float


class TransportSelector:
    def __init__(
        self,
        mode: TransportMode,
        remembered: Choice | None = None,
        *,
        reprobe_after_failures: int = 10,
        memory_s: float = 24 * 3600.0,
    ) -> None:
        self.mode = mode
        self.choice = remembered if mode == "auto" else None
        self.failures = 0  # consecutive failures of the pinned transport
        self._reprobe_after_failures = reprobe_after_failures
        self._memory_s = memory_s

    def plan(self, now: float) -> tuple[TransportKind, ...]:
        """The transports to try, in order, for the next connection."""
        if self.mode != "auto":
            return (TransportKind(self.mode),)
        if self.choice is not None and now - self.choice.since >= self._memory_s:
            log.info("re-probing transports: the %s choice is over a day old", self.choice.kind.value)
            self.choice = None
        if self.choice is None:
            return _PROBE_ORDER
        return (self.choice.kind,)

    def failed(self, kind: TransportKind) -> None:
        """``kind`` could not connect."""
        if self.choice is None or kind is not self.choice.kind:
            return
        self.failures += 1
        if self.failures >= self._reprobe_after_failures:
            log.info("re-probing transports after %d failures of %s", self.failures, kind.value)
            self.choice = None
            self.failures = 0

    def succeeded(self, kind: TransportKind, now: float) -> Choice | None:
        """``kind`` connected. Returns the new choice when it changed (to be saved), else ``None``."""
        self.failures = 0
        if self.mode != "auto" or (self.choice is not None and self.choice.kind is kind):
            return None
        self.choice = Choice(kind, now)
        return self.choice


def load_choice(state_dir: Path) -> Choice | None:
    """The remembered choice, or ``None`` when there is none or it is unreadable (logged)."""
    path = state_dir / CHOICE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != _FORMAT_VERSION:
            raise ValueError("unknown version")
        return Choice(TransportKind(data["transport"]), float(data["since"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None


def save_choice(state_dir: Path, choice: Choice) -> None:
    """Write the choice atomically (0600). Blocking: call through ``asyncio.to_thread``."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {"version": _FORMAT_VERSION, "transport": choice.kind.value, "since": choice.since}
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=f".{CHOICE_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f)
            f.write("\n")
        os.replace(tmp, state_dir / CHOICE_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
