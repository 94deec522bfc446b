"""The outbox's cache of enabled endpoints: every append asks for them, so a control plane reads
them at most once per TTL; a change made through this process's endpoint service is seen at once."""

from __future__ import annotations

from datetime import UTC, datetime

from control_plane.outbound import OutboundGuard
from control_plane.store.memory import MemoryStore
from control_plane.vault import FileKek, Keyring
from control_plane.webhooks import (
    CreateEndpoint,
    EndpointSecrets,
    EndpointService,
    Viewer,
    WebhookConfig,
    WebhookOutbox,
)

CONFIG = WebhookConfig(allow_http_loopback=True)


def utcnow() -> datetime:
    return datetime.now(UTC)


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    async def list_resources(self, kind, **kw):  # type: ignore[no-untyped-def,override]
        self.lists += 1
        return await super().list_resources(kind, **kw)


async def test_endpoints_are_read_once_per_ttl_and_again_after_a_change_here() -> None:
    store = CountingStore()
    outbox = WebhookOutbox(store, utcnow, CONFIG, endpoints_ttl_s=60.0)
    service = EndpointService(
        store,
        EndpointSecrets(Keyring(FileKek.generate())),
        utcnow,
        outbound=OutboundGuard(["127.0.0.0/8"]),  # the receiver's address, allowed as an operator would
        config=CONFIG,
        changed=outbox.forget_endpoints,
    )
    assert await outbox.endpoints(cached=True) == []
    reads = store.lists
    for _ in range(20):
        assert await outbox.endpoints(cached=True) == []
    assert store.lists == reads  # cached
    made = await service.create(CreateEndpoint("http://127.0.0.1:9/hook"), Viewer())
    assert [e.id for e in await outbox.endpoints(cached=True)] == [made.resource.id]  # forgotten on create
    await service.delete(made.resource.id, Viewer())
    assert await outbox.endpoints(cached=True) == []


async def test_without_a_ttl_every_call_reads() -> None:
    store = CountingStore()
    outbox = WebhookOutbox(store, utcnow, CONFIG)
    await outbox.endpoints(cached=True)
    before = store.lists
    await outbox.endpoints(cached=True)
    assert store.lists == before + 1


async def test_a_fresh_read_is_never_cached() -> None:
    """Events only one process emits (``session.created`` ...) read the endpoints fresh."""
    store = CountingStore()
    outbox = WebhookOutbox(store, utcnow, CONFIG, endpoints_ttl_s=60.0)
    await outbox.endpoints(cached=True)
    before = store.lists
    await outbox.endpoints()
    assert store.lists == before + 1
