"""``outpost-control``: run the control plane, and operate it.

    outpost-control serve --data-dir DIR [--http 127.0.0.1:8080] [--tunnel 127.0.0.1:7443]
        [--model-api-key-file FILE]
    outpost-control environments create --name NAME
    outpost-control tokens create --environment ENV_ID [--ttl-s 3600] [--count N --out-dir DIR]
    outpost-control edges list | edges connected | edges revoke EDGE_ID
    outpost-control exec --environment ENV_ID --session SESSION bash 'ls -la'
    outpost-control exec --environment ENV_ID --session SESSION read --input '{"file_path": "a.txt"}'

Operator commands talk to the HTTP API (``--url``, default ``$OUTPOST_URL`` or
http://127.0.0.1:8080) with an API key from ``--api-key-file``, ``$OUTPOST_API_KEY``, or the admin
key file that ``serve`` writes into its data directory (``--data-dir``).

Under systemd (``Type=notify``) ``serve`` sends ``READY=1`` once the API and the tunnel listen and
the harness runs, ``WATCHDOG=1`` every ``WatchdogSec/2`` while its event loop turns, and
``STOPPING=1`` when SIGTERM starts the drain.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import ValidationError

from control_plane.config import ControlPlaneConfig
from control_plane.model_api_key import ModelApiKeyFileError, model_api_key
from control_plane.server import ADMIN_KEY_FILE, ControlPlane
from outpost_wire import sdnotify
from outpost_wire.files import write_atomic
from outpost_wire.logfmt import configure_logging

__all__ = ["main"]

_MAX_TOKENS = 1000


def _hostport(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="outpost-control", description="Outpost control plane")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API, the tunnel server and the harnesses")
    serve.add_argument(
        "--config", type=Path, help="YAML file with ControlPlaneConfig keys (flags override it)"
    )
    serve.add_argument("--data-dir", type=Path, help="default: $OUTPOST_DATA_DIR or /var/lib/outpost-control")
    serve.add_argument("--http", type=_hostport, help="API listen address (default 127.0.0.1:8080)")
    serve.add_argument("--tunnel", type=_hostport, help="tunnel listen address (default 127.0.0.1:7443)")
    serve.add_argument("--public-tunnel-address", help="host:port edges dial (default: the listen address)")
    serve.add_argument(
        "--tls-hostname", action="append", default=[], help="name for the tunnel (and HTTPS) certificate"
    )
    serve.add_argument(
        "--http-tls",
        action="store_true",
        help="serve the API over HTTPS (a certificate from the control plane's CA; client certificates "
        "optional, used to authenticate edges on the WebSocket tunnel)",
    )
    serve.add_argument(
        "--model-base-url", help="a Messages-API endpoint (default: $ANTHROPIC_BASE_URL or Anthropic's)"
    )
    serve.add_argument(
        "--model-api-key-file",
        type=Path,
        help="file holding the model API key, empty for none "
        "(default: $ANTHROPIC_API_KEY_FILE, else the key in $ANTHROPIC_API_KEY)",
    )
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument(
        "--log-format",
        choices=("plain", "json"),
        default="plain",
        help="plain lines (default) or one JSON object per line",
    )

    def client(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--url", default=os.environ.get("OUTPOST_URL", "http://127.0.0.1:8080"))
        sp.add_argument("--api-key-file", type=Path)
        sp.add_argument("--data-dir", type=Path, default=os.environ.get("OUTPOST_DATA_DIR"))
        sp.add_argument(
            "--ca-file",
            type=Path,
            default=os.environ.get("OUTPOST_CA_FILE"),
            help="also trust this CA for an https --url (default: $OUTPOST_CA_FILE, else the "
            "control plane's own CA from --data-dir)",
        )

    env = sub.add_parser("environments", help="manage environments").add_subparsers(
        dest="action", required=True
    )
    ec = env.add_parser("create")
    client(ec)
    ec.add_argument("--name", required=True)
    ec.add_argument("--description")
    client(env.add_parser("list"))

    tok = sub.add_parser("tokens", help="enrollment tokens").add_subparsers(dest="action", required=True)
    tc = tok.add_parser("create", help="a single-use, expiring token bound to an environment")
    client(tc)
    tc.add_argument("--environment", required=True)
    tc.add_argument("--ttl-s", type=float, default=3600)
    tc.add_argument(
        "--count", type=int, default=1, help="how many tokens (one per edge host; 1..1000, default 1)"
    )
    tc.add_argument(
        "--out-dir",
        type=Path,
        help="write each token to its own file here (0600; the directory is made 0700) and print "
        "only their paths, not the tokens",
    )

    edges = sub.add_parser("edges", help="enrolled and connected edges").add_subparsers(
        dest="action", required=True
    )
    client(edges.add_parser("list"))
    client(edges.add_parser("connected"))
    er = edges.add_parser("revoke")
    client(er)
    er.add_argument("edge_id")

    ex = sub.add_parser("exec", help="run one tool call in a session's sandbox on an edge")
    client(ex)
    ex.add_argument("--environment", required=True)
    ex.add_argument("--session", required=True)
    ex.add_argument("--idempotency-key")
    ex.add_argument("--input", help="tool input as JSON (default for bash: the command argument)")
    ex.add_argument("tool")
    ex.add_argument("argument", nargs="?", help="for bash: the command")

    sd = sub.add_parser("destroy-sandbox", help="destroy a session's sandbox and workspace")
    client(sd)
    sd.add_argument("--environment", required=True)
    sd.add_argument("--session", required=True)
    return p


# -- serve ---------------------------------------------------------------------------------------
def _serve_config(args: argparse.Namespace) -> ControlPlaneConfig:
    data: dict[str, Any] = {}
    if args.config is not None:
        loaded = yaml.safe_load(args.config.read_text())
        if not isinstance(loaded, dict):
            raise SystemExit(f"outpost-control: {args.config} must hold a mapping of config keys")
        data.update(loaded)
    data_dir = args.data_dir or os.environ.get("OUTPOST_DATA_DIR")
    if data_dir:
        data["data_dir"] = str(data_dir)
    if args.http:
        data["http_host"], data["http_port"] = args.http
    if args.tunnel:
        data["tunnel_host"], data["tunnel_port"] = args.tunnel
    if args.public_tunnel_address:
        data["public_tunnel_address"] = args.public_tunnel_address
    if args.tls_hostname:
        data["tls_hostnames"] = ["localhost", *args.tls_hostname]
    if args.http_tls:
        data["http_tls"] = True
    if args.model_base_url:
        data["model_base_url"] = args.model_base_url
    if args.model_api_key_file:
        data["model_api_key_file"] = str(args.model_api_key_file)
    try:
        config = ControlPlaneConfig.model_validate(data)
    except ValidationError as exc:
        problems = "\n".join(f"  {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise SystemExit(f"outpost-control: invalid configuration:\n{problems}") from None
    try:  # fail before anything listens if the key file is missing or unreadable
        model_api_key(config, os.environ)
    except ModelApiKeyFileError as exc:
        raise SystemExit(f"outpost-control: {exc}") from None
    return config


async def _serve(args: argparse.Namespace) -> int:
    config = _serve_config(args)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    notifier = sdnotify.Notifier.from_environ(os.environ)  # systemd Type=notify, if any
    supervise: asyncio.Task[None] | None = None
    try:
        async with ControlPlane(config) as cp:
            print(f"Outpost control plane {cp.id}: API {cp.http_url}, tunnel {cp.tunnel_address}", flush=True)
            print(f"admin API key: {cp.admin_key_path}", flush=True)
            # Serving: READY=1 now, then WATCHDOG=1 while this event loop turns (the drain included).
            serving = asyncio.Event()
            serving.set()
            interval_s = sdnotify.watchdog_interval_s(os.environ)
            supervise = asyncio.create_task(
                sdnotify.supervise(notifier, serving, interval_s=interval_s, grace_s=0),
                name="control-sdnotify",
            )
            await stop.wait()
            logging.getLogger("outpost_control").info("signal received; draining edges")
            notifier.stopping()
    finally:
        if supervise is not None:
            supervise.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervise
    return 0


# -- operator client -----------------------------------------------------------------------------
def _api_key(args: argparse.Namespace) -> str:
    if args.api_key_file is not None:
        return Path(args.api_key_file).read_text().strip()
    if os.environ.get("OUTPOST_API_KEY"):
        return os.environ["OUTPOST_API_KEY"].strip()
    if args.data_dir:
        return (Path(args.data_dir) / ADMIN_KEY_FILE).read_text().strip()
    raise SystemExit("outpost-control: no API key: pass --api-key-file, set OUTPOST_API_KEY, or --data-dir")


def _verify(args: argparse.Namespace) -> ssl.SSLContext | bool:
    """TLS trust for an ``https`` API URL: the system's CAs plus the control plane's own (a control
    plane with ``http_tls`` serves a certificate from it), from ``--ca-file`` or the data dir."""
    ca_file: Path | None = args.ca_file
    if ca_file is None and args.data_dir:
        candidate = Path(args.data_dir) / "ca" / "ca.crt"
        ca_file = candidate if candidate.is_file() else None
    if ca_file is None:
        return True
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=str(ca_file))
    return context


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    with httpx.Client(
        base_url=args.url,
        timeout=300,
        headers={"authorization": f"Bearer {_api_key(args)}"},
        verify=_verify(args),
    ) as c:
        try:
            response = c.request(method, path, json=body)
        except httpx.HTTPError as exc:
            hint = ""
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                hint = " (a control plane serving its own certificate: pass --ca-file or --data-dir)"
            raise SystemExit(f"outpost-control: cannot reach {args.url}: {exc}{hint}") from None
    data = response.json() if response.content else None
    if response.status_code >= 400:
        err = (data or {}).get("error", {}) if isinstance(data, dict) else {}
        message = err.get("message", response.text)
        raise SystemExit(f"outpost-control: {response.status_code} {err.get('type', '')}: {message}")
    return data


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _create_tokens(args: argparse.Namespace) -> int:
    """One or many enrollment tokens. A fleet gets one per host (tokens are single use), written to
    files for the configuration-management tool to hand out, so they never pass through a terminal."""
    if not 1 <= args.count <= _MAX_TOKENS:
        raise SystemExit(f"outpost-control: --count must be 1..{_MAX_TOKENS}")
    if args.count > 1 and args.out_dir is None:
        raise SystemExit(
            "outpost-control: --count above 1 needs --out-dir (tokens go to files, not the terminal)"
        )
    path = f"/v1/environments/{args.environment}/enrollment_tokens"
    if args.out_dir is None:
        data = _call(args, "POST", path, {"ttl_seconds": args.ttl_s})
        _print(data)
        print(
            "\nOn the edge host (the token is single use; keep it out of shell history):\n"
            f"  echo '<token>' > token && outpost-edge register --control-plane {args.url} "
            f"--token-file token --ca-fingerprint {data['ca_fingerprint']}",
            file=sys.stderr,
        )
        return 0
    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    written: list[dict[str, Any]] = []
    fingerprint = ""
    for _ in range(args.count):
        data = _call(args, "POST", path, {"ttl_seconds": args.ttl_s})
        token_file = out_dir / f"{data['id']}.token"
        write_atomic(token_file, (data["token"] + "\n").encode("ascii"), mode=0o600)
        fingerprint = data["ca_fingerprint"]
        written.append({"id": data["id"], "file": str(token_file), "expires_at": data.get("expires_at")})
    _print({"environment_id": args.environment, "ca_fingerprint": fingerprint, "tokens": written})
    print(
        "\nOn each edge host, with one of these files (each is single use):\n"
        f"  outpost-edge register --control-plane {args.url} --token-file FILE "
        f"--ca-fingerprint {fingerprint}",
        file=sys.stderr,
    )
    return 0


def _operate(args: argparse.Namespace) -> int:
    cmd, action = args.command, getattr(args, "action", None)
    if cmd == "environments" and action == "create":
        body: dict[str, Any] = {"name": args.name, "config": {"type": "self_hosted"}}
        if args.description:
            body["description"] = args.description
        _print(_call(args, "POST", "/v1/environments", body))
    elif cmd == "environments":
        _print(_call(args, "GET", "/v1/environments"))
    elif cmd == "tokens":
        return _create_tokens(args)
    elif cmd == "edges" and action == "list":
        _print(_call(args, "GET", "/v1/edges"))
    elif cmd == "edges" and action == "connected":
        _print(_call(args, "GET", "/v1/connected_edges"))
    elif cmd == "edges" and action == "revoke":
        _print(_call(args, "POST", f"/v1/edges/{args.edge_id}/revoke"))
    elif cmd == "exec":
        return _exec(args)
    elif cmd == "destroy-sandbox":
        _print(
            _call(
                args,
                "POST",
                "/v1/sandboxes/destroy",
                {"environment_id": args.environment, "session_id": args.session},
            )
        )
    return 0


def _exec(args: argparse.Namespace) -> int:
    if args.input:
        tool_input = json.loads(args.input)
    elif args.tool == "bash" and args.argument is not None:
        tool_input = {"command": args.argument}
    else:
        raise SystemExit("outpost-control: give the tool input with --input JSON (or a command for bash)")
    body = {
        "environment_id": args.environment,
        "session_id": args.session,
        "tool": args.tool,
        "input": tool_input,
    }
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    data = _call(args, "POST", "/v1/sandboxes/exec", body)
    for block in data["content"]:
        if block["type"] == "text":
            print(block["text"])
        else:
            source = block["source"]
            print(f"[{block['type']} {source['media_type']}, {len(source['data'])} base64 chars]")
    return 1 if data["is_error"] else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        configure_logging(args.log_level, args.log_format)
        return asyncio.run(_serve(args))
    return _operate(args)


if __name__ == "__main__":
    sys.exit(main())
