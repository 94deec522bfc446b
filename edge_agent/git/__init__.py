"""Git bundling: a session's repositories cloned into its workspace by the edge, and ``git pull`` /
``git push`` from the sandbox relayed by the edge, which adds the credential outside the sandbox.

Flow::

    control plane ── Provision/Execute.sandbox.repositories (url, mount_path, ref, token?) ──► edge
    edge (host side): git clone ──► tar (uid 1000) ──► docker put_archive ──► /workspace/<name>
    sandbox: git pull/push origin = http://<proxy>/git/<session token>/<repository id>
                 └──► egress proxy ──► GitRelay (+ Authorization) ──► the repository's server

Threat model
------------
The asset is the credential for the repository's server: a token the control plane delivered
for one repository (stored sealed in the control plane's vault), or the edge's own per-host
credential (``git.credentials``, 0600 files; never sent anywhere). The adversary is code in the
sandbox.

* **It never enters the sandbox.** The clone runs on the edge host with the credential in the git
  subprocess's environment only (not argv, not the clone's config); the tree is copied in as plain
  files; ``origin`` is the relay URL, which carries a sandbox-scoped token, not the credential.
  The sandbox's environment and processes never hold it. Tests look for a canary token in the
  sandbox's environment, ``/proc/*/environ``, ``.git/config`` and every file of the workspace.
* **Another sandbox cannot borrow it.** The relay serves a request only if its source address is
  the sandbox of the session named by the URL's token (HMAC of the session id with an edge key),
  and only for that session's current repositories.
* **It is not logged or echoed.** :class:`~outpost_wire.frames.Repository` hides ``token`` from
  ``repr``; git's messages are redacted of every form of it; the relay logs no headers.
* **Only where it belongs.** The clone sends it only to URLs under the repository's URL; the relay
  only to the repository's own endpoints, never following redirects.
* **Only to hosts the customer allows.** The edge clones on its own host, outside the egress
  proxy: the policy's ``repositories`` rule (:mod:`.policy`, default: nothing) must list the host,
  and every address it resolves to must be public or in ``allow_networks`` (no loopback, cloud
  metadata or private address by default). git is pinned to the checked addresses and follows no
  redirect; the relay dials only checked addresses.

A session with repositories needs the sandbox on the edge's internal network (egress
``allowlist``, possibly of no hosts), since the relay is reached through the egress proxy. An
``unrestricted`` sandbox gets the clone, with ``origin`` the repository's own URL (no relay).

Modules: ``config`` (the ``git:`` section), ``policy`` (the policy's ``repositories`` rule:
allowed hosts, schemes and addresses), ``remote`` (URLs, relay paths, redaction),
``credentials`` (selection), ``clone`` (the subprocess), ``tree`` (the tar), ``routes`` (relay
table and tokens), ``relay`` (the smart-HTTP reverse proxy), ``service`` (all of it for the
sandbox manager).
"""

from __future__ import annotations

from .clone import GitCloner, classify, git_environment
from .config import GitConfig, GitCredentialConfig
from .credentials import EdgeCredentials, GitCredential
from .policy import RepositoryPolicy
from .relay import GitRelay
from .remote import RemoteUrl, parse_remote, redact, relay_url
from .routes import RelayRoutes, load_or_create_key
from .service import GitService, WorkspaceBackend

__all__ = [
    "EdgeCredentials",
    "GitCloner",
    "GitConfig",
    "GitCredential",
    "GitCredentialConfig",
    "GitRelay",
    "GitService",
    "RelayRoutes",
    "RemoteUrl",
    "RepositoryPolicy",
    "WorkspaceBackend",
    "classify",
    "git_environment",
    "load_or_create_key",
    "parse_remote",
    "redact",
    "relay_url",
]
