"""``Caller``: what each API key scope allows, in one place (the routes only ask it)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from control_plane.api.caller import Caller, KeyScope
from control_plane.api.errors import ApiError
from control_plane.errors import NotFound
from control_plane.store import ApiKeyRecord, MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def caller(scope: str, environment_ids: tuple[str, ...] | None = None) -> Caller:
    return Caller(
        ApiKeyRecord(
            id="k", name="n", key_hash="0" * 64, created_at=T0, scope=scope, environment_ids=environment_ids
        )
    )


def test_admin_does_everything_and_sees_every_environment() -> None:
    admin = caller("admin", ("env_a",))  # an admin key is never limited, whatever the record says
    assert admin.is_admin() and admin.can_write()
    assert admin.environment_ids is None and admin.sees_environment("env_b")
    admin.require_admin("x")
    admin.require_unscoped_write("x")


def test_read_only_reads_only() -> None:
    ro = caller("read_only")
    assert not ro.can_write() and not ro.is_admin()
    with pytest.raises(ApiError) as caught:
        ro.require_write("creating sessions")
    assert caught.value.status == 403 and caught.value.error_type == "permission_error"
    assert "read_only" in str(caught.value)


def test_unknown_scope_grants_only_reading() -> None:
    assert caller("superuser").scope is KeyScope.READ_ONLY


def test_scoped_read_write() -> None:
    rw = caller("read_write", ("env_a",))
    assert rw.can_write() and rw.sees_environment("env_a")
    assert not rw.sees_environment("env_b") and not rw.sees_environment(None)
    with pytest.raises(ApiError) as caught:
        rw.require_unscoped_write("creating agents")
    assert caught.value.status == 403
    with pytest.raises(ApiError):
        rw.require_admin("listing API keys")
    with pytest.raises(NotFound):
        rw.check_environment("env_b", NotFound("edge", "e1"))


def test_no_environment_at_all_sees_nothing() -> None:
    assert not caller("read_write", ()).sees_environment("env_a")


async def test_session_of_another_environment_is_not_found() -> None:
    async with MemoryStore() as store:
        await store.create_resource("session", "s_a", {"environment_id": "env_a"}, T0)
        await store.create_resource("session", "s_b", {"environment_id": "env_b"}, T0)
        rw = caller("read_write", ("env_a",))
        assert (await rw.session(store, "s_a")).id == "s_a"
        with pytest.raises(NotFound) as hidden:
            await rw.session(store, "s_b")
        with pytest.raises(NotFound) as unknown:
            await rw.session(store, "s_nope")
        assert str(hidden.value) == str(unknown.value).replace("s_nope", "s_b")
