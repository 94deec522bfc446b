"""The deliverer: sends the outbox's pending deliveries, signed, at least once, one sender at a time.

Every control-plane process may run one (``webhooks.enabled``). Each round it lists pending
deliveries (oldest first), takes those due (``next_attempt_at`` passed, no live claim) and
**claims** each with a compare-and-set on the resource's version: the claim writes
``claimed_by``/``claimed_until`` and counts the attempt, so of several processes exactly one wins
it; a process that dies mid-send leaves a claim that expires (``timeout_s`` plus a margin), after
which the delivery is due again (at least once). The attempt:

* the endpoint is read (deleted or disabled: the delivery ends ``failed`` saying so);
* its URL's address is checked by the outbound rules (:class:`~control_plane.outbound.OutboundGuard`)
  before anything is sent, and the connection dials only the checked address; a refused address
  ends the delivery ``failed`` (``refused by the outbound rules (outbound.loopback) ...``) and is
  never contacted;
* POST of the stored body with the Standard Webhooks headers ``webhook-id`` (the event id: the
  same on every attempt, for the receiver's dedupe), ``webhook-timestamp`` and
  ``webhook-signature`` (``standardwebhooks.Webhook(secret).sign``), which
  ``client.beta.webhooks.unwrap`` verifies;
* the whole exchange has ``timeout_s``; redirects are not followed (a 3xx is a failed attempt);
  at most ``response_bytes`` of the answer are read;
* a 2xx ends it ``delivered``; anything else is retried after ``backoff_base_s * 2**(n-1)`` (at most
  ``backoff_max_s``, times a random 0.5-1) until ``max_attempts``, then ``failed``.

An ended delivery is archived (listings of pending ones stay short) and pruned after
``keep_days``. Nothing here logs a secret or a payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType

import httpx
from standardwebhooks import Webhook

from control_plane.errors import NotFound, VersionConflict
from control_plane.outbound import OutboundGuard, OutboundRefused
from control_plane.store.base import Order, Resource, Resources
from control_plane.timestamps import timestamp
from control_plane.webhooks.config import WebhookConfig
from control_plane.webhooks.outbox import DELIVERY_KIND
from control_plane.webhooks.service import ENDPOINT_KIND, EndpointSecrets
from outpost_wire.version import SOFTWARE_VERSION

__all__ = ["WebhookDeliverer"]

log = logging.getLogger(__name__)

_CLAIM_MARGIN_S = 30.0  # a claim outlives the attempt's deadline by this much
_PAGE = 100
_MAX_PAGES = 20  # pending deliveries looked at per round
_PRUNE_EVERY_S = 300.0
_DAY_S = 86_400.0


class _Outcome:
    __slots__ = ("error", "retry", "status")

    def __init__(self, *, status: int | None = None, error: str | None = None, retry: bool = False) -> None:
        self.status = status
        self.error = error
        self.retry = retry


def _when(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


class WebhookDeliverer:
    """Sends due deliveries (see the module docstring). ``holder``: this process's name in claims."""

    def __init__(
        self,
        store: Resources,
        endpoint_secrets: EndpointSecrets,
        outbound: OutboundGuard,
        clock: Callable[[], datetime],
        config: WebhookConfig,
        *,
        holder: str,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._store = store
        self._secrets = endpoint_secrets
        self._outbound = outbound
        self._clock = clock
        self._config = config
        self._holder = holder
        self._jitter = jitter
        self._http: httpx.AsyncClient | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._last_prune: datetime | None = None
        self.attempts = 0  # attempts made by this process (tests, metrics)

    def wake(self) -> None:
        """Look for due deliveries now (new ones were written)."""
        self._wakeup.set()

    # -- one round ---------------------------------------------------------------------------
    async def run_once(self) -> int:
        """Claim what is due (up to the free slots), send it, wait for those sends; returns how
        many were claimed. The background loop does the same without waiting."""
        started = await self._claim_due()
        if started:
            await asyncio.wait(set(started))
        return len(started)

    async def _claim_due(self) -> list[asyncio.Task[None]]:
        free = self._config.max_in_flight - len(self._sending)
        started: list[asyncio.Task[None]] = []
        if free <= 0:
            return started
        for res in await self._due():
            claimed = await self._claim(res)
            if claimed is None:
                continue
            task = asyncio.create_task(self._attempt(claimed), name=f"webhook-{claimed.id}")
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
            task.add_done_callback(lambda _: self._wakeup.set())  # a slot is free again
            started.append(task)
            if len(started) >= free:
                break
        return started

    async def _due(self) -> list[Resource]:
        now = self._clock()
        due: list[Resource] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await self._store.list_resources(
                DELIVERY_KIND, filters={"state": "pending"}, limit=_PAGE, cursor=cursor, order=Order.ASC
            )
            for res in page.items:
                at = _when(res.body.get("next_attempt_at")) or now
                until = _when(res.body.get("claimed_until"))
                if at <= now and (until is None or until <= now):
                    due.append(res)
            cursor = page.next_cursor
            if cursor is None or len(due) >= self._config.max_in_flight:
                break
        return due

    async def _claim(self, res: Resource) -> Resource | None:
        now = self._clock()
        until = now + timedelta(seconds=self._config.timeout_s + _CLAIM_MARGIN_S)
        body = {
            **res.body,
            "attempts": int(res.body.get("attempts", 0)) + 1,
            "claimed_by": self._holder,
            "claimed_until": timestamp(until),
        }
        try:
            return await self._store.update_resource(
                DELIVERY_KIND, res.id, body, now, expected_version=res.version
            )
        except (VersionConflict, NotFound):
            return None  # another process claimed (or ended) it first

    # -- one attempt -------------------------------------------------------------------------
    async def _attempt(self, claimed: Resource) -> None:
        self.attempts += 1
        try:
            outcome = await self._send(claimed)
        except Exception as exc:  # a bug must not stop the deliverer; the delivery is retried
            log.exception("webhook delivery %s: attempt failed unexpectedly", claimed.id)
            outcome = _Outcome(error=f"internal error: {type(exc).__name__}", retry=True)
        try:
            await self._finish(claimed, outcome)
        except Exception as exc:
            log.warning("webhook delivery %s: its result could not be recorded: %s", claimed.id, exc)

    async def _send(self, claimed: Resource) -> _Outcome:
        body = claimed.body
        try:
            endpoint = await self._store.get_resource(ENDPOINT_KIND, str(body["endpoint_id"]))
        except NotFound:
            return _Outcome(error="endpoint deleted")
        if not endpoint.body.get("enabled"):
            return _Outcome(error="endpoint disabled")
        url = str(endpoint.body["url"])
        try:
            secret = await self._secrets.open(endpoint)
        except Exception:
            return _Outcome(error="the endpoint's signing secret cannot be opened (vault key missing?)")
        try:
            await self._outbound.check_dial(url)
        except OutboundRefused as exc:
            return _Outcome(error=f"refused by the outbound rules ({exc.rule}): {exc.message}")
        payload = str(body["payload"]).encode()
        msg_id = str(body["event_id"])
        now = self._clock()
        headers = {
            "content-type": "application/json",
            "user-agent": f"Outpost-Webhooks/{SOFTWARE_VERSION}",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, now, payload),
        }
        return await self._post(url, payload, headers)

    async def _post(self, url: str, payload: bytes, headers: dict[str, str]) -> _Outcome:
        cfg = self._config
        if self._http is None:
            self._http = self._outbound.http_client(timeout_s=cfg.timeout_s)
        try:
            async with (
                asyncio.timeout(cfg.timeout_s),
                self._http.stream("POST", url, content=payload, headers=headers) as response,
            ):
                text = await _read_capped(response, cfg.response_bytes)
                status = response.status_code
        except OutboundRefused as exc:
            return _Outcome(error=f"refused by the outbound rules ({exc.rule}): {exc.message}")
        except TimeoutError:
            return _Outcome(error=f"no complete answer within {cfg.timeout_s:g} s", retry=True)
        except httpx.HTTPError as exc:
            return _Outcome(error=f"{type(exc).__name__}: {str(exc)[:200]}", retry=True)
        if 200 <= status < 300:
            return _Outcome(status=status)
        shown = text.replace("\n", " ")[:200]
        return _Outcome(status=status, error=f"HTTP {status}" + (f": {shown}" if shown else ""), retry=True)

    async def _finish(self, claimed: Resource, outcome: _Outcome) -> None:
        cfg, now = self._config, self._clock()
        attempts = int(claimed.body.get("attempts", 1))
        body = {**claimed.body, "claimed_by": None, "claimed_until": None}
        body["last_status"], body["last_error"] = outcome.status, outcome.error
        if outcome.error is None:
            body["state"] = "delivered"
        elif outcome.retry and attempts < cfg.max_attempts:
            delay = min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (attempts - 1))
            delay *= 0.5 + 0.5 * self._jitter()
            body["next_attempt_at"] = timestamp(now + timedelta(seconds=delay))
        else:
            body["state"] = "failed"
            log.warning(
                "webhook delivery %s to %s failed for good after %d attempt(s): %s",
                claimed.id,
                claimed.body.get("endpoint_id"),
                attempts,
                outcome.error,
            )
        try:
            await self._store.update_resource(
                DELIVERY_KIND, claimed.id, body, now, expected_version=claimed.version
            )
        except VersionConflict:
            log.warning(
                "webhook delivery %s: claimed by another process meanwhile (slow attempt)", claimed.id
            )
            return
        if body["state"] != "pending":
            await self._store.archive_resource(DELIVERY_KIND, claimed.id, now)

    async def prune(self) -> int:
        """Delete deliveries ended more than ``keep_days`` ago; returns how many."""
        before = self._clock() - timedelta(seconds=self._config.keep_days * _DAY_S)
        deleted = 0
        while True:
            ids = await self._store.prune_archived(DELIVERY_KIND, before, limit=_PAGE)
            deleted += len(ids)
            if len(ids) < _PAGE:
                return deleted

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="webhook-deliverer")

    async def close(self) -> None:
        """Stop; attempts in flight are cancelled (their claims expire, and they are sent again).
        Idempotent."""
        task, self._task = self._task, None
        pending = [t for t in (task, *self._sending) if t is not None]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> WebhookDeliverer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _loop(self) -> None:
        while True:
            self._wakeup.clear()
            try:
                await self._claim_due()
                await self._maybe_prune()
            except Exception as exc:
                log.warning(
                    "webhook deliverer: a round failed (next in %g s): %s", self._config.poll_interval_s, exc
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.poll_interval_s):
                    await self._wakeup.wait()

    async def _maybe_prune(self) -> None:
        now = self._clock()
        if self._last_prune is None or (now - self._last_prune).total_seconds() >= _PRUNE_EVERY_S:
            self._last_prune = now
            await self.prune()


async def _read_capped(response: httpx.Response, cap: int) -> str:
    """At most ``cap`` bytes of the body (the rest is never read), as text."""
    data = b""
    if cap > 0:
        async for chunk in response.aiter_raw():
            data += chunk[: cap - len(data)]
            if len(data) >= cap:
                break
    return data.decode("utf-8", "replace")
