"""The jobs outbox through ``db.transaction()``: with a job driver that cannot join the app's
database (here the memory driver), an enqueue inside the block is STAGED in the app database's
``x_outbox`` on the block's connection — committed with the business rows, gone with them on a
rollback or with a rolled-back savepoint, carrying the tenant the block runs as. Then the relay
moves what committed onto the driver. One real Postgres."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import XError, new_id, swap_adapter, use_tenant
from ultimat3.entity import Database, database, entity, text
from ultimat3.entity import uuid as uuid_col
from ultimat3.jobs import job, outbox_relay
from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE, MemoryJobDriver, memory_job_driver
from ultimat3.jobs.postgres import PostgresOutboxStore, migrate, postgres_outbox_store

URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
ORG_A = "0190a5b2-0000-7000-8000-0000000000aa"
ORG_B = "0190a5b2-0000-7000-8000-0000000000bb"

posts = entity("posts", columns={"id": uuid_col().primary_key(), "title": text()})
invoices = entity(
    "invoices",
    columns={"id": uuid_col().primary_key(), "org_id": text().tenant(), "total": text()},
)


class Notify(BaseModel):
    post_id: str


class Bill(BaseModel):
    org_id: str
    invoice_id: str


async def _none(input: Any, step: Any, ctx: Any) -> None:
    return None


notify = job(input=Notify, name="outbox_tx.notify", idempotency_key=lambda i: i.post_id, run=_none)
bill = job(
    input=Bill,
    name="outbox_tx.bill",
    idempotency_key=lambda i: i.invoice_id,
    tenant=lambda i: i.org_id,
    run=_none,
)


@dataclass
class World:
    db: Database
    store: PostgresOutboxStore
    driver: MemoryJobDriver

    async def staged(self) -> list[tuple[str, Any, str | None]]:
        """What the relay would publish (read under a lease, then handed back)."""
        batch = await self.store.claim_batch(limit=100, lease_ms=60_000)
        await self.store.release([i for i, _ in batch])
        return [(r.name, r.payload, r.tenant_id) for _, r in batch]


async def _drop(schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    schema = f"x_ent_outbox_{uuid.uuid4().hex[:12]}"
    await migrate(URL, schema=schema)  # x_outbox beside the app's tables
    db = database(URL, [posts, invoices], schema=schema)
    await db.migrate()
    store = postgres_outbox_store(URL, schema=schema, max_size=2)
    driver = memory_job_driver()
    try:
        with swap_adapter(JOB_DRIVER, driver), swap_adapter(OUTBOX_STORE, store):
            yield World(db, store, driver)
    finally:
        await store.close()
        await db.close()
        await _drop(schema)


async def test_a_committed_block_stages_the_job_with_the_row(world: World) -> None:
    pid = new_id()
    async with world.db.transaction():
        await world.db.posts.insert({"id": pid, "title": "published"})
        await notify.enqueue(Notify(post_id=pid))
        assert await world.staged() == [], "the relay saw a row before the commit"
    assert await world.staged() == [("outbox_tx.notify", {"post_id": pid}, None)]
    assert await world.db.posts.count() == 1
    assert await world.driver.introspect.list() == [], "queued on the driver, not staged"


async def test_a_rolled_back_block_stages_nothing(world: World) -> None:
    async def fails() -> None:
        async with world.db.transaction():
            await world.db.posts.insert({"id": new_id(), "title": "draft"})
            await notify.enqueue(Notify(post_id=new_id()))
            raise RuntimeError("a business rule failed after the enqueue")

    with pytest.raises(RuntimeError, match="after the enqueue"):
        await fails()
    assert await world.staged() == []
    assert await world.db.posts.count() == 0


async def test_a_rolled_back_savepoint_takes_its_staged_job_and_the_outer_commits(
    world: World,
) -> None:
    kept, dropped = new_id(), new_id()
    async with world.db.transaction():
        await notify.enqueue(Notify(post_id=kept))

        async def inner_fails() -> None:
            async with world.db.transaction():
                await world.db.posts.insert({"id": dropped, "title": "inner"})
                await notify.enqueue(Notify(post_id=dropped))
                raise RuntimeError("inner block fails")

        with pytest.raises(RuntimeError, match="inner block fails"):
            await inner_fails()
        async with world.db.transaction():  # a savepoint that commits stays with the outer
            await world.db.posts.insert({"id": kept, "title": "kept"})
    assert [p for _, p, _ in await world.staged()] == [{"post_id": kept}]
    assert [r["id"] for r in await world.db.posts.all()] == [kept]


async def test_the_tenant_rides_with_the_staged_job_and_a_forbidden_write_rolls_both_back(
    world: World,
) -> None:
    first, second = new_id(), new_id()
    with use_tenant(ORG_A):
        async with world.db.transaction():
            await world.db.invoices.insert({"id": first, "total": "12.00"})
            await bill.enqueue(Bill(org_id=ORG_A, invoice_id=first))
    assert await world.staged() == [
        ("outbox_tx.bill", {"org_id": ORG_A, "invoice_id": first}, ORG_A)
    ]

    async def crosses() -> None:
        async with world.db.transaction():
            await world.db.invoices.insert({"id": second, "total": "5.00"})
            await bill.enqueue(Bill(org_id=ORG_A, invoice_id=second))
            await world.db.invoices.insert({"id": new_id(), "org_id": ORG_B, "total": "1"})

    with use_tenant(ORG_A), pytest.raises(XError) as caught:
        await crosses()
    assert caught.value.code == "X_FORBIDDEN"
    assert len(await world.staged()) == 1, "the forbidden write's block staged a job"
    with use_tenant(ORG_A):
        assert [r["id"] for r in await world.db.invoices.all()] == [first]


async def test_the_relay_moves_what_committed_onto_the_driver(world: World) -> None:
    pid = new_id()
    async with world.db.transaction():
        await notify.enqueue(Notify(post_id=pid))
    moved = await outbox_relay(world.store, world.driver)
    assert moved == 1
    (row,) = await world.driver.introspect.list()
    assert (row.name, row.payload) == ("outbox_tx.notify", {"post_id": pid})
    assert await world.staged() == []
