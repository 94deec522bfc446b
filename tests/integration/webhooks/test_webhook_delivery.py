"""Webhook deliveries end to end below the HTTP API: a real SqliteStore, the outbox, the deliverer,
the outbound guard, and a real receiver on loopback whose deliveries the official SDK unwraps.

Retries keep the webhook-id; a pending delivery survives a restart; a delivery whose sender died
mid-send is sent again once its claim expires; two deliverers on one store (two processes) send
each delivery once; a refused address is never contacted; redirects are not followed; a slow
receiver times out; a tampered body or a wrong key fails ``unwrap``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control_plane.errors import InvalidRequest
from control_plane.outbound import OutboundGuard
from control_plane.store.base import Resource
from control_plane.store.sqlite import SqliteStore
from control_plane.vault import FileKek, Keyring
from control_plane.webhooks import (
    DELIVERY_KIND,
    CreateEndpoint,
    EndpointSecrets,
    EndpointService,
    Viewer,
    WebhookConfig,
    WebhookDeliverer,
    WebhookOutbox,
)
from control_plane.webhooks.outbox import delivery_id
from tests.support import eventually
from tests.support.webhook_receiver import Receiver

# Quick retries and polls so that a test with retries runs in a second, not in minutes; the
# shipped defaults (5 s doubling, 1 s polls) are what docs/webhooks.md documents.
FAST = WebhookConfig(
    allow_http_loopback=True, backoff_base_s=0.05, backoff_max_s=0.2, poll_interval_s=0.05, timeout_s=10.0
)
LOOPBACK = ["127.0.0.0/8"]  # the receiver is on loopback: allowed as an operator would


def utcnow() -> datetime:
    return datetime.now(UTC)


class Parts:
    def __init__(
        self, store: SqliteStore, keyring: Keyring, guard: OutboundGuard, config: WebhookConfig
    ) -> None:
        self.store = store
        self.secrets = EndpointSecrets(keyring)
        self.guard = guard
        self.config = config
        self.endpoints = EndpointService(store, self.secrets, utcnow, outbound=guard, config=config)
        self.outbox = WebhookOutbox(store, utcnow, config)

    async def endpoint(self, url: str, **kw: object) -> tuple[str, str]:
        view = await self.endpoints.create(CreateEndpoint(url, **kw), Viewer())  # type: ignore[arg-type]
        assert view.secret is not None and view.secret.startswith("whsec_")
        return view.resource.id, view.secret

    def deliverer(
        self, store: SqliteStore | None = None, *, holder: str = "cp-1", clock=utcnow
    ) -> WebhookDeliverer:  # type: ignore[no-untyped-def]
        return WebhookDeliverer(
            store or self.store, self.secrets, self.guard, clock, self.config, holder=holder
        )

    async def delivery(self, endpoint_id: str, event_id: str) -> Resource:
        return await self.store.get_resource(DELIVERY_KIND, delivery_id(endpoint_id, event_id))


@asynccontextmanager
async def parts(
    tmp_path: Path,
    config: WebhookConfig = FAST,
    allow: Sequence[str] = LOOPBACK,
    guard: OutboundGuard | None = None,
) -> AsyncIterator[Parts]:
    async with SqliteStore(tmp_path / "control.db") as store:
        yield Parts(
            store, Keyring(FileKek.load_or_create(tmp_path / "kek")), guard or OutboundGuard(allow), config
        )


async def ended(p: Parts, endpoint_id: str, event_id: str) -> Resource:
    async def done() -> bool:
        return (await p.delivery(endpoint_id, event_id)).archived_at is not None  # ended, and archived

    await eventually(done, 30.0, "the delivery to end")
    return await p.delivery(endpoint_id, event_id)


async def test_a_receiver_failing_twice_gets_the_event_three_times_with_one_webhook_id(
    tmp_path: Path,
) -> None:
    async def flaky(index: int, request: Request) -> Response:
        return Response("busy", status_code=500 if index < 2 else 200)

    async with Receiver(flaky) as receiver, parts(tmp_path) as p:
        endpoint_id, secret = await p.endpoint(receiver.url)
        async with p.deliverer() as deliverer:
            p.outbox.wake = deliverer.wake
            event_id = await p.outbox.emit("deployment_run.failed", "drun_1", cause="drun_1:failed")
            await receiver.wait_for(3)
            done = await ended(p, endpoint_id, event_id)
        assert {d.webhook_id for d in receiver.deliveries} == {event_id}
        events = receiver.verified(secret)
        assert [e.id for e in events] == [event_id] * 3
        assert events[0].data.type == "deployment_run.failed" and events[0].data.id == "drun_1"
        assert done.body["state"] == "delivered" and done.body["attempts"] == 3
        assert done.body["last_status"] == 200 and done.archived_at is not None
        assert len(receiver.deliveries) == 3


async def test_a_pending_delivery_is_sent_after_a_restart(tmp_path: Path) -> None:
    async with Receiver() as receiver:
        async with parts(tmp_path) as p:  # "process 1": records the event, stops before sending
            endpoint_id, secret = await p.endpoint(receiver.url)
            event_id = await p.outbox.emit(
                "vault_credential.refresh_failed", "vcrd_1", extra={"vault_id": "vlt_1"}
            )
            assert (await p.delivery(endpoint_id, event_id)).body["state"] == "pending"
        async with parts(tmp_path) as p, p.deliverer():  # "process 2", the same store
            await ended(p, endpoint_id, event_id)
        (event,) = receiver.verified(secret)
        assert event.data.type == "vault_credential.refresh_failed" and event.data.vault_id == "vlt_1"


async def test_a_sender_dying_mid_send_leaves_a_claim_that_expires_and_the_event_is_sent_again(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()

    async def hang_first(index: int, request: Request) -> Response:
        if index == 0:
            await gate.wait()
        return Response("ok")

    async with Receiver(hang_first) as receiver, parts(tmp_path) as p:
        endpoint_id, _ = await p.endpoint(receiver.url)
        event_id = await p.outbox.emit("deployment_run.started", "drun_2")
        dying = p.deliverer(holder="cp-dies")
        await dying.start()
        await receiver.wait_for(1)
        await dying.close()  # the attempt is cut off mid-send, its claim stays
        claimed = await p.delivery(endpoint_id, event_id)
        assert claimed.body["claimed_by"] == "cp-dies" and claimed.body["state"] == "pending"
        # Before the claim expires another process leaves it alone ...
        assert await p.deliverer(holder="cp-2").run_once() == 0
        # ... after it (its clock past timeout_s plus the margin) it sends it again.
        later = p.deliverer(holder="cp-2", clock=lambda: utcnow() + timedelta(seconds=FAST.timeout_s + 60))
        assert await later.run_once() == 1
        await later.close()
        gate.set()
        done = await p.delivery(endpoint_id, event_id)
        assert done.body["state"] == "delivered" and done.body["attempts"] == 2
        assert [d.webhook_id for d in receiver.deliveries] == [event_id, event_id]


async def test_two_processes_on_one_store_send_each_delivery_once(tmp_path: Path) -> None:
    async with Receiver() as receiver, parts(tmp_path) as p:
        endpoint_id, secret = await p.endpoint(receiver.url)
        ids = [await p.outbox.emit("deployment_run.succeeded", f"drun_{i}") for i in range(30)]
        async with SqliteStore(tmp_path / "control.db") as other_store:  # a second connection: process 2
            one, two = p.deliverer(holder="cp-1"), p.deliverer(other_store, holder="cp-2")
            async with one, two:
                await receiver.wait_for(30)
                for event_id in ids:
                    await ended(p, endpoint_id, event_id)
        assert sorted(d.webhook_id for d in receiver.deliveries) == sorted(ids)
        assert one.attempts + two.attempts == 30
        assert len(receiver.verified(secret)) == 30


async def test_an_address_the_outbound_rules_refuse_is_never_contacted(tmp_path: Path) -> None:
    async def to_loopback(host: str, port: int) -> Sequence[str]:
        return ["127.0.0.1"]  # a public-looking name that resolves to loopback (DNS rebinding)

    guard = OutboundGuard((), resolver=to_loopback)  # the default: no private network allowed
    async with Receiver() as receiver, parts(tmp_path, guard=guard) as p:
        endpoint_id, _ = await p.endpoint(f"https://hooks.example.test:{receiver.port}/hook")
        event_id = await p.outbox.emit("deployment_run.failed", "drun_3")
        async with p.deliverer():
            done = await ended(p, endpoint_id, event_id)
        assert done.body["state"] == "failed" and done.body["attempts"] == 1
        assert "refused by the outbound rules (outbound.loopback)" in done.body["last_error"]
        assert receiver.deliveries == []


async def test_endpoint_urls_must_be_https_or_configured_loopback_http(tmp_path: Path) -> None:
    strict = WebhookConfig()  # the default: https only
    async with parts(tmp_path, config=strict) as p:
        for url, needle in [
            ("http://hooks.example.com/x", "must be https://"),
            ("http://127.0.0.1:9/x", "must be https://"),
            ("ftp://hooks.example.com/x", "must be an https:// URL"),
            ("https://user:pw@hooks.example.com/x", "user info"),
            ("https://10.1.2.3/x", "outbound.private"),
            ("https://169.254.169.254/x", "outbound."),
            ("https:///nohost", "needs a host"),
            ("https://example.com/" + "a" * 3000, "at most 2048"),
        ]:
            with pytest.raises(InvalidRequest, match=needle):
                await p.endpoints.create(CreateEndpoint(url), Viewer())
        with pytest.raises(InvalidRequest, match="unknown webhook event type"):
            await p.endpoints.create(CreateEndpoint("https://h.example.com/", ["session.exploded"]), Viewer())
    async with parts(tmp_path, allow=()) as p:  # loopback http configured, loopback not allowed
        with pytest.raises(InvalidRequest, match=r"outbound\.loopback"):
            await p.endpoints.create(CreateEndpoint("http://127.0.0.1:9/x"), Viewer())


async def test_redirects_are_not_followed_and_slow_or_huge_answers_are_cut(tmp_path: Path) -> None:
    async def hostile(index: int, request: Request) -> Response:
        if index == 0:  # a redirect elsewhere: a failed attempt, the target never asked
            return Response(status_code=307, headers={"location": "http://127.0.0.1:9/elsewhere"})
        if index == 1:  # no answer at all: the attempt's deadline cuts it
            await asyncio.Event().wait()
        # a 200 whose body never ends: response_bytes of it are read, the rest never, and it is done

        async def forever() -> AsyncIterator[bytes]:
            while True:
                yield b"y" * 65536
                await asyncio.sleep(0)

        return StreamingResponse(forever(), status_code=200)

    # A 1 s deadline so that the silent receiver is cut quickly (the default is 10 s).
    config = FAST.model_copy(update={"timeout_s": 1.0})
    async with Receiver(hostile) as receiver, parts(tmp_path, config=config) as p:
        endpoint_id, _ = await p.endpoint(receiver.url)
        event_id = await p.outbox.emit("deployment_run.failed", "drun_4")
        deliverer = p.deliverer()
        assert await deliverer.run_once() == 1
        first = await p.delivery(endpoint_id, event_id)
        assert first.body["last_error"] == "HTTP 307" and first.body["last_status"] == 307
        await eventually(lambda: deliverer.run_once(), 30.0, "the second attempt")
        second = await p.delivery(endpoint_id, event_id)
        assert second.body["last_error"].startswith("no complete answer within 1 s")
        await eventually(lambda: deliverer.run_once(), 30.0, "the third attempt")
        done = await p.delivery(endpoint_id, event_id)
        assert done.body["state"] == "delivered" and done.body["attempts"] == 3
        await deliverer.close()
        assert len(receiver.deliveries) == 3


async def test_unwrap_rejects_a_tampered_body_a_wrong_key_and_a_rotated_secret(tmp_path: Path) -> None:
    async with Receiver() as receiver, parts(tmp_path) as p:
        endpoint_id, secret = await p.endpoint(receiver.url)
        async with p.deliverer() as deliverer:
            p.outbox.wake = deliverer.wake
            await p.outbox.emit("deployment_run.started", "drun_5")
            await receiver.wait_for(1)
        receiver.verified(secret)  # genuine: fine
        (delivery,) = receiver.deliveries
        client_unwrap = __import__("anthropic").Anthropic(api_key="x").beta.webhooks.unwrap
        body = json.loads(delivery.body)
        body["data"]["id"] = "drun_forged"
        with pytest.raises(WebhookVerificationError):
            client_unwrap(json.dumps(body), headers=delivery.headers, key=secret)
        with pytest.raises(WebhookVerificationError):
            client_unwrap(delivery.body.decode(), headers=delivery.headers, key=EndpointSecrets.new_secret())
        rotated = await p.endpoints.rotate_secret(endpoint_id, Viewer())
        assert rotated.secret is not None and rotated.secret != secret
        with pytest.raises(WebhookVerificationError):
            client_unwrap(delivery.body.decode(), headers=delivery.headers, key=rotated.secret)
        stored = json.dumps((await p.store.get_resource("webhook_endpoint", endpoint_id)).body)
        assert secret not in stored and rotated.secret not in stored  # sealed at rest
