"""``GitService``: a session's repositories into its workspace, and the relay for pull/push.

The sandbox manager calls :meth:`GitService.populate` when it has made a sandbox (before the
sandbox runs anything). For each repository whose ``mount_path`` is empty or missing in the
workspace volume (a non-empty one is left alone: the workspace outlives containers), it

1. picks the credential (:mod:`.credentials`): the delivered token, the edge's own for the host,
   or none;
2. clones on the edge host into a private scratch directory (:mod:`.clone`; the credential is
   only in the git subprocess's environment) and points ``origin`` at the relay URL;
3. packs the tree as a tar owned by the sandbox user (:mod:`.tree`) and has the Docker daemon
   unpack it into the volume at ``mount_path`` (:class:`WorkspaceBackend`);
4. removes the scratch copy.

The relay (:mod:`.relay`) is served by the egress proxy (:meth:`GitService.local_service`); the
manager keeps its table current with :meth:`remember` / :meth:`forget`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from edge_agent.egress.proxy import LocalService
from edge_agent.errors import RepositoryError
from edge_agent.git.clone import GitCloner
from edge_agent.git.config import GitConfig
from edge_agent.git.credentials import EdgeCredentials
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.git.relay import GitRelay
from edge_agent.git.remote import (
    RELAY_PREFIX,
    WORKSPACE,
    RemoteUrl,
    parse_remote,
    relay_url,
    workspace_relative,
)
from edge_agent.git.routes import RelayRoutes
from edge_agent.git.tree import write_tree_tar
from outpost_wire.frames import Repository

__all__ = ["GitService", "WorkspaceBackend"]

log = logging.getLogger(__name__)

_EMPTY, _HAS_FILES, _NOT_A_DIRECTORY = "empty", "files", "not-a-directory"
_MOUNT_STATE = (
    "import os, sys\n"
    "p = sys.argv[1]\n"
    "if not os.path.lexists(p): print('empty')\n"
    "elif not os.path.isdir(p) or os.path.islink(p): print('not-a-directory')\n"
    "else: print('files' if os.listdir(p) else 'empty')\n"
)


class WorkspaceBackend(Protocol):
    """The Docker operations the service needs (implemented by ``DockerRuntime``)."""

    async def exec_run(self, container_id: str, cmd: Sequence[str], *, user: str) -> tuple[int, bytes]: ...

    async def put_archive(self, container_id: str, path: str, archive: BinaryIO) -> None: ...


class GitService:
    """Clones, relay and routes of one edge. :meth:`close` is idempotent."""

    def __init__(
        self,
        config: GitConfig | None = None,
        *,
        scratch_dir: Path,
        routes: RelayRoutes | None = None,
        credentials: EdgeCredentials | None = None,
        user: str = "1000:1000",
        policy: RepositoryPolicy | None = None,
    ) -> None:
        """``scratch_dir``: where clones are made before they are copied (created 0700; its
        contents are removed after each clone). ``user``: who owns the files in the sandbox.
        ``policy``: the edge policy's ``repositories`` rule, for clones and the relay (default:
        no repository allowed)."""
        policy = policy or RepositoryPolicy()
        config = config or GitConfig()
        self.routes = routes or RelayRoutes()
        self.credentials = credentials or EdgeCredentials(config.credentials)
        self.relay = GitRelay(
            self.routes, self.credentials, idle_timeout_s=config.relay_idle_timeout_s, policy=policy
        )
        self._cloner = GitCloner(timeout_s=config.clone_timeout_s, policy=policy)
        self._scratch = scratch_dir
        self._user = user
        uid, _, gid = user.partition(":")
        self._uid, self._gid = int(uid), int(gid or uid)
        self._closed = False

    def local_service(self) -> LocalService:
        """What the egress proxy serves for the relay."""
        return LocalService(GitRelay.prefix, self.relay.serve)

    def remember(self, session_id: str, repositories: Sequence[Repository]) -> None:
        """The session's current repositories (and delivered tokens), for the relay."""
        self.routes.update(session_id, repositories)

    def forget(self, session_id: str) -> None:
        self.routes.forget(session_id)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.relay.close()

    async def populate(
        self,
        backend: WorkspaceBackend,
        container_id: str,
        session_id: str,
        repositories: Sequence[Repository],
        *,
        relay_base: str,
    ) -> None:
        """Clone every repository whose mount path is empty into the new sandbox's workspace.

        ``relay_base``: the proxy URL the sandbox reaches (``""``: none; ``origin`` is then the
        repository's own URL). Raises :class:`~edge_agent.errors.RepositoryError` (typed) for the
        first repository that fails; the caller discards the sandbox.
        """
        for repository in repositories:
            try:
                relative = workspace_relative(repository.mount_path)
                remote = parse_remote(repository.url)
            except ValueError as exc:
                raise RepositoryError(repository.url, str(exc)) from None
            origin = (
                relay_url(relay_base, self.routes.token_for(session_id), repository.id)
                if relay_base
                else remote.url
            )
            state = await self._mount_state(backend, container_id, repository)
            if state == _HAS_FILES:
                log.info(
                    "session %s: %s already has files; repository %s left as it is",
                    session_id,
                    repository.mount_path,
                    repository.id,
                )
                await self._repoint_origin(backend, container_id, session_id, repository, origin)
                continue
            await self._clone_into(backend, container_id, repository, remote, relative, origin)

    async def _mount_state(self, backend: WorkspaceBackend, container_id: str, repository: Repository) -> str:
        """Whether the mount path is missing or empty, or has files (checked in the sandbox with
        python3, which the sandbox daemon needs anyway)."""
        code, out = await backend.exec_run(
            container_id, ["python3", "-c", _MOUNT_STATE, repository.mount_path], user=self._user
        )
        state = out.decode("ascii", "replace").strip()
        if code != 0 or state not in (_EMPTY, _HAS_FILES, _NOT_A_DIRECTORY):
            raise RepositoryError(repository.url, f"cannot inspect {repository.mount_path} in the sandbox")
        if state == _NOT_A_DIRECTORY:
            raise RepositoryError(repository.url, f"{repository.mount_path} exists and is not a directory")
        return state

    async def _repoint_origin(
        self,
        backend: WorkspaceBackend,
        container_id: str,
        session_id: str,
        repository: Repository,
        origin: str,
    ) -> None:
        """A clone this edge made earlier whose ``origin`` names an old relay address (the proxy
        could not get its port back after a restart) is pointed at the current one. Best effort."""
        path = repository.mount_path
        code, out = await backend.exec_run(
            container_id, ["git", "-C", path, "remote", "get-url", "origin"], user=self._user
        )
        current = out.decode("utf-8", "replace").strip()
        ours = f"{RELAY_PREFIX}{self.routes.token_for(session_id)}/{repository.id}"
        if code != 0 or current == origin or not current.endswith(ours) or not origin.endswith(ours):
            return
        code, _ = await backend.exec_run(
            container_id, ["git", "-C", path, "remote", "set-url", "origin", origin], user=self._user
        )
        log.info("session %s: origin of %s now points at %s (rc=%d)", session_id, path, origin, code)

    async def _clone_into(
        self,
        backend: WorkspaceBackend,
        container_id: str,
        repository: Repository,
        remote: RemoteUrl,
        relative: str,
        origin: str,
    ) -> None:
        credential = await self.credentials.select(remote, repository.token)
        scratch = await asyncio.to_thread(self._make_scratch)
        try:
            tree = scratch / "tree"
            await self._cloner.clone(repository, remote, tree, credential, origin_url=origin)
            archive_path = scratch / "tree.tar"
            await asyncio.to_thread(self._write_archive, tree, relative, archive_path)
            with archive_path.open("rb") as archive:
                await backend.put_archive(container_id, WORKSPACE, archive)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)

    def _make_scratch(self) -> Path:
        self._scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            self._scratch.chmod(0o700)
        return Path(tempfile.mkdtemp(prefix="clone-", dir=self._scratch))

    def _write_archive(self, tree: Path, relative: str, archive_path: Path) -> None:
        with archive_path.open("wb") as out:
            write_tree_tar(tree, relative, out, uid=self._uid, gid=self._gid)
