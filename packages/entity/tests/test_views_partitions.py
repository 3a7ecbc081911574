"""Views, materialized views with refresh, and partitioned tables kept by maintain_partitions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from ultimat3.core import FrozenClock, XError, new_id, use_clock
from ultimat3.entity import (
    Index,
    PartitionBy,
    View,
    bigint,
    entity,
    integer,
    maintain_partitions,
    text,
    timestamp,
    uuid,
)

MakeDb = Callable[..., Any]

sales = entity("sales", columns={"id": uuid().primary_key(), "region": text(), "amount": integer()})
by_region = entity(
    "sales_by_region",
    columns={"region": text(), "total": bigint()},
    indexes=[Index(("region",), unique=True)],
    view=View(
        "select region, sum(amount)::bigint as total from sales group by region", materialized=True
    ),
)
plain = entity(
    "big_sales",
    columns={"id": uuid(), "amount": integer()},
    view=View("select id, amount from sales where amount > 100"),
)
clicks = entity(
    "clicks",
    columns={"id": uuid(), "at": timestamp(), "what": text()},
    primary_key=["id", "at"],
    partition_by=PartitionBy("at", unit="month", ahead=2, retain="60d"),
)


async def test_a_materialized_view_refreshes_and_a_plain_view_reads_live(make_db: MakeDb) -> None:
    db = make_db([sales, by_region, plain])
    await db.migrate()
    await db.sales.insert_all(
        [
            {"id": new_id(), "region": r, "amount": a}
            for r, a in [("eu", 50), ("eu", 150), ("us", 7)]
        ]
    )
    assert await db.sales_by_region.all() == []
    await db.sales_by_region.refresh()
    assert {r["region"]: r["total"] for r in await db.sales_by_region.all()} == {"eu": 200, "us": 7}
    await db.sales.insert({"id": new_id(), "region": "us", "amount": 3})
    await db.sales_by_region.refresh(concurrently=True)
    assert (await db.sales_by_region.where(region="us").first() or {})["total"] == 10
    assert [r["amount"] for r in await db.big_sales.all()] == [150]


async def test_views_refuse_writes_and_a_table_refuses_refresh(make_db: MakeDb) -> None:
    db = make_db([sales, by_region])
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: db.sales_by_region.insert({"region": "x", "total": 1}),
        lambda: db.sales_by_region.where(region="x").delete(),
        lambda: db.sales.refresh(),
    ]
    for call in calls:
        with pytest.raises(XError) as caught:
            await call()
        assert caught.value.code == "X_ENTITY_WRITE_REFUSED"


async def test_migrate_creates_the_current_and_ahead_partitions(make_db: MakeDb) -> None:
    db = make_db([clicks])
    with use_clock(FrozenClock(datetime(2026, 12, 15, tzinfo=UTC))):
        made = (await db.migrate())["created"]
    assert [c for c in made if c.startswith("clicks_p")] == [
        "clicks_p202612",
        "clicks_p202701",
        "clicks_p202702",
    ]
    await db.clicks.insert({"id": new_id(), "at": datetime(2027, 1, 3, tzinfo=UTC), "what": "x"})
    with pytest.raises(XError) as caught:
        await db.clicks.insert(
            {"id": new_id(), "at": datetime(2030, 1, 1, tzinfo=UTC), "what": "too far"}
        )
    assert caught.value.code == "X_ENTITY_VALUE_INVALID"


async def test_maintain_partitions_creates_ahead_drops_expired_and_repeats_as_a_no_op(
    make_db: MakeDb,
) -> None:
    db = make_db([clicks])
    with use_clock(FrozenClock(datetime(2026, 12, 15, tzinfo=UTC))):
        await db.migrate()
    await db.clicks.insert(
        {"id": new_id(), "at": datetime(2026, 12, 20, tzinfo=UTC), "what": "old"}
    )
    now = datetime(2027, 3, 10, tzinfo=UTC)
    first = await maintain_partitions(db, clicks, now=now)
    assert first == {
        "table": "clicks",
        "created": ["clicks_p202703", "clicks_p202704", "clicks_p202705"],
        "dropped": ["clicks_p202612"],
    }
    assert await maintain_partitions(db, "clicks", now=now) == {
        "table": "clicks",
        "created": [],
        "dropped": [],
    }
    assert await db.clicks.count() == 0, "the dropped partition took its rows"
    back = await maintain_partitions(db, clicks, now=now, since=datetime(2026, 10, 5, tzinfo=UTC))
    assert back["created"] == ["clicks_p202610", "clicks_p202611", "clicks_p202612"]
    assert back["dropped"] == []


async def test_a_lock_held_past_the_timeout_is_x_db_lock_timeout(
    make_db: MakeDb, database_url: str
) -> None:
    db = make_db([clicks])
    with use_clock(FrozenClock(datetime(2026, 12, 15, tzinfo=UTC))):
        await db.migrate()
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute(f'LOCK TABLE "{db.schema}".clicks IN ACCESS EXCLUSIVE MODE')
        with pytest.raises(XError) as caught:
            await asyncio.wait_for(
                maintain_partitions(db, clicks, now=datetime(2027, 6, 1, tzinfo=UTC)), 30
            )
        await holder.rollback()
    assert caught.value.code == "X_DB_LOCK_TIMEOUT" and caught.value.retry == "retryable"


async def test_maintain_partitions_refuses_an_unpartitioned_entity(make_db: MakeDb) -> None:
    db = make_db([sales])
    with pytest.raises(XError) as caught:
        await maintain_partitions(db, sales, now=datetime.now(UTC))
    assert caught.value.code == "X_CONFIG_INVALID"


async def test_migrate_and_maintain_partitions_log_their_named_events(make_db: MakeDb) -> None:
    from ultimat3.core import capture_log_events

    db = make_db([clicks])
    with capture_log_events() as events, use_clock(FrozenClock(datetime(2026, 12, 15, tzinfo=UTC))):
        await db.migrate()
        await maintain_partitions(db, clicks, now=datetime(2027, 1, 2, tzinfo=UTC))
    named = [(e["event"], e["level"]) for e in events if e["event"].startswith("entity.")]
    assert named == [("entity.migrate", "info"), ("entity.partitions.maintained", "info")]
    assert events[-1]["created"] == 1 and events[-1]["dropped"] == 0


async def _pending(url: str, schema: str) -> list[str]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass AND i.inhdetachpending",
            [f'"{schema}".clicks'],
        )
        return [str(r[0]) for r in await cur.fetchall()]


async def _interrupt_a_concurrent_detach(url: str, schema: str, partition: str) -> None:
    """Leave ``partition`` pending detach, as a real interruption does: a reader's open snapshot
    holds DETACH ... CONCURRENTLY in its second phase, and the detaching backend is cancelled
    there."""
    async with (
        await psycopg.AsyncConnection.connect(url) as reader,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as detacher,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as admin,
    ):
        await reader.execute(f'SELECT count(*) FROM "{schema}".clicks')  # a snapshot, held
        pid = detacher.info.backend_pid
        detach = asyncio.ensure_future(
            detacher.execute(
                f'ALTER TABLE "{schema}".clicks DETACH PARTITION "{schema}".{partition} '
                "CONCURRENTLY"
            )
        )
        for _ in range(200):  # until the first phase committed the pending mark
            if await _pending(url, schema) == [partition]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the concurrent detach never reached its pending phase")
        await admin.execute("SELECT pg_cancel_backend(%s)", [pid])
        with pytest.raises(psycopg.errors.QueryCanceled):
            await asyncio.wait_for(detach, 30)
        await reader.rollback()


async def test_an_interrupted_concurrent_detach_is_finalized_by_the_next_run(
    make_db: MakeDb, database_url: str
) -> None:
    db = make_db([clicks])
    with use_clock(FrozenClock(datetime(2026, 12, 15, tzinfo=UTC))):
        await db.migrate()
    await db.clicks.insert({"id": new_id(), "at": datetime(2026, 12, 20, tzinfo=UTC), "what": "x"})
    await _interrupt_a_concurrent_detach(database_url, db.schema, "clicks_p202612")
    assert await _pending(database_url, db.schema) == ["clicks_p202612"]
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):  # what it blocks
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as c:
            await c.execute(
                f'ALTER TABLE "{db.schema}".clicks DETACH PARTITION "{db.schema}".clicks_p202701 '
                "CONCURRENTLY"
            )

    now = datetime(2027, 3, 10, tzinfo=UTC)  # clicks_p202612 has expired by then
    first = await maintain_partitions(db, clicks, now=now)
    assert first["dropped"] == ["clicks_p202612"]
    assert await _pending(database_url, db.schema) == []
    assert await maintain_partitions(db, clicks, now=now) == {
        "table": "clicks",
        "created": [],
        "dropped": [],
    }


async def test_a_pending_detach_of_a_kept_partition_is_finalized_and_kept_as_a_table(
    make_db: MakeDb, database_url: str
) -> None:
    db = make_db([clicks])
    with use_clock(FrozenClock(datetime(2026, 12, 15, tzinfo=UTC))):
        await db.migrate()
    await _interrupt_a_concurrent_detach(database_url, db.schema, "clicks_p202701")
    result = await maintain_partitions(db, clicks, now=datetime(2026, 12, 16, tzinfo=UTC))
    assert result["dropped"] == []
    assert await _pending(database_url, db.schema) == []
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'clicks_p202701'",
            [db.schema],
        )
        assert (await cur.fetchone()) == (1,), "the detached table was dropped unexpired"
