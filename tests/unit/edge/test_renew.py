"""Certificate renewal on the edge without a network: the schedule (when to renew, backoff after a
failure) with a fake clock, the daemon's renewal task with a fake renewal, and the crash-safe
replacement of the identity files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from control_plane.enroll import CertificateAuthority
from edge_agent.config import EdgeConfig, IdentityConfig
from edge_agent.identity import Identity, IdentityError, generate_key_and_csr, write_pending_key
from edge_agent.renew import CertificateRenewer, RenewalError, RenewalSchedule, renewal_urls, spread_for

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def schedule(**overrides: float) -> RenewalSchedule:
    return RenewalSchedule(
        renew_before=timedelta(days=overrides.pop("renew_before_days", 30)),
        check_interval_s=overrides.pop("check_interval_s", 6 * 3600),
        retry_initial_s=overrides.pop("retry_initial_s", 60),
        retry_max_s=overrides.pop("retry_max_s", 900),
    )


# -- the schedule ---------------------------------------------------------------------------------------
def test_a_year_long_certificate_renews_30_days_before_it_expires() -> None:
    s = schedule()
    not_after = T0 + 365 * DAY
    assert s.renew_at(T0, not_after) == not_after - 30 * DAY
    assert not s.due(T0, not_after, not_after - 30 * DAY - timedelta(seconds=1))
    assert s.due(T0, not_after, not_after - 30 * DAY)
    assert s.due(T0, not_after, not_after + DAY)  # expired: still "due" (the control plane refuses)


def test_a_short_certificate_renews_when_a_third_of_it_is_left() -> None:
    s = schedule()
    assert s.renew_at(T0, T0 + 30 * DAY) == T0 + 20 * DAY
    assert s.renew_at(T0, T0 + 3 * DAY) == T0 + 2 * DAY
    # A huge renew_before does not make a fresh certificate due: a third of it is the most.
    assert not schedule(renew_before_days=10_000).due(T0, T0 + 365 * DAY, T0 + DAY)


def test_checks_every_interval_and_wakes_at_the_renewal_time() -> None:
    s = schedule(check_interval_s=6 * 3600)
    not_after = T0 + 365 * DAY
    assert s.next_check_s(T0, not_after, T0) == 6 * 3600
    # Two hours before it is due: the next check is then, not six hours later.
    now = not_after - 30 * DAY - timedelta(hours=2)
    assert s.next_check_s(T0, not_after, now) == 2 * 3600
    # Never a busy loop.
    assert s.next_check_s(T0, not_after, not_after) == 1.0


def test_a_fleet_spreads_its_renewals_over_half_a_window_more() -> None:
    not_after = T0 + 365 * DAY
    at = [
        RenewalSchedule(
            renew_before=30 * DAY, check_interval_s=3600, spread=spread_for(f"edge_{i}")
        ).renew_at(T0, not_after)
        for i in range(200)
    ]
    assert all(not_after - 45 * DAY <= t <= not_after - 30 * DAY for t in at)
    assert max(at) - min(at) > 10 * DAY  # spread out, not all in one minute
    assert spread_for("edge_1") == spread_for("edge_1")  # stable across restarts
    with pytest.raises(ValueError):
        RenewalSchedule(renew_before=30 * DAY, check_interval_s=3600, spread=1.0)


def test_backoff_after_failures_doubles_to_its_cap_and_resets_on_success() -> None:
    s = schedule(retry_initial_s=60, retry_max_s=900)
    assert [s.failed() for _ in range(7)] == [60, 120, 240, 480, 900, 900, 900]
    assert s.failures == 7
    s.succeeded()
    assert s.failures == 0 and s.failed() == 60
    # The retry never waits longer than a regular check would.
    short = schedule(check_interval_s=100, retry_initial_s=60, retry_max_s=900)
    assert [short.failed() for _ in range(3)] == [60, 100, 100]


def test_config_defaults_and_checks() -> None:
    config = EdgeConfig()
    assert config.identity == IdentityConfig(
        renew_before_days=30, renew_check_interval_s=21600, renew_retry_initial_s=60, renew_retry_max_s=900
    )
    with pytest.raises(ValueError):
        IdentityConfig(renew_retry_initial_s=600, renew_retry_max_s=60)
    with pytest.raises(ValueError):
        IdentityConfig(renew_before_days=0)


# -- identities on disk -----------------------------------------------------------------------------------
@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.load_or_create(tmp_path / "ca", clock=lambda: T0)


def _issue(ca: CertificateAuthority, valid_days: int = 60, now: datetime = T0) -> tuple[bytes, bytes]:
    key_pem, csr_pem = generate_key_and_csr()
    cert = ca.sign_edge_csr(csr_pem, "edge_1", "env_1", valid_days=valid_days, now=now)
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def state_dir(tmp_path: Path, ca: CertificateAuthority) -> Path:
    key_pem, cert_pem = _issue(ca)
    Identity(
        edge_id="edge_1",
        environment_id="env_1",
        key_pem=key_pem,
        cert_pem=cert_pem,
        ca_pem=ca.ca_cert_pem,
        control_plane_url="http://cp.example",
        tunnel_address="cp.example:7443",
    ).save(tmp_path / "state")
    return tmp_path / "state"


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_commit_renewal_replaces_key_and_certificate(state_dir: Path, ca: CertificateAuthority) -> None:
    old = Identity.load(state_dir)
    key_pem, cert_pem = _issue(ca, valid_days=365)
    assert old.directory is not None
    write_pending_key(old.directory, key_pem)
    assert _mode(old.directory / "edge.key.pending") == 0o600
    new = old.commit_renewal(key_pem, cert_pem)
    assert new.fingerprint != old.fingerprint and new.edge_id == old.edge_id
    assert Identity.load(state_dir) == new
    assert _mode(old.directory / "edge.key") == 0o600
    assert sorted(p.name for p in old.directory.iterdir()) == [
        "ca.crt",
        "edge.crt",
        "edge.key",
        "identity.json",
    ]


def test_commit_refuses_pieces_that_do_not_belong_together(state_dir: Path, ca: CertificateAuthority) -> None:
    old = Identity.load(state_dir)
    assert old.directory is not None
    key_pem, _ = _issue(ca)
    _, other_cert = _issue(ca)
    write_pending_key(old.directory, key_pem)
    with pytest.raises(IdentityError):
        old.commit_renewal(key_pem, other_cert)
    assert Identity.load(state_dir) == old


@pytest.mark.parametrize("crash_after", ["pending_cert_written", "key_renamed"])
def test_load_finishes_a_commit_a_crash_interrupted(
    state_dir: Path, ca: CertificateAuthority, crash_after: str
) -> None:
    old = Identity.load(state_dir)
    directory = old.directory
    assert directory is not None
    key_pem, cert_pem = _issue(ca, valid_days=365)
    write_pending_key(directory, key_pem)
    (directory / "edge.crt.pending").write_bytes(cert_pem)
    if crash_after == "key_renamed":  # edge.key is new, edge.crt still old: a torn pair
        os.replace(directory / "edge.key.pending", directory / "edge.key")
    loaded = Identity.load(state_dir)
    assert (loaded.key_pem, loaded.cert_pem) == (key_pem, cert_pem)
    assert not (directory / "edge.crt.pending").exists() and not (directory / "edge.key.pending").exists()


def test_load_drops_a_pending_certificate_of_another_key(state_dir: Path, ca: CertificateAuthority) -> None:
    old = Identity.load(state_dir)
    assert old.directory is not None
    _, stray_cert = _issue(ca)
    (old.directory / "edge.crt.pending").write_bytes(stray_cert)
    assert Identity.load(state_dir) == old
    assert not (old.directory / "edge.crt.pending").exists()


def test_a_pending_key_alone_is_left_for_the_next_renewal(state_dir: Path) -> None:
    old = Identity.load(state_dir)
    assert old.directory is not None
    write_pending_key(old.directory, generate_key_and_csr()[0])
    assert Identity.load(state_dir) == old  # the working identity is untouched


def test_renewal_urls() -> None:
    ident = Identity(
        edge_id="e",
        environment_id="v",
        key_pem=b"",
        cert_pem=b"",
        ca_pem=b"",
        control_plane_url="https://registered.example/",
    )
    assert renewal_urls([None], ident) == ["https://registered.example"]
    assert renewal_urls(["https://a.example/", None, "https://registered.example"], ident) == [
        "https://a.example",
        "https://registered.example",
    ]


# -- the daemon's task --------------------------------------------------------------------------------------
class FakeRenew:
    """Fails while ``failing``; else issues a certificate as the control plane would."""

    def __init__(self, ca: CertificateAuthority, clock: list[datetime]) -> None:
        self.ca = ca
        self.clock = clock
        self.failing = False
        self.calls = 0

    async def __call__(self, identity: Identity, urls: Sequence[str]) -> Identity:
        self.calls += 1
        if self.failing:
            raise RenewalError("cannot reach the control plane: connection refused")
        assert urls == ["http://cp.example"]
        key_pem, cert_pem = _issue(self.ca, valid_days=60, now=self.clock[0])
        assert identity.directory is not None
        write_pending_key(identity.directory, key_pem)
        return identity.commit_renewal(key_pem, cert_pem)


async def test_renewer_renews_when_due_backs_off_after_failures_and_swaps_the_identity(
    state_dir: Path, ca: CertificateAuthority
) -> None:
    clock = [T0 + DAY]
    renew = FakeRenew(ca, clock)
    swapped: list[Identity] = []
    attempts: list[bool] = []
    first = Identity.load(state_dir)
    renewer = CertificateRenewer(
        first,
        schedule=schedule(),  # a 60-day certificate: due from day 40
        urls=["http://cp.example"],
        renew=renew,
        on_renewed=swapped.append,
        clock=lambda: clock[0],
        on_attempt=attempts.append,
    )
    # Day 1: not due; the next check is a check interval away.
    assert await renewer.check() == 6 * 3600 and renew.calls == 0
    # Two hours before it is due, the check lands on the renewal time.
    renew_at = renewer.schedule.renew_at(first.not_before, first.not_after)
    assert T0 + 39 * DAY < renew_at < T0 + 40 * DAY  # a third of 60 days (and the CA's 5-min backdating)
    clock[0] = renew_at - timedelta(hours=2)
    assert await renewer.check() == 2 * 3600
    # Due, but the control plane cannot be reached: retries with backoff, identity kept.
    clock[0] = T0 + 41 * DAY
    renew.failing = True
    assert [await renewer.check() for _ in range(3)] == [60, 120, 240]
    assert renew.calls == 3 and swapped == [] and renewer.identity is first
    assert attempts == [False, False, False]
    # It comes back: renewed, the identity swapped, the backoff reset.
    renew.failing = False
    delay = await renewer.check()
    assert renew.calls == 4 and attempts[-1] is True
    assert [i.fingerprint for i in swapped] == [renewer.identity.fingerprint]
    assert renewer.identity.fingerprint != first.fingerprint
    assert renewer.identity.not_after == T0 + 41 * DAY + 60 * DAY
    assert renewer.schedule.failures == 0 and delay == 6 * 3600
    assert Identity.load(state_dir) == renewer.identity


async def test_renewer_adopts_a_certificate_renewed_by_another_process(
    state_dir: Path, ca: CertificateAuthority
) -> None:
    clock = [T0 + 41 * DAY]  # due
    renew = FakeRenew(ca, clock)
    swapped: list[Identity] = []
    renewer = CertificateRenewer(
        Identity.load(state_dir),
        schedule=schedule(),
        urls=["http://cp.example"],
        renew=renew,
        on_renewed=swapped.append,
        clock=lambda: clock[0],
    )
    # `outpost-edge renew-certificate` renewed it on disk meanwhile.
    on_disk = await FakeRenew(ca, clock)(Identity.load(state_dir), ["http://cp.example"])
    assert await renewer.check() == 6 * 3600
    assert renew.calls == 0 and swapped == [on_disk] and renewer.identity == on_disk


async def test_renewer_run_sleeps_what_check_decided(state_dir: Path, ca: CertificateAuthority) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise RuntimeError("stop")

    renewer = CertificateRenewer(
        Identity.load(state_dir),
        schedule=schedule(),
        urls=["http://cp.example"],
        renew=FakeRenew(ca, [T0]),
        on_renewed=lambda _: None,
        clock=lambda: T0 + DAY,
        sleep=sleep,
    )
    with pytest.raises(RuntimeError):
        await renewer.run()
    assert slept == [6 * 3600, 6 * 3600]


def test_the_daemon_wires_the_renewal_task_and_the_expiry_metric(
    state_dir: Path, ca: CertificateAuthority
) -> None:
    from edge_agent.daemon import EdgeAgent

    agent = EdgeAgent(EdgeConfig(state_dir=state_dir, observability={"listen": None}))  # type: ignore[arg-type]
    first = agent.identity
    expiry = "outpost_edge_certificate_expiry_timestamp_seconds"
    assert agent.metrics.registry.get_sample_value(expiry) == first.not_after.timestamp()
    assert agent.renewer.schedule.renew_before == timedelta(days=30)
    assert agent.renewer._urls == ["http://cp.example"]
    # A renewed identity goes to the dialer (the next connection) and to the metric.
    key_pem, cert_pem = _issue(ca, valid_days=365)
    assert first.directory is not None
    write_pending_key(first.directory, key_pem)
    renewed = first.commit_renewal(key_pem, cert_pem)
    agent._use_identity(renewed)
    assert agent.identity == renewed and agent.dialer.identity == renewed
    assert agent.metrics.registry.get_sample_value(expiry) == renewed.not_after.timestamp()
    agent.metrics.certificate_renewal(True)
    renewals = "outpost_edge_certificate_renewals_total"
    assert agent.metrics.registry.get_sample_value(renewals, {"outcome": "ok"}) == 1
