"""``outpost-edge``: register this host with a control plane, and run the edge daemon.

    outpost-edge register --control-plane URL --token-file FILE [--ca-fingerprint SHA256]
                          [--config PATH | --write-config PATH] [--force]
    outpost-edge run [--config /etc/outpost-edge/config.yaml]
    outpost-edge check-config --config FILE
    outpost-edge doctor [--config FILE]     check config, identity, Docker, proxy, DNS, TCP, TLS,
                                            an authenticated hello, clock
    outpost-edge renew-certificate --config FILE   renew the client certificate now (the daemon
                                            also renews it by itself before it expires)
    outpost-edge status [--config FILE] [-o table|json]   the running edge's tunnel, control plane,
                                            identity, certificate expiry, revoked or not

``register`` writes a commented config (control plane URL, tunnel address, state_dir) to
``--write-config PATH``, or to ``--config PATH`` when that file is missing or empty; it never
overwrites a file with anything in it unless ``--force`` (which also replaces an identity already
in the state directory). A config that leaves the control plane out (a comments-only sample, say)
works too: the edge dials what enrollment stored with its identity. The enrollment token is single use; prefer
``--token-file`` or the ``OUTPOST_ENROLL_TOKEN`` environment variable to ``--token`` (a command
line is visible to other users of the host).

Every user error is one line on stderr and an exit code (docs/operations.md, "Exit codes"): 2 bad
flags, arguments or configuration; 3 the control plane refuses this edge (token used or expired,
CA fingerprint mismatch, edge revoked or unknown: ``run`` exits 3 and systemd leaves it stopped);
4 the control plane cannot be reached; 1 anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from edge_agent.config import EdgeConfig, load_config
from edge_agent.errors import ConfigError, EdgeError, EdgeRefused
from edge_agent.identity import Identity, IdentityError
from outpost_wire.cli_support import (
    CliError,
    RefusedError,
    UnreachableError,
    UsageError,
    add_output_flag,
    env_help,
    load_yaml_mapping,
    log_level,
    run_cli,
)
from outpost_wire.logfmt import ContextFilter, configure_logging

__all__ = ["main"]

log = logging.getLogger("outpost_edge")

PROG = "outpost-edge"
_REENROLL = (
    "enroll this edge again with a new token: outpost-edge register --force --control-plane URL "
    "--token-file FILE --config CONFIG"
)


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _log_format(value: str) -> str:
    fmt = value.strip().lower()
    if fmt not in ("plain", "json"):
        raise argparse.ArgumentTypeError(f"unknown log format {value!r}; use plain or json")
    return fmt


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="The Outpost edge agent: dials out to the control plane and runs tool calls in "
        "local Docker sandboxes.",
        epilog="exit codes: 0 ok, 1 failure, 2 usage or configuration, 3 refused (token, CA pin, "
        "revoked or unknown edge), 4 control plane unreachable",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--config",
            type=Path,
            default=_env("OUTPOST_EDGE_CONFIG"),
            metavar="PATH",
            help=env_help(
                "the edge's YAML config file (without one, every key takes its default)",
                "OUTPOST_EDGE_CONFIG",
            ),
        )
        sp.add_argument(
            "--state-dir",
            type=Path,
            default=_env("OUTPOST_EDGE_STATE_DIR"),
            metavar="DIR",
            help=env_help(
                "override state_dir: the identity, journal and other state", "OUTPOST_EDGE_STATE_DIR"
            ),
        )
        sp.add_argument(
            "--log-level",
            type=log_level,
            default=_env("OUTPOST_LOG_LEVEL"),
            metavar="LEVEL",
            help=env_help(
                "override logging.level: debug, info, warning or error, in any case", "OUTPOST_LOG_LEVEL"
            ),
        )
        sp.add_argument(
            "--log-format",
            type=_log_format,
            default=_env("OUTPOST_LOG_FORMAT"),
            metavar="FORMAT",
            help=env_help("override logging.format: plain or json", "OUTPOST_LOG_FORMAT"),
        )

    def tunnel_address(sp: argparse.ArgumentParser, text: str) -> None:
        sp.add_argument(
            "--tunnel-address",
            default=_env("OUTPOST_TUNNEL_ADDRESS"),
            metavar="HOST:PORT",
            help=env_help(text, "OUTPOST_TUNNEL_ADDRESS"),
        )

    reg = sub.add_parser(
        "register",
        help="enroll this edge with a control plane and write its config",
        description="Enroll this edge: make a key pair here, send only a CSR with the single-use "
        "token, store the identity in the state directory, and write a working config.",
    )
    common(reg)
    reg.add_argument(
        "--control-plane",
        default=_env("OUTPOST_URL"),
        metavar="URL",
        help=env_help(
            "the control plane's HTTP(S) API URL, e.g. https://outpost.example.com:8080", "OUTPOST_URL"
        ),
    )
    reg.add_argument(
        "--token-file",
        type=Path,
        default=_env("OUTPOST_ENROLL_TOKEN_FILE"),
        metavar="FILE",
        help=env_help("file holding the enrollment token", "OUTPOST_ENROLL_TOKEN_FILE"),
    )
    reg.add_argument(
        "--token",
        default=_env("OUTPOST_ENROLL_TOKEN"),
        help=env_help(
            "the enrollment token itself (visible in the process list: prefer --token-file or the "
            "environment variable)",
            "OUTPOST_ENROLL_TOKEN",
        ),
    )
    reg.add_argument(
        "--ca-fingerprint",
        default=_env("OUTPOST_CA_FINGERPRINT"),
        metavar="SHA256",
        help=env_help(
            "the control plane CA's sha256 fingerprint, as `outpost-control tokens create` prints it: "
            "nothing is sent to a control plane with another CA",
            "OUTPOST_CA_FINGERPRINT",
        ),
    )
    tunnel_address(reg, "the tunnel's host:port, if the control plane does not name it")
    reg.add_argument(
        "--name",
        default=_env("OUTPOST_EDGE_NAME"),
        help=env_help(
            "a name for this edge (default: the config's name, else the host name)", "OUTPOST_EDGE_NAME"
        ),
    )
    reg.add_argument(
        "--write-config",
        type=Path,
        metavar="PATH",
        help="write the edge's config here (0644; default: to --config PATH when that file is "
        "missing or empty)",
    )
    reg.add_argument(
        "--force",
        action="store_true",
        help="replace an identity already in the state directory, and a config file that is not empty",
    )

    run = sub.add_parser("run", help="run the edge daemon (exits 3 when the control plane revokes this edge)")
    common(run)
    tunnel_address(run, "override control_plane.tunnel_address")

    chk = sub.add_parser("check-config", help="validate the config and policy, print the policy digest")
    common(chk)

    ren = sub.add_parser(
        "renew-certificate",
        help="renew this edge's client certificate now (the running daemon picks it up at its next check)",
    )
    common(ren)

    doc = sub.add_parser(
        "doctor",
        help="check everything this edge needs, with a real authenticated hello, and say what to fix",
    )
    common(doc)
    tunnel_address(doc, "override control_plane.tunnel_address")

    st = sub.add_parser(
        "status",
        help="show the running edge's tunnel, control plane, last error, identity, certificate expiry "
        "and revocation (read from its local observability endpoint)",
    )
    common(st)
    add_output_flag(st)
    return p


# -- configuration ------------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    """A multi-line message (a config's validation errors) as one line."""
    head, *rest = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    return f"{head} {'; '.join(rest)}" if rest else head


def _usage(exc: EdgeError, hint: str | None = None) -> UsageError:
    return UsageError(_one_line(str(exc)), hint=hint)


def _load(args: argparse.Namespace, path: Path | None = None, *, use_config: bool = True) -> EdgeConfig:
    """The config from ``--config`` (or ``path``), with the command line's overrides.
    ``use_config=False``: defaults and overrides only."""
    path = (path or args.config) if use_config else None
    data = load_yaml_mapping(path) if path is not None else {}  # one-line YAML errors
    overrides: dict[str, object] = {}
    if args.state_dir is not None:
        overrides["state_dir"] = str(args.state_dir)
    tunnel = getattr(args, "tunnel_address", None)
    if tunnel:
        cp = data.get("control_plane")
        overrides["control_plane"] = {**(cp if isinstance(cp, dict) else {}), "tunnel_address": tunnel}
    try:
        return load_config(path, overrides)
    except ConfigError as exc:
        raise _usage(exc, "correct it; `outpost-edge check-config --config FILE` checks again") from None


def _configure_logging(
    config: EdgeConfig, args: argparse.Namespace, *, one_shot: bool = False
) -> ContextFilter:
    """``one_shot``: a command whose output is what it prints (register, renew-certificate) logs
    warnings and errors only, unless ``--log-level`` says otherwise."""
    level = args.log_level or ("WARNING" if one_shot else config.logging.level)
    context = configure_logging(level, args.log_format or config.logging.format)
    # The mcp SDK and its HTTP client log request bodies (tool arguments) at DEBUG: keep them out.
    for noisy in ("mcp", "httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, logging.getLevelName(level)))
    # uvicorn serves only the local observability endpoint here: its "Started/Finished server
    # process" lines would read as the daemon's own; its warnings and errors still show.
    logging.getLogger("uvicorn.error").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    return context


# -- register -----------------------------------------------------------------------------------------
def _read_token(args: argparse.Namespace) -> str:
    if args.token_file is not None:
        path: Path = args.token_file
        try:
            token = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise UsageError(
                f"token file {path} does not exist",
                hint="pass the file `outpost-control tokens create` wrote",
            ) from None
        except IsADirectoryError:
            raise UsageError(f"token file {path} is a directory", hint="pass the token file's path") from None
        except PermissionError:
            raise UsageError(
                f"cannot read token file {path}: permission denied", hint="check its owner and mode"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read token file {path}: {exc}") from None
        if not token:
            raise UsageError(
                f"token file {path} is empty", hint="pass the file `outpost-control tokens create` wrote"
            )
        return token
    if args.token and args.token.strip():
        return str(args.token).strip()
    raise UsageError(
        "no enrollment token", hint="pass --token-file FILE, or set OUTPOST_ENROLL_TOKEN in the environment"
    )


def _register(args: argparse.Namespace) -> int:
    from edge_agent.enroll import (
        EnrollmentError,
        EnrollmentRefused,
        EnrollmentUnreachable,
        check_config_target,
        config_is_empty,
        normalize_fingerprint,
        normalize_url,
        register,
        render_config,
        write_config,
    )

    if not args.control_plane:
        raise UsageError("no control plane URL", hint="pass --control-plane URL (or set OUTPOST_URL)")
    try:
        url = normalize_url(args.control_plane)
        if args.ca_fingerprint is not None:
            normalize_fingerprint(args.ca_fingerprint)
    except EnrollmentError as exc:
        raise UsageError(str(exc)) from None
    token = _read_token(args)

    # The config to read, and the one to write: --write-config, or a --config file that is
    # missing or empty (one with anything in it, even only comments, is read and kept).
    config_path: Path | None = args.config
    empty = config_path is not None and config_is_empty(config_path)
    config = _load(args, use_config=not empty)
    target: Path | None = args.write_config or (config_path if empty else None)
    state_dir = config.state_dir.resolve()
    try:
        if target is not None:
            check_config_target(target, force=args.force)
    except EnrollmentError as exc:
        raise UsageError(str(exc)) from None
    replaced = _existing_edge(state_dir)
    if replaced is not None and not args.force:
        raise UsageError(
            f"{state_dir} already holds the identity of edge {replaced}",
            hint="pass --force to enroll again and replace it",
        )

    _configure_logging(config, args, one_shot=True)
    try:
        identity = asyncio.run(
            register(
                url,
                token,
                state_dir,
                name=args.name or config.name,
                ca_fingerprint=args.ca_fingerprint,
                tunnel_address=args.tunnel_address,
                overwrite=args.force,
            )
        )
    except EnrollmentRefused as exc:
        hint = (
            "check --ca-fingerprint against what `outpost-control tokens create` printed"
            if "fingerprint" in str(exc)
            else "tokens are single use and expire: create a new one with outpost-control tokens create"
        )
        raise RefusedError(str(exc), hint=hint) from None
    except EnrollmentUnreachable as exc:
        raise UnreachableError(
            str(exc), hint="check the URL, this host's network, and HTTPS_PROXY / NO_PROXY"
        ) from None
    except EnrollmentError as exc:
        raise CliError(str(exc)) from None

    print(f"registered edge {identity.edge_id} in environment {identity.environment_id}")
    tunnel = identity.tunnel_address or f"none named (WebSocket on {identity.control_plane_url})"
    print(f"identity stored in {state_dir / 'identity'}; tunnel {tunnel}")
    if replaced is not None and replaced != identity.edge_id:
        print(
            f"replaced the identity of edge {replaced}: "
            f"revoke it with outpost-control edges revoke {replaced}"
        )
    if target is not None:
        try:
            write_config(
                target, render_config(identity, state_dir=state_dir, name=args.name), force=args.force
            )
        except EnrollmentError as exc:
            hint = "the edge is registered: write the config yourself (docs/configuration.md)"
            raise CliError(str(exc), hint=hint) from None
        print(f"config written to {target}")
        print(f"start the edge with: outpost-edge run --config {target}")
    elif config_path is not None:
        print(f"start the edge with: outpost-edge run --config {config_path}")
    else:
        print(f"start the edge with: outpost-edge run --state-dir {state_dir}")
        print("(or write its config file with --write-config PATH next time)")
    return 0


def _existing_edge(state_dir: Path) -> str | None:
    """The edge id of an identity already in ``state_dir`` (``?`` if it is unreadable), else None."""
    if not Identity.exists(state_dir):
        return None
    try:
        return Identity.load(state_dir).edge_id
    except IdentityError:
        return "?"


# -- run and the rest ---------------------------------------------------------------------------------
async def _run_daemon(config: EdgeConfig, context: ContextFilter) -> int:
    from edge_agent.daemon import EdgeAgent

    agent = EdgeAgent(config)
    context.static["edge_id"] = agent.edge_id  # every line of this process is about this edge
    async with agent:
        await agent.run_until_signalled()
    return 0


def _run(args: argparse.Namespace) -> int:
    config = _load(args)
    if not Identity.exists(config.state_dir):
        cp = config.control_plane
        where = f"{args.config}" if args.config else "the default configuration (no --config)"
        if not (cp.url or cp.tunnel_address or cp.addresses):
            raise UsageError(
                f"no control plane configured: {where} names none, and {config.state_dir} holds no "
                "edge identity",
                hint="register this edge first: outpost-edge register --control-plane URL --token-file FILE "
                f"--config {args.config or '/etc/outpost-edge/config.yaml'}",
            )
        raise UsageError(
            f"this edge is not registered: no identity in {config.state_dir / 'identity'}",
            hint="register it first: outpost-edge register --control-plane URL --token-file FILE",
        )
    context = _configure_logging(config, args)
    return asyncio.run(_run_daemon(config, context))


def _check_config(args: argparse.Namespace) -> int:
    config = _load(args)
    print(f"config OK; policy digest {config.load_policy().digest()}")
    return 0


def _renew(args: argparse.Namespace) -> int:
    from edge_agent.renew import RenewalError, renew_certificate, renewal_urls

    config = _load(args)
    _configure_logging(config, args, one_shot=True)

    async def renew() -> int:
        identity = await asyncio.to_thread(Identity.load, config.state_dir)
        cp = config.control_plane
        urls = renewal_urls([a.url for a in cp.addresses] or [cp.url], identity)
        renewed = await renew_certificate(identity, urls, proxy_url=config.connection.proxy_url)
        print(f"renewed the client certificate of edge {renewed.edge_id}")
        print(
            f"valid until {renewed.not_after:%Y-%m-%d %H:%M} UTC "
            f"(was {identity.not_after:%Y-%m-%d %H:%M} UTC)"
        )
        print(
            "a running edge daemon picks it up at its next certificate check "
            "(identity.renew_check_interval_s)"
        )
        return 0

    try:
        return asyncio.run(renew())
    except RenewalError as exc:
        if exc.status_code in (401, 403):
            raise RefusedError(str(exc), hint=_REENROLL) from None
        if str(exc).startswith("cannot reach"):
            raise UnreachableError(
                str(exc), hint="check control_plane.url, the network and the proxy"
            ) from None
        raise CliError(_one_line(str(exc))) from None


def _doctor(args: argparse.Namespace) -> int:
    from edge_agent.doctor import Doctor, SystemProbes, print_report

    config = _load(args)  # a config that does not load is a usage error, as for every command
    return print_report(Doctor(config, SystemProbes(), os.environ).run(), sys.stdout)


def _status(args: argparse.Namespace) -> int:
    from edge_agent.status import show_status

    return show_status(args, _load(args))


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "register": _register,
    "run": _run,
    "check-config": _check_config,
    "renew-certificate": _renew,
    "doctor": _doctor,
    "status": _status,
}


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return _COMMANDS[args.command](args)
    except EdgeRefused as exc:
        raise RefusedError(str(exc), hint=_REENROLL) from None
    except (ConfigError, IdentityError) as exc:
        raise _usage(exc) from None
    except EdgeError as exc:
        raise CliError(_one_line(str(exc))) from None


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, _parser(), _dispatch, argv)


if __name__ == "__main__":
    sys.exit(main())
