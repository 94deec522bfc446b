"""The edge agent's configuration: one YAML file, validated at start, unknown keys rejected.

Example (every key optional except ``control_plane``)::

    control_plane:
      url: https://outpost.example.com        # HTTP API, used by `outpost-edge register`
      tunnel_address: outpost.example.com:7443
      # or several control-plane processes (each edge starts at one picked from its id, then
      # tries them in turn; `address_order: in_order` starts at the first); a draining one sends
      # the edge on:
      # addresses:
      #   - {tunnel_address: cp-a.example.com:7443, url: https://cp-a.example.com}
      #   - {tunnel_address: cp-b.example.com:7443, url: https://cp-b.example.com}
    state_dir: /var/lib/outpost-edge
    name: build-host-17
    policy_file: /etc/outpost-edge/policy.yaml   # or an inline `policy:` section
    sandbox:
      idle_pause_s: 30
      warm_pool_size: 1        # paused sandboxes ready for new sessions; 0: none
    connection:
      transport: auto          # grpc | websocket | auto (gRPC, else WebSocket on control_plane.url)
      heartbeat_interval_s: 3
    git:                                           # the edge's own git credentials, per host
      credentials:
        - host: git.internal:8443
          token: {from_file: /etc/outpost-edge/secrets/git.token}   # mode 0600
    observability:
      listen: 127.0.0.1:9464   # /metrics, /healthz, /readyz, /status; null turns it off
    identity:                  # automatic renewal of the edge's client certificate
      renew_before_days: 30    # renew when less than this is left (or a third of its lifetime)
      renew_check_interval_s: 21600
    logging:
      format: json             # or plain (the default)

The customer's policy (what the cloud may ask for) is :class:`edge_agent.policy.Policy`; it is
loaded from ``policy_file`` or the inline ``policy`` section, never from the control plane. The
``git`` section is :class:`edge_agent.git.GitConfig`.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edge_agent.errors import ConfigError
from edge_agent.git.config import GitConfig
from edge_agent.mcp.config import McpServers
from edge_agent.policy import Policy

__all__ = [
    "ConnectionConfig",
    "ControlPlaneAddress",
    "ControlPlaneConfig",
    "EdgeConfig",
    "IdentityConfig",
    "LoggingConfig",
    "ObservabilityConfig",
    "SandboxConfig",
    "load_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ControlPlaneAddress(_Strict):
    """One control-plane process: its gRPC tunnel and/or its HTTP(S) URL (WebSocket tunnel)."""

    tunnel_address: str | None = Field(None, description="`host:port` of this process's gRPC tunnel.")
    url: str | None = Field(None, description="Its HTTP(S) API (the WebSocket tunnel, certificate renewal).")

    @model_validator(mode="after")
    def _check(self) -> ControlPlaneAddress:
        if not self.tunnel_address and not self.url:
            raise ValueError("an address needs tunnel_address, url or both")
        return self


class ControlPlaneConfig(_Strict):
    url: str | None = Field(
        None,
        description="The control plane's HTTP(S) API: enrollment, certificate renewal, the WebSocket tunnel "
        "(over `https` the edge presents its client certificate).",
    )
    tunnel_address: str | None = Field(
        None,
        description="`host:port` of the gRPC tunnel; `null`: what enrollment returned.",
    )
    tls_server_name: str | None = Field(
        None,
        description="The name to check in the tunnel's server certificate, if not the host of the address.",
    )
    addresses: tuple[ControlPlaneAddress, ...] = Field(
        (),
        description="Several control-plane processes, tried in turn from the one `address_order` picks: "
        "the edge moves to the next one when a "
        "connection attempt fails, and at once when the one it is connected to drains. Not with "
        "`tunnel_address`.",
    )
    address_order: Literal["spread", "in_order"] = Field(
        "spread",
        description="Which of `addresses` an edge dials first: `spread` starts at one chosen from the "
        "edge's id (stable across restarts, different from edge to edge, so a fleet spreads over the "
        "control-plane replicas), `in_order` at the first (a primary with standbys). Either way the "
        "edge then goes through the list in order.",
    )

    @model_validator(mode="after")
    def _check(self) -> ControlPlaneConfig:
        if self.addresses and self.tunnel_address:
            raise ValueError("give either `tunnel_address` or `addresses`, not both")
        return self


class ConnectionConfig(_Strict):
    heartbeat_interval_s: float = Field(
        3.0,
        gt=0,
        description="Send a heartbeat when nothing else was sent for this long.",
    )
    heartbeat_timeout_s: float = Field(
        7.5,
        gt=0,
        description="Drop the tunnel after this long without a frame from the control plane (2.5 intervals: "
        "`/readyz` turns within 10 s of a silent partition).",
    )
    backoff_initial_s: float = Field(
        1.0,
        gt=0,
        description="Reconnect backoff (exponential, full jitter): the first wait's cap.",
    )
    backoff_max_s: float = Field(
        8.0,
        gt=0,
        description="The reconnect backoff's cap: low enough that `/readyz` (and calls) come back within 10 "
        "s of a control plane's return; full jitter still spreads a fleet's reconnects over it.",
    )
    stable_after_s: float = Field(30.0, ge=0, description="A link up this long resets the backoff.")
    connect_timeout_s: float = Field(
        10.0,
        gt=0,
        description="One connection attempt: TCP, TLS and HTTP/2 (or WebSocket) set-up.",
    )
    drain_grace_s: float = Field(30.0, ge=0, description="On SIGTERM, how long calls in flight may finish.")
    keepalive_time_s: float = Field(20.0, ge=10, description="gRPC HTTP/2 PING interval.")
    transport: Literal["grpc", "websocket", "auto"] = Field(
        "auto",
        description="`grpc`, `websocket` (the same frames on the API's port, `/v1/tunnel/ws`), or `auto`: "
        "try gRPC, fall back to WebSocket, remember what worked in `state_dir/transport.json` (retried "
        "after 10 failures or 24 h).",
    )
    auto_grpc_connect_timeout_s: float = Field(
        5.0,
        gt=0,
        description="In `auto`, how long gRPC may take to connect before WebSocket is tried.",
    )
    proxy_url: str | None = Field(
        None,
        description="An HTTP CONNECT proxy for both transports (`http://[user:pass@]host:port`, Basic auth), "
        "or `none`: never one. `null`: `https_proxy` / `HTTPS_PROXY` from the environment, unless "
        "`no_proxy` / `NO_PROXY` (suffixes, `*`, IPs, CIDRs, `:port`) matches.",
    )

    @model_validator(mode="after")
    def _check(self) -> ConnectionConfig:
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("heartbeat_timeout_s must be greater than heartbeat_interval_s")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be at least backoff_initial_s")
        return self


class IdentityConfig(_Strict):
    """Automatic renewal of the edge's client certificate (``edge_agent.renew``)."""

    renew_before_days: float = Field(
        30.0,
        gt=0,
        description="Renew the client certificate when less than this is left of it, or a third of its "
        "lifetime if that is shorter; the edge id spreads a fleet over up to half that window earlier.",
    )
    renew_check_interval_s: float = Field(
        6 * 3600.0,
        gt=0,
        description="How often the daemon checks (it also checks at start, and wakes at the renewal time).",
    )
    renew_retry_initial_s: float = Field(
        60.0,
        gt=0,
        description="After a failed renewal, retry after this, doubling up to `renew_retry_max_s` (never "
        "longer than the check interval).",
    )
    renew_retry_max_s: float = Field(900.0, gt=0, description="The cap of the renewal retries' backoff.")

    @model_validator(mode="after")
    def _check(self) -> IdentityConfig:
        if self.renew_retry_max_s < self.renew_retry_initial_s:
            raise ValueError("renew_retry_max_s must be at least renew_retry_initial_s")
        return self


class SandboxConfig(_Strict):
    idle_pause_s: float = Field(30.0, gt=0, description="Pause a sandbox after this long without calls.")
    name_prefix: str = Field(
        "outpost",
        pattern=r"^[a-z0-9][a-z0-9-]{0,30}$",
        description="Prefix of container and volume names (lower-case letters, digits and `-`, up to 31).",
    )
    docker_url: str | None = Field(
        None,
        description="The Docker engine, e.g. `unix:///var/run/docker.sock`; `null`: the Docker SDK's default "
        "(`DOCKER_HOST`, else the local socket).",
    )
    warm_pool_size: int = Field(
        1,
        ge=0,
        le=1024,
        description="Paused sandboxes kept ready for new sessions, so that a session's first tool call "
        "costs a claim and a resume instead of a container start (0 turns the pool off). Capped by the "
        "policy's `max_sandboxes`; members use only free slots (a cold start on a full edge removes "
        "one) and are not counted in the sandboxes reported to the control plane. Members are made "
        "like the environment's sandboxes (the policy's defaults, then the last session's spec); a "
        "session with another spec or with repositories starts cold. A member is never reused: "
        "claimed, it is the session's until destroyed, and the pool refills in the background (from a "
        "second after a claim).",
    )
    content_cache_bytes: int = Field(
        2 * 1024 * 1024 * 1024,
        ge=1,
        description="Disk budget of the cache of sessions' files and skills (`<state_dir>/content`, "
        "by sha256): the least recently used are evicted to make room, and a file larger than the "
        "budget is refused (the tool call's error names it).",
    )


class ResultsConfig(_Strict):
    retention_s: float = Field(
        24 * 3600.0,
        gt=0,
        description="How long finished tool results are kept for idempotent replays.",
    )


class LoggingConfig(_Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO",
        description="The least severe level logged (on stderr).",
    )
    format: Literal["plain", "json"] = Field(
        "plain",
        description="Plain lines, or one JSON object a line with session, edge and request ids.",
    )


class ObservabilityConfig(_Strict):
    """The edge's HTTP endpoint for ``/metrics``, ``/healthz``, ``/readyz`` and ``/status``. It
    serves no secrets, but it is off the loopback interface only when ``allow_remote`` says so."""

    listen: str | None = Field(
        "127.0.0.1:9464",
        description="`HOST:PORT` of the HTTP endpoint for `/metrics`, `/healthz`, `/readyz` and `/status` "
        "(read by `outpost-edge status`; port 0 picks one); `null`: none. A host off loopback needs "
        "`allow_remote`.",
    )
    allow_remote: bool = Field(
        False,
        description="Allow a `listen` host that is not a loopback address (e.g. `0.0.0.0` in a container): "
        "anyone who reaches it reads the edge's status and metrics (no authentication).",
    )

    @model_validator(mode="after")
    def _check(self) -> ObservabilityConfig:
        if self.listen is None:
            return self
        host, port = self.address
        if not 0 <= port <= 65535:
            raise ValueError(f"listen port {port} is out of range")
        if not self.allow_remote and not _is_loopback(host):
            raise ValueError(
                f"listen host {host!r} is not a loopback address; set allow_remote: true to expose it"
            )
        return self

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of ``listen`` (brackets stripped from an IPv6 host)."""
        assert self.listen is not None
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"listen must be HOST:PORT, got {self.listen!r}")
        return host.strip("[]"), int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EdgeConfig(_Strict):
    control_plane: ControlPlaneConfig = ControlPlaneConfig()
    state_dir: Path = Field(
        Path("/var/lib/outpost-edge"),
        description="The edge's identity (`identity/`, mode 0700), its tool-call journal and what `auto` "
        "learned.",
    )
    name: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=128,
        description="The edge's name, shown to operators.",
    )
    policy_file: Path | None = Field(
        None,
        description="The local policy as a YAML file (see Policy); or an inline `policy`, not both. Neither: "
        "the built-in policy.",
    )
    policy: Policy | None = Field(None, description="The local policy inline; or `policy_file`.")
    mcp_servers: McpServers = Field(
        (),
        description="Private MCP servers this edge fronts (`edge://<name>`); their credentials stay on the "
        "edge.",
    )
    tunnel_token_files: tuple[Path, ...] = Field(
        (),
        description="Files each holding the connector token of an MCP tunnel this edge serves (from "
        "`reveal_token`; readable by the edge's user only, refused otherwise; read at start). The edge "
        "presents them when its tunnel connects; its `mcp_servers` are then reachable as "
        "`https://<server>.<tunnel domain>/` (docs/mcp-tunnels.md).",
    )
    git: GitConfig = Field(
        GitConfig(),
        description="The edge's own git credentials, for cloning and relaying sessions' repositories.",
    )
    sandbox: SandboxConfig = SandboxConfig()
    connection: ConnectionConfig = ConnectionConfig()
    results: ResultsConfig = ResultsConfig()
    logging: LoggingConfig = LoggingConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    identity: IdentityConfig = IdentityConfig()

    @model_validator(mode="after")
    def _one_policy(self) -> EdgeConfig:
        if self.policy is not None and self.policy_file is not None:
            raise ValueError("give either `policy` or `policy_file`, not both")
        return self

    def load_policy(self) -> Policy:
        """The effective policy: inline, from ``policy_file``, or the built-in default."""
        if self.policy is not None:
            return self.policy
        if self.policy_file is not None:
            return Policy.model_validate(_read_yaml(self.policy_file, what="policy"))
        return Policy()


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> EdgeConfig:
    """Read and validate the YAML config (``None``: defaults only). Raises ConfigError with
    every problem listed, one per line, each naming the offending key."""
    data: dict[str, Any] = _read_yaml(path, what="config") if path is not None else {}
    for key, value in (overrides or {}).items():
        data[key] = value
    try:
        config = EdgeConfig.model_validate(data)
        config.load_policy()  # validate the policy file at start, too
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    return config


def _read_yaml(path: Path, *, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} file {path} must be a mapping at the top level")
    return data


def _describe(exc: ValidationError, path: Path | None) -> str:
    where = f" in {path}" if path else ""
    lines = [f"invalid configuration{where}:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)
