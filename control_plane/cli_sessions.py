"""``outpost-control sessions``: list sessions, and read a session's events as a timeline.

    sessions list [--status S] [--agent AGENT_ID] [--limit N] [--include-archived]
    sessions events SESSION_ID [--follow]

``sessions list`` reads ``GET /v1/sessions`` (the SDK's listing). ``sessions events`` prints the
log so far (``GET /v1/sessions/{id}/events``, every page), one line per event: time, type and a
short summary; ``-o json`` prints each event as it is, one JSON object per line. ``--follow`` then
streams new events (``GET .../events/stream``, resuming after the last one printed) until the
session goes idle or is terminated or deleted, or Ctrl-C; a dropped stream is resumed where it
stopped. A session that is terminated already has nothing more to follow.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from control_plane.cli_client import add_client_flags, call, open_stream
from control_plane.cli_fleet import short_time
from control_plane.cli_timeline import summarize
from outpost_wire.cli_support import UnreachableError, UsageError, add_output_flag, output_format, print_rows

__all__ = ["SESSION_COMMANDS", "add_session_parsers"]

_PAGE = 100
_STATUSES = ("idle", "running", "rescheduling", "terminated")
#: Events that end ``--follow``: the session stopped working (or is gone).
_FOLLOW_ENDS = frozenset({"session.status_idle", "session.status_terminated", "session.deleted"})
_RESUME_ATTEMPTS = 3
_RESUME_PAUSE_S = 1.0


def add_session_parsers(sub: Any) -> None:
    ses = sub.add_parser("sessions", help="list sessions, read a session's events").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    sl = ses.add_parser("list", help="sessions, newest first: id, status, agent, environment, created")
    add_client_flags(sl)
    add_output_flag(sl)
    sl.add_argument("--status", action="append", choices=_STATUSES, help="only these statuses (repeatable)")
    sl.add_argument("--agent", metavar="AGENT_ID", help="only this agent's sessions")
    sl.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    sl.add_argument("--include-archived", action="store_true", help="archived sessions too")

    se = ses.add_parser("events", help="a session's events as a timeline: time, type, summary")
    add_client_flags(se)
    add_output_flag(se)
    se.add_argument("session_id", metavar="SESSION_ID", help="the session's id (sesn_...)")
    se.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then stream new events until the session goes idle or is terminated (or Ctrl-C)",
    )


# -- sessions list -----------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    sessions: list[dict[str, Any]] = []
    page: str | None = None
    while len(sessions) < args.limit:
        params: dict[str, Any] = {"limit": min(_PAGE, args.limit - len(sessions))}
        if page:
            params["page"] = page
        if args.status:
            params["statuses[]"] = args.status
        if args.agent:
            params["agent_id"] = args.agent
        if args.include_archived:
            params["include_archived"] = "true"
        data = call(args, "GET", "/v1/sessions", params=params)
        sessions += data.get("data", [])
        page = data.get("next_page")
        if not page:
            break
    rows = []
    for s in sessions:
        agent: dict[str, Any] = s["agent"] if isinstance(s.get("agent"), dict) else {}
        rows.append(
            s
            | {
                "agent_cell": agent.get("name") or agent.get("id"),
                "created": short_time(s.get("created_at")),
            }
        )
    columns = [
        ("id", "ID"),
        ("status", "STATUS"),
        ("agent_cell", "AGENT"),
        ("environment_id", "ENVIRONMENT"),
        ("created", "CREATED"),
        ("title", "TITLE"),
    ]
    print_rows(args, rows, columns, document=sessions)
    return 0


# -- sessions events ---------------------------------------------------------------------------------
class _Printer:
    """Prints events as timeline lines (table) or one JSON object a line (json), flushing each."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.json = output_format(args, sys.stdout) == "json"
        self.printed = 0

    def __call__(self, event: dict[str, Any]) -> None:
        if self.json:
            line = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        else:
            when = short_time(event.get("processed_at")) or "-"
            kind = str(event.get("type", "?"))
            line = f"{when}  {kind:<28} {summarize(event)}".rstrip()
        print(line, flush=True)
        self.printed += 1


def _history(args: argparse.Namespace, show: Callable[[dict[str, Any]], None]) -> tuple[int, str | None]:
    """Print the log so far; the seq of its last event (0 if none) and that event's type."""
    path = f"/v1/sessions/{args.session_id}/events"
    page: str | None = None
    seq, last_type = 0, None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if page:
            params["page"] = page
        data = call(args, "GET", path, params=params)
        for event in data.get("data", []):
            show(event)
            last_type = event.get("type")
        seq += len(data.get("data", []))
        page = data.get("next_page")
        if not page:
            return seq, last_type


def _follow(args: argparse.Namespace, after_seq: int, show: Callable[[dict[str, Any]], None]) -> None:
    """Stream events after ``after_seq`` until one of :data:`_FOLLOW_ENDS`; resume a dropped stream."""
    path = f"/v1/sessions/{args.session_id}/events/stream"
    failures = 0
    while True:
        try:
            with open_stream(args, path, params={"after_seq": after_seq}) as frames:
                failures = 0
                for event, frame_id in _events(frames):
                    show(event)
                    if frame_id.isdigit():
                        after_seq = int(frame_id)
                    if event.get("type") in _FOLLOW_ENDS:
                        return
        except UnreachableError:
            failures += 1
            if failures > _RESUME_ATTEMPTS:
                raise
            time.sleep(_RESUME_PAUSE_S)


def _events(frames: Iterable[tuple[str, str, str]]) -> Iterable[tuple[dict[str, Any], str]]:
    """The session events among the frames (pings and previews skipped)."""
    for kind, data, frame_id in frames:
        if kind in ("ping", "event_start", "event_delta") or not data:
            continue
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event, frame_id


def _events_command(args: argparse.Namespace) -> int:
    show = _Printer(args)
    last_seq, last_type = _history(args, show)
    if not args.follow:
        return 0
    if last_type == "session.status_terminated":
        return 0  # nothing more will happen
    _follow(args, last_seq, show)
    return 0


def _sessions(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list(args)
    return _events_command(args)


SESSION_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"sessions": _sessions}
