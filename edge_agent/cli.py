"""``outpost-edge``: register this host with a control plane, and run the edge daemon.

    outpost-edge register --control-plane URL --token-file FILE [--ca-fingerprint SHA256]
    outpost-edge run [--config /etc/outpost-edge/config.yaml]
    outpost-edge check-config --config FILE
    outpost-edge doctor [--config FILE]     check config, identity, Docker, DNS, TCP, TLS, proxy, clock
    outpost-edge renew-certificate --config FILE   renew the client certificate now (the daemon
                                            also renews it by itself before it expires)

The enrollment token is single use; prefer ``--token-file`` or the ``OUTPOST_ENROLL_TOKEN``
environment variable to ``--token`` (a command line is visible to other users of the host).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from edge_agent.config import EdgeConfig, load_config
from edge_agent.errors import EdgeError
from outpost_wire.logfmt import ContextFilter, configure_logging

__all__ = ["main"]

log = logging.getLogger("outpost_edge")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="outpost-edge", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", type=Path, help="YAML config file")
        sp.add_argument("--state-dir", type=Path, help="override state_dir")
        sp.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING, ERROR")
        sp.add_argument(
            "--log-format", choices=("plain", "json"), default=None, help="override logging.format"
        )

    reg = sub.add_parser("register", help="enroll this edge with a control plane")
    common(reg)
    reg.add_argument("--control-plane", required=True, help="the control plane's HTTP(S) API URL")
    reg.add_argument("--token", help="enrollment token (visible in the process list; prefer --token-file)")
    reg.add_argument("--token-file", type=Path, help="file holding the enrollment token")
    reg.add_argument(
        "--ca-fingerprint", help="expected sha256 fingerprint of the control plane's CA (pinning)"
    )
    reg.add_argument("--tunnel-address", help="host:port of the tunnel, if the control plane does not say")
    reg.add_argument("--name", help="a name for this edge (default: host name)")

    run = sub.add_parser("run", help="run the edge daemon")
    common(run)
    run.add_argument("--tunnel-address", help="override control_plane.tunnel_address")

    chk = sub.add_parser("check-config", help="validate the config and policy, print the policy digest")
    common(chk)

    ren = sub.add_parser(
        "renew-certificate",
        help="renew this edge's client certificate now (the running daemon picks it up at its next check)",
    )
    common(ren)

    doc = sub.add_parser("doctor", help="check everything this edge needs and say what to fix")
    common(doc)
    doc.add_argument("--tunnel-address", help="override control_plane.tunnel_address")
    return p


def _configure_logging(config: EdgeConfig, args: argparse.Namespace) -> ContextFilter:
    level = args.log_level or config.logging.level
    context = configure_logging(level, args.log_format or config.logging.format)
    # The mcp SDK and its HTTP client log request bodies (tool arguments) at DEBUG: keep them out.
    for noisy in ("mcp", "httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, logging.getLevelName(level)))
    return context


def _load(args: argparse.Namespace) -> EdgeConfig:
    overrides: dict[str, object] = {}
    if args.state_dir is not None:
        overrides["state_dir"] = str(args.state_dir)
    tunnel = getattr(args, "tunnel_address", None)
    if tunnel:
        cp: dict[str, object] = {}
        if args.config is not None:
            cp = dict(load_config(args.config).control_plane.model_dump(exclude_none=True))
        cp["tunnel_address"] = tunnel
        overrides["control_plane"] = cp
    return load_config(args.config, overrides)


def _read_token(args: argparse.Namespace) -> str:
    if args.token_file is not None:
        return str(args.token_file.read_text()).strip()
    if args.token:
        return str(args.token).strip()
    env = os.environ.get("OUTPOST_ENROLL_TOKEN", "").strip()
    if env:
        return env
    raise EdgeError("no enrollment token: pass --token-file, set OUTPOST_ENROLL_TOKEN, or --token")


async def _register(args: argparse.Namespace, config: EdgeConfig) -> int:
    from edge_agent.enroll import register

    identity = await register(
        args.control_plane,
        _read_token(args),
        config.state_dir,
        name=args.name or config.name,
        ca_fingerprint=args.ca_fingerprint,
        tunnel_address=args.tunnel_address,
    )
    print(f"registered edge {identity.edge_id} in environment {identity.environment_id}")
    print(f"identity stored in {config.state_dir / 'identity'}; tunnel {identity.tunnel_address}")
    return 0


async def _renew_certificate(config: EdgeConfig) -> int:
    from edge_agent.identity import Identity
    from edge_agent.renew import renew_certificate, renewal_urls

    identity = await asyncio.to_thread(Identity.load, config.state_dir)
    cp = config.control_plane
    urls = renewal_urls([a.url for a in cp.addresses] or [cp.url], identity)
    renewed = await renew_certificate(identity, urls, proxy_url=config.connection.proxy_url)
    print(f"renewed the client certificate of edge {renewed.edge_id}")
    print(f"valid until {renewed.not_after:%Y-%m-%d %H:%M} UTC (was {identity.not_after:%Y-%m-%d %H:%M} UTC)")
    print("a running edge daemon picks it up at its next certificate check (identity.renew_check_interval_s)")
    return 0


async def _run(config: EdgeConfig, context: ContextFilter) -> int:
    from edge_agent.daemon import EdgeAgent

    agent = EdgeAgent(config)
    context.static["edge_id"] = agent.edge_id  # every line of this process is about this edge
    async with agent:
        await agent.run_until_signalled()
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from edge_agent.doctor import CheckResult, Doctor, Status, SystemProbes, print_report

    try:
        config = _load(args)
    except EdgeError as exc:
        fix = "correct the keys named above; `outpost-edge check-config --config FILE` checks again"
        return print_report([CheckResult("config", Status.FAIL, str(exc), fix)], sys.stdout)
    return print_report(Doctor(config, SystemProbes(), os.environ).run(), sys.stdout)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        return _doctor(args)
    try:
        config = _load(args)
        context = _configure_logging(config, args)
        if args.command == "check-config":
            policy = config.load_policy()
            print(f"config OK; policy digest {policy.digest()}")
            return 0
        if args.command == "register":
            return asyncio.run(_register(args, config))
        if args.command == "renew-certificate":
            return asyncio.run(_renew_certificate(config))
        return asyncio.run(_run(config, context))
    except EdgeError as exc:
        print(f"outpost-edge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
