"""The seam between the API (which records input) and the harness (which acts on it).

The API appends user events to the log and then calls :meth:`SessionRunner.wake`; it never runs a
turn itself. The harness decides everything from the log, so ``wake`` carries no data.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SessionRunner"]


class SessionRunner(Protocol):
    async def wake(self, session_id: str) -> None:
        """New input for the session (or it may need resuming): make sure a harness processes
        its log. Returns at once; never waits for a turn."""

    async def session_ended(self, session_id: str) -> None:
        """The session was archived or deleted: stop any turn, release the lease, and destroy
        its sandbox and workspace at the edge."""
