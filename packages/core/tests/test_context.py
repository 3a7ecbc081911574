import asyncio

import pytest

from ultimat3.core import (
    SYSTEM_ACTOR,
    Actor,
    XError,
    cross_tenant,
    cross_tenant_reason,
    current_actor,
    current_connection,
    current_tenant,
    use_actor,
    use_connection,
    use_tenant,
)


def test_actor_and_tenant_are_scoped() -> None:
    alice = Actor(id="alice", org_id="org-a", permissions=frozenset({"jobs:read"}))
    assert current_actor() is None
    with use_actor(alice), use_tenant("org-a"):
        assert current_actor() is alice
        assert current_tenant() == "org-a"
        assert alice.has("jobs:read")
    assert current_actor() is None
    assert current_tenant() is None


def test_system_actor_may_cross_tenants() -> None:
    assert SYSTEM_ACTOR.kind == "system"
    assert SYSTEM_ACTOR.has("tenancy:cross")


async def test_use_connection_works_as_with_and_async_with() -> None:
    conn = object()
    binding = use_connection(conn)
    async with binding:
        assert current_connection() is conn
    assert current_connection() is None
    with use_connection(conn):
        assert current_connection() is conn
    assert current_connection() is None


async def test_context_does_not_leak_between_tasks() -> None:
    async def other() -> str | None:
        return current_tenant()

    with use_tenant("org-a"):
        task = asyncio.create_task(other())
    with use_tenant("org-b"):
        assert await task == "org-a"


async def test_cross_tenant_runs_sync_and_async_fns_with_the_reason() -> None:
    async def read() -> str | None:
        return cross_tenant_reason()

    with use_actor(SYSTEM_ACTOR):
        assert await cross_tenant("billing rollup", read) == "billing rollup"
        assert await cross_tenant("sync", cross_tenant_reason) == "sync"
    assert cross_tenant_reason() is None


async def test_cross_tenant_refuses_an_actor_without_the_permission() -> None:
    with use_actor(Actor(id="bob", org_id="org-b")), pytest.raises(XError) as info:
        await cross_tenant("why", lambda: 1)
    assert info.value.code == "X_FORBIDDEN"
    assert "'bob'" in info.value.message
    assert "tenancy:cross" in info.value.message


async def test_cross_tenant_refuses_no_actor() -> None:
    with pytest.raises(XError) as info:
        await cross_tenant("why", lambda: 1)
    assert info.value.code == "X_FORBIDDEN"
    assert "no actor" in info.value.message


async def test_cross_tenant_refuses_a_blank_reason() -> None:
    with use_actor(SYSTEM_ACTOR), pytest.raises(XError) as info:
        await cross_tenant("  ", lambda: 1)
    assert info.value.code == "X_INVARIANT"
    assert "reason" in info.value.message
