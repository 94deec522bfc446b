"""The edge's status: the ``/status`` document the daemon serves, and ``outpost-edge status``.

The daemon builds the document with :func:`status_document` on each ``GET /status`` of its local
observability endpoint (:mod:`edge_agent.observe`). ``outpost-edge status [--config FILE]
[-o table|json]`` reads it from ``observability.listen`` and prints it; when nothing answers
there it says so in one line and exits 4 (``EXIT_UNREACHABLE``)::

    $ outpost-edge status
    FIELD            VALUE
    edge             edge_3f2a... (build-host-17)
    environment      env_91c0...
    tunnel           connected since 2026-05-04T09:12:40Z (2h ago)
    control plane    outpost.example.com:7443 over grpc (cp_5d1e...)
    last error       -
    certificate      expires 2026-08-02T09:12:38Z (in 89 days)
    revoked          no
    sandboxes        1 of 8 (0 requests in flight)
    version          0.1.0

Document keys (all present; ``null`` when not known yet): ``edge_id``, ``name``,
``environment_id``, ``version``, ``state`` (the link's state: ``connected``, ``connecting``,
``handshaking``, ``backing_off``, ``draining``, ``stopped``, ``idle``, or ``revoked`` once the
control plane refuses this edge's identity for good), ``connected``, ``since`` (RFC 3339: when the
tunnel last went up or down), ``transport`` and ``control_plane`` (of the current or last tunnel),
``control_plane_id``, ``last_error``, ``handshakes``, ``revoked``, ``certificate_not_after``,
``certificate_expires_in_days``, ``sandboxes_live``, ``sandbox_capacity``, ``requests_in_flight``,
``refusal`` (why the control plane refuses this edge for good: ``revoked``, ``unknown_edge``,
``expired``, ...; ``revoked`` is true and ``state`` is ``revoked`` for any of them).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from edge_agent.config import EdgeConfig
from edge_agent.connection import Dialer, Link
from edge_agent.identity import Identity
from outpost_wire.cli_support import EXIT_OK, CliError, UnreachableError, UsageError, print_rows
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["REVOKED", "fetch_status", "show_status", "status_document", "status_rows"]

#: ``state`` of an edge the control plane refused for good (the link's terminal ``refused`` state).
REVOKED = "revoked"
_TIMEOUT_S = 5.0


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def status_document(
    *,
    identity: Identity,
    name: str,
    link: Link | None,
    dialer: Dialer,
    sandboxes_live: int,
    sandbox_capacity: int,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> dict[str, Any]:
    """The ``/status`` document (see the module docstring), read from the running parts."""
    state = link.state.value if link is not None else "idle"
    refusal = link.refusal if link is not None else None
    not_after = identity.not_after
    return {
        "edge_id": identity.edge_id,
        "name": name,
        "environment_id": identity.environment_id,
        "version": SOFTWARE_VERSION,
        "state": REVOKED if refusal is not None else state,
        "connected": link is not None and link.connected.is_set(),
        "since": _rfc3339(datetime.fromtimestamp(link.since, UTC)) if link is not None else None,
        "transport": dialer.current.value if dialer.current is not None else None,
        "control_plane": dialer.current_address,
        "control_plane_id": link.control_plane_id if link is not None else None,
        "last_error": link.last_error if link is not None else None,
        "handshakes": link.connections if link is not None else 0,
        "revoked": refusal is not None,
        "refusal": refusal,
        "certificate_not_after": _rfc3339(not_after),
        "certificate_expires_in_days": round((not_after - now()).total_seconds() / 86400, 1),
        "sandboxes_live": sandboxes_live,
        "sandbox_capacity": sandbox_capacity,
        "requests_in_flight": link.in_flight if link is not None else 0,
    }


def _status_url(config: EdgeConfig) -> str:
    if config.observability.listen is None:
        raise UsageError(
            "the edge's status endpoint is off (observability.listen is null)",
            hint="set observability.listen (default 127.0.0.1:9464) and restart the edge",
        )
    host, port = config.observability.address
    if host in ("0.0.0.0", ""):  # noqa: S104 - a wildcard listener is reached on loopback
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/status"


def fetch_status(config: EdgeConfig) -> dict[str, Any]:
    """GET the running daemon's ``/status``. Raises :class:`UnreachableError` when nothing answers."""
    url = _status_url(config)
    try:
        # trust_env=False: the local endpoint is never reached through a proxy.
        with httpx.Client(timeout=_TIMEOUT_S, trust_env=False) as client:
            response = client.get(url)
    except httpx.TimeoutException:
        raise UnreachableError(
            f"the edge daemon did not answer on {url} within {_TIMEOUT_S:g} s",
            hint="check that `outpost-edge run` is healthy (journalctl -u outpost-edge)",
        ) from None
    except httpx.TransportError:
        raise UnreachableError(
            f"the edge daemon is not running: nothing answers on {url}",
            hint="start it (systemctl start outpost-edge, or outpost-edge run --config FILE)",
        ) from None
    if response.status_code == 404:
        raise CliError(f"{url} has no status: the daemon there is older than this command or not an edge")
    if response.status_code != 200:
        raise CliError(f"{url} answered HTTP {response.status_code}")
    try:
        document = response.json()
    except ValueError:
        raise CliError(f"{url} answered something other than JSON") from None
    if not isinstance(document, dict):
        raise CliError(f"{url} answered something other than a status document")
    return document


def _ago(when: str | None, now: datetime) -> str:
    if not when:
        return "-"
    try:
        seconds = (now - datetime.fromisoformat(when)).total_seconds()
    except ValueError:
        return when
    if seconds < 0:
        return when
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{when} ({int(seconds // size)}{unit} ago)"
    return f"{when} ({int(seconds)}s ago)"


def _revoked(d: dict[str, Any]) -> str:
    if not d.get("revoked"):
        return "no"
    reason = d.get("refusal") or "revoked"
    return f"YES ({reason.replace('_', ' ')}): enroll it again (outpost-edge register --force)"


def status_rows(document: dict[str, Any], now: datetime | None = None) -> list[dict[str, str]]:
    """The document as FIELD / VALUE rows for people."""
    now = now or datetime.now(UTC)
    d = document
    name = f" ({d['name']})" if d.get("name") else ""
    tunnel = f"{d.get('state')} since {_ago(d.get('since'), now)}"
    if d.get("control_plane"):
        cp = f"{d['control_plane']} over {d.get('transport') or '?'}"
        if d.get("control_plane_id"):
            cp += f" ({d['control_plane_id']})"
        if not d.get("connected"):
            cp = "last: " + cp
    else:
        cp = "never connected"
    days = d.get("certificate_expires_in_days")
    expiry = f"expires {d.get('certificate_not_after')}"
    if isinstance(days, int | float):
        expiry += f" (in {days:g} days)" if days >= 0 else " (EXPIRED)"
    rows = [
        ("edge", f"{d.get('edge_id')}{name}"),
        ("environment", d.get("environment_id")),
        ("tunnel", tunnel),
        ("control plane", cp),
        ("last error", d.get("last_error")),
        ("certificate", expiry),
        ("revoked", _revoked(d)),
        (
            "sandboxes",
            f"{d.get('sandboxes_live')} of {d.get('sandbox_capacity')} "
            f"({d.get('requests_in_flight')} requests in flight)",
        ),
        ("version", d.get("version")),
    ]
    return [{"field": field, "value": "-" if value in (None, "") else str(value)} for field, value in rows]


def show_status(args: argparse.Namespace, config: EdgeConfig) -> int:
    """``outpost-edge status``: print the running daemon's status (``-o table|json``)."""
    document = fetch_status(config)
    print_rows(args, status_rows(document), (("field", "FIELD"), ("value", "VALUE")), document=document)
    return EXIT_OK
