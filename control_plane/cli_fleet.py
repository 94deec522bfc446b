"""``outpost-control`` commands for the fleet: environments, enrollment tokens, edges, and a tool
call or sandbox by hand.

    environments create --name NAME | environments list
    tokens create --environment ENV [--ttl-s S] [--count N --out-dir DIR]
    tokens list [--environment ENV] | tokens revoke TOKEN_ID
    edges list [--environment ENV] | edges revoke EDGE_ID
    exec --environment ENV --session S TOOL [ARGUMENT] [--input JSON]
    destroy-sandbox --environment ENV --session S

Listings print a table on a terminal and JSON otherwise (``-o table|json`` chooses); ``create``
commands print the created object as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from control_plane.cli_client import add_client_flags, call
from outpost_wire.cli_support import UsageError, add_output_flag, print_rows
from outpost_wire.files import write_atomic

__all__ = ["FLEET_COMMANDS", "add_fleet_parsers", "short_time"]

_MAX_TOKENS = 1000


def short_time(value: Any) -> str | None:
    """An RFC 3339 time for a table cell, to the second (``2026-01-01T12:00:00Z``)."""
    if not isinstance(value, str) or not value:
        return None
    head, _, _ = value.partition(".")
    if head != value and value.endswith("Z"):
        return head + "Z"
    return value


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def add_fleet_parsers(sub: Any) -> None:
    env = sub.add_parser("environments", help="create and list environments").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    ec = env.add_parser("create", help="a self-hosted environment for edges to enroll in")
    add_client_flags(ec)
    ec.add_argument("--name", required=True, help="its name")
    ec.add_argument("--description", help="free text")
    el = env.add_parser("list", help="every environment")
    add_client_flags(el)
    add_output_flag(el)

    tok = sub.add_parser("tokens", help="enrollment tokens: create, list, revoke").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    tc = tok.add_parser("create", help="single-use, expiring tokens bound to an environment")
    add_client_flags(tc)
    tc.add_argument("--environment", required=True, metavar="ENV_ID", help="the environment edges join")
    tc.add_argument("--ttl-s", type=float, default=3600, help="seconds until it expires (default 3600)")
    tc.add_argument(
        "--count", type=int, default=1, help="how many tokens (one per edge host; 1..1000, default 1)"
    )
    tc.add_argument(
        "--out-dir",
        type=Path,
        help="write each token to its own file here (0600; the directory is made 0700) and print "
        "only their paths, not the tokens",
    )
    tl = tok.add_parser("list", help="every token: unused, used (by which edge), expired or revoked")
    add_client_flags(tl)
    add_output_flag(tl)
    tl.add_argument("--environment", metavar="ENV_ID", help="only this environment's tokens")
    tr = tok.add_parser("revoke", help="withdraw an unused token: it enrolls nothing from now on")
    add_client_flags(tr)
    add_output_flag(tr)
    tr.add_argument("token_id", metavar="TOKEN_ID", help="the token's id (etok_...), as tokens list shows")

    edges = sub.add_parser("edges", help="enrolled edges and their live status").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    edl = edges.add_parser(
        "list", help="every edge: connected, since, last seen, version, certificate expiry, sandboxes"
    )
    add_client_flags(edl)
    add_output_flag(edl)
    edl.add_argument("--environment", metavar="ENV_ID", help="only this environment's edges")
    er = edges.add_parser("revoke", help="refuse the edge's certificate from now on and cut its tunnel")
    add_client_flags(er)
    add_output_flag(er)
    er.add_argument("edge_id", metavar="EDGE_ID", help="the edge's id (edge_...), as edges list shows")

    ex = sub.add_parser("exec", help="run one tool call in a session's sandbox on an edge")
    add_client_flags(ex)
    ex.add_argument(
        "--environment", required=True, metavar="ENV_ID", help="the environment whose edge runs it"
    )
    ex.add_argument("--session", required=True, help="the session id the sandbox belongs to (any name)")
    ex.add_argument("--idempotency-key", help="a key making a retried call run once (default: a new one)")
    ex.add_argument(
        "--input", metavar="JSON", help="tool input as a JSON object (default for bash: ARGUMENT)"
    )
    ex.add_argument("tool", help="bash, read, write, edit, glob, grep, ...")
    ex.add_argument("argument", nargs="?", help="for bash: the command")

    sd = sub.add_parser("destroy-sandbox", help="destroy a session's sandbox and workspace")
    add_client_flags(sd)
    sd.add_argument("--environment", required=True, metavar="ENV_ID", help="the environment of the sandbox")
    sd.add_argument("--session", required=True, help="the session id")


# -- environments ----------------------------------------------------------------------------------
def _environments(args: argparse.Namespace) -> int:
    if args.action == "create":
        body: dict[str, Any] = {"name": args.name, "config": {"type": "self_hosted"}}
        if args.description:
            body["description"] = args.description
        _print_json(call(args, "POST", "/v1/environments", body))
        return 0
    rows: list[dict[str, Any]] = []
    page: str | None = None
    while True:
        data = call(
            args, "GET", "/v1/environments", params={"limit": 100, **({"page": page} if page else {})}
        )
        rows += data.get("data", [])
        page = data.get("next_page")
        if not page:
            break
    table = []
    for r in rows:
        edges: dict[str, Any] = r["edges"] if isinstance(r.get("edges"), dict) else {}
        table.append(
            r
            | {
                "created": short_time(r.get("created_at")),
                "enrolled": edges.get("enrolled"),
                "connected": edges.get("connected"),
            }
        )
    columns = [
        ("id", "ID"),
        ("name", "NAME"),
        ("created", "CREATED"),
        ("enrolled", "EDGES"),
        ("connected", "CONNECTED"),
    ]
    print_rows(args, table, columns, document=rows)
    return 0


# -- tokens ----------------------------------------------------------------------------------------
_TOKEN_COLUMNS = [
    ("id", "ID"),
    ("environment_id", "ENVIRONMENT"),
    ("created", "CREATED"),
    ("expires", "EXPIRES"),
    ("status", "STATUS"),
    ("used_by_edge_id", "USED BY"),
]


def _token_rows(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        t | {"created": short_time(t.get("created_at")), "expires": short_time(t.get("expires_at"))}
        for t in tokens
    ]


def _tokens(args: argparse.Namespace) -> int:
    if args.action == "create":
        return _create_tokens(args)
    if args.action == "list":
        params = {"environment_id": args.environment} if args.environment else None
        tokens = call(args, "GET", "/v1/enrollment_tokens", params=params)["data"]
        print_rows(args, _token_rows(tokens), _TOKEN_COLUMNS, document=tokens)
        return 0
    token = call(args, "POST", f"/v1/enrollment_tokens/{args.token_id}/revoke")
    print_rows(args, _token_rows([token]), _TOKEN_COLUMNS, document=token)
    return 0


def _create_tokens(args: argparse.Namespace) -> int:
    """One or many enrollment tokens. A fleet gets one per host (tokens are single use), written to
    files for the configuration-management tool to hand out, so they never pass through a terminal."""
    if not 1 <= args.count <= _MAX_TOKENS:
        raise UsageError(f"--count must be 1..{_MAX_TOKENS}")
    if args.count > 1 and args.out_dir is None:
        raise UsageError("--count above 1 needs --out-dir", hint="tokens go to files, not the terminal")
    path = f"/v1/environments/{args.environment}/enrollment_tokens"
    if args.out_dir is None:
        data = call(args, "POST", path, {"ttl_seconds": args.ttl_s})
        _print_json(data)
        print(
            "\nOn the edge host (the token is single use; keep it out of shell history):\n"
            f"  echo '<token>' > token && outpost-edge register --control-plane {args.url} "
            f"--token-file token --ca-fingerprint {data['ca_fingerprint']}",
            file=sys.stderr,
        )
        return 0
    out_dir: Path = args.out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise UsageError(f"cannot create --out-dir {out_dir}: {exc.strerror or exc}") from None
    written: list[dict[str, Any]] = []
    fingerprint = ""
    for _ in range(args.count):
        data = call(args, "POST", path, {"ttl_seconds": args.ttl_s})
        token_file = out_dir / f"{data['id']}.token"
        write_atomic(token_file, (data["token"] + "\n").encode("ascii"), mode=0o600)
        fingerprint = data["ca_fingerprint"]
        written.append({"id": data["id"], "file": str(token_file), "expires_at": data.get("expires_at")})
    _print_json({"environment_id": args.environment, "ca_fingerprint": fingerprint, "tokens": written})
    print(
        "\nOn each edge host, with one of these files (each is single use):\n"
        f"  outpost-edge register --control-plane {args.url} --token-file FILE "
        f"--ca-fingerprint {fingerprint}",
        file=sys.stderr,
    )
    return 0


# -- edges -----------------------------------------------------------------------------------------
_EDGE_COLUMNS = [
    ("id", "ID"),
    ("name", "NAME"),
    ("environment_id", "ENVIRONMENT"),
    ("connected_cell", "CONNECTED"),
    ("since", "SINCE"),
    ("last_seen", "LAST SEEN"),
    ("software_version", "VERSION"),
    ("cert_expires", "CERT EXPIRES"),
    ("sandboxes", "SANDBOXES"),
    ("control_plane_id", "CONTROL PLANE"),
]


def _edge_rows(edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for e in edges:
        if e.get("revoked_at"):
            connected: str | bool = "revoked"
        elif e.get("connected") and e.get("draining"):
            connected = "draining"
        else:
            connected = bool(e.get("connected"))
        in_use, capacity = e.get("sandboxes_in_use"), e.get("sandbox_capacity")
        rows.append(
            e
            | {
                "connected_cell": connected,
                "since": short_time(e.get("connected_at")),
                "last_seen": short_time(e.get("last_seen_at")),
                "cert_expires": short_time(e.get("cert_not_after")),
                "sandboxes": None if in_use is None else f"{in_use}/{capacity}",
            }
        )
    return rows


def _edges(args: argparse.Namespace) -> int:
    if args.action == "list":
        params = {"environment_id": args.environment} if args.environment else None
        edges = call(args, "GET", "/v1/edges", params=params)["data"]
        print_rows(args, _edge_rows(edges), _EDGE_COLUMNS, document=edges)
        return 0
    edge = call(args, "POST", f"/v1/edges/{args.edge_id}/revoke")
    print_rows(args, _edge_rows([edge]), _EDGE_COLUMNS, document=edge)
    return 0


# -- a tool call or a sandbox by hand --------------------------------------------------------------
def _exec(args: argparse.Namespace) -> int:
    if args.input is not None:
        try:
            tool_input = json.loads(args.input)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--input is not valid JSON: {exc.msg} at column {exc.colno}",
                hint='give an object, e.g. --input \'{"file_path": "a.txt"}\'',
            ) from None
        if not isinstance(tool_input, dict):
            raise UsageError(f"--input must be a JSON object, not {type(tool_input).__name__}")
    elif args.tool == "bash" and args.argument is not None:
        tool_input = {"command": args.argument}
    else:
        raise UsageError("no tool input", hint="give it with --input JSON (or, for bash, the command)")
    body = {
        "environment_id": args.environment,
        "session_id": args.session,
        "tool": args.tool,
        "input": tool_input,
    }
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    data = call(args, "POST", "/v1/sandboxes/exec", body)
    for block in data["content"]:
        if block["type"] == "text":
            print(block["text"])
        else:
            source = block["source"]
            print(f"[{block['type']} {source['media_type']}, {len(source['data'])} base64 chars]")
    return 1 if data["is_error"] else 0


def _destroy_sandbox(args: argparse.Namespace) -> int:
    body = {"environment_id": args.environment, "session_id": args.session}
    _print_json(call(args, "POST", "/v1/sandboxes/destroy", body))
    return 0


FLEET_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "environments": _environments,
    "tokens": _tokens,
    "edges": _edges,
    "exec": _exec,
    "destroy-sandbox": _destroy_sandbox,
}
