"""Egress control for sandboxes, enforced at the edge.

Each sandbox gets one egress mode, fixed when it is created (a later request with another spec
replaces the container on the same workspace volume):

``none`` (default)
    ``NetworkMode: none``: only ``lo`` exists inside. Nothing leaves.
``allowlist``
    The sandbox's only interface is on the edge's ``--internal`` Docker network (no NAT, no route
    out, inter-container traffic off). ``HTTP(S)_PROXY`` points at :class:`EgressProxy`, which the
    edge runs on that network's gateway address and which checks every request against the
    session's allowlist (:mod:`.hosts`, :mod:`.rules`).
``unrestricted``
    A per-edge NAT bridge: whatever the host can reach. Only if the edge's policy permits it.

Threat model
------------
The adversary is the code in the sandbox (a prompt-injected model, a malicious dependency) trying
to move data to, or act on, hosts the operator did not allow: the internet at large, the customer's
internal network, the host's loopback services, cloud metadata endpoints, other sandboxes.

* **Direct connections** have nowhere to go: the internal network has no NAT and Docker drops
  forwarded traffic that leaves its subnet; ICC is off, so sandboxes cannot reach each other.
  Without capabilities (``cap-drop ALL``) a sandbox cannot forge its source address or add routes.
* **Identity** at the proxy is the source address on the internal network, registered by the
  sandbox manager when the container is created and revoked (with its open tunnels) when it goes;
  unknown sources get ``403 egress.unknown_source``. The control plane supplies the allowlist but
  the edge's policy caps it (``egress.max_mode``, ``egress.allowed_hosts``).
* **DNS tricks** (a permitted name resolving to 127.0.0.1, 10.0.0.0/8 or 169.254.169.254; DNS
  rebinding between check and use): the proxy resolves the name itself, once, refuses loopback,
  private, link-local, metadata and other non-global addresses unless an IP-literal entry names
  that address and port, and connects to the very address it checked. Numeric spellings such as
  ``0x7f000001`` are never accepted as names.
* **TLS** is passed through, not intercepted: the proxy enforces the CONNECT authority, not the
  SNI or the ``Host`` inside the tunnel, so a permitted front (a CDN) can carry other names; allow
  specific hosts, not shared fronts. Plain HTTP is forwarded with ``Host`` forced to the checked
  authority.
* **DNS from the sandbox** goes to Docker's embedded resolver, which answers container names. It
  forwards other queries from the container's namespace, which has no route out; engines since
  26.0 (and 25.0.5 / 23.0.11, CVE-2024-29018) do not forward from internal networks at all. On an
  older engine whose host resolver is on a loopback address, DNS could leak query names: upgrade.
  The sandbox never needs DNS for egress: the proxy resolves.
* **Resource abuse** of the proxy is bounded (:class:`ProxyLimits`): head size and time, resolve
  and connect timeouts, idle timeout, open tunnels per session and in total.

Residual risk: the proxy listens on the host side of the bridge, so the sandbox can also reach
*other* host services bound to ``0.0.0.0`` through that address (Docker's internal mode filters
forwarded traffic, not traffic to the host itself). On a host with such services, let the host
firewall accept only the proxy's port (logged at start, and in each sandbox's ``HTTP_PROXY``) from
the internal bridge, e.g. ``iptables -I INPUT -i br-<network id[:12]> -p tcp ! --dport <port> -m
conntrack ! --ctstate ESTABLISHED,RELATED -j DROP``.

Logs carry session id, host, port and the decision; never request headers or bodies.

The proxy also fronts the edge's git relay (:mod:`edge_agent.git`) for sandboxes whose session has
repositories: requests to ``http://<proxy>/git/...`` are answered by the edge itself, so such a
sandbox still reaches exactly one address and port on the host.
"""

from __future__ import annotations

from .addresses import refusal_reason
from .controller import Attachment, EgressController, NetworkRecord, proxy_env
from .hosts import Allowlist, HostPattern, normalize_host, parse_pattern
from .proxy import EgressProxy, LocalHandler, LocalService, ProxyLimits, Resolver, system_resolver
from .spec import EgressMode, EgressSpec

__all__ = [
    "Allowlist",
    "Attachment",
    "EgressController",
    "EgressMode",
    "EgressProxy",
    "EgressSpec",
    "HostPattern",
    "LocalHandler",
    "LocalService",
    "NetworkRecord",
    "ProxyLimits",
    "Resolver",
    "normalize_host",
    "parse_pattern",
    "proxy_env",
    "refusal_reason",
    "system_resolver",
]
