"""The conformance suite every entity database passes — Postgres and memory alike — so an
app's tests can swap ``memory_database()`` in and trust it.

```python
from ultimat3.entity.testing import CONFORMANCE, conformance_entities

@pytest.mark.parametrize("check", CONFORMANCE, ids=lambda c: c.__name__)
async def test_my_database(check):
    db = my_database(conformance_entities())
    await check(db)
```

Each check migrates ``db`` (the entities of :func:`conformance_entities`) and raises
``AssertionError`` naming what differed. The database must start empty."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from ultimat3.core import (
    SYSTEM_ACTOR,
    XError,
    cross_tenant,
    new_id,
    to_json_form,
    use_actor,
    use_tenant,
)

from ._columns import bigint, integer, jsonb, numeric, text, timestamp, uuid
from ._entity import Entity, Index, entity
from ._handle import Table
from ._sealing import REDACTED, KeyRing, Sealed
from ._search import SearchDocument, SearchIndex

TENANT_A = "0190a5b2-0000-7000-8000-00000000000a"
TENANT_B = "0190a5b2-0000-7000-8000-00000000000b"
CONFORMANCE_KEY_RING = KeyRing({"k1": bytes(range(32))})
"""The key ring a database under the suite is given (its ``sealed`` check needs one)."""


class EntityDatabase(Protocol):
    """What the suite needs of a database: ``migrate``, ``transaction`` and handles."""

    async def migrate(self) -> Any: ...

    def transaction(self) -> Any: ...

    def table(self, name: str) -> Table: ...


def conformance_entities() -> list[Entity]:
    """The entities the suite writes to."""
    return [
        entity(
            "items",
            columns={
                "id": uuid().primary_key(),
                "title": text(),
                "n": integer().default(0),
                "big": bigint().nullable(),
                "price": numeric().nullable(),
                "at": timestamp().nullable(),
                "meta": jsonb().nullable(),
                "secret": text().sealed().nullable(),
            },
        ),
        entity(
            "tallies",
            columns={
                "day": text(),
                "kind": text(),
                "total": bigint(),
            },
            indexes=[Index(("day", "kind"), unique=True)],
        ),
        entity("notes", columns={"id": uuid().primary_key(), "body": text()}, soft_delete=True),
        entity("events", columns={"id": uuid().primary_key(), "what": text()}, append_only=True),
        entity(
            "posts",
            columns={
                "id": uuid().primary_key(),
                "org_id": uuid().tenant(),
                "slug": text().unique(),
                "likes": integer().default(0),
            },
        ),
    ]


def _eq(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


async def _refused(code: str, fn: Callable[[], Awaitable[Any]], what: str) -> XError:
    try:
        await fn()
    except XError as exc:
        _eq(exc.code, code, what)
        return exc
    raise AssertionError(f"{what}: no refusal, want {code}")


async def check_insert_and_query(db: EntityDatabase) -> None:
    """Insert fills defaults; where / and_where / order_by / limit / first / count agree."""
    await db.migrate()
    t = db.table("items")
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    ids = sorted(new_id() for _ in range(5))
    row = await t.insert({"id": ids[0], "title": "alpha"})
    _eq((row["n"], row["big"], row["secret"]), (0, None, None), "defaults")
    await t.insert_all(
        [
            {"id": ids[1], "title": "beta", "n": 5, "price": Decimal("2.50"), "at": at},
            {"id": ids[2], "title": "Gamma", "n": 5, "big": 2**40, "meta": {"k": [1, "x"]}},
            {"id": ids[3], "title": "delta", "n": -3, "at": at + timedelta(hours=1)},
            {"id": ids[4], "title": "beta2", "n": 9},
        ]
    )
    _eq(await t.count(), 5, "count")
    _eq([r["id"] for r in await t.all()], ids, "all() in primary-key order")
    _eq([r["title"] for r in await t.where(n=5).all()], ["beta", "Gamma"], "where eq")
    q = t.where().and_where("n", "gte", 0).order_by("n", desc=True).order_by("title")
    _eq(
        [r["title"] for r in await q.all()],
        ["beta2", "Gamma", "beta", "alpha"],
        "order_by desc then text",
    )
    _eq([r["title"] for r in await q.limit(2).all()], ["beta2", "Gamma"], "limit")
    _eq(
        (await t.where().order_by("title").first() or {}).get("title"),
        "Gamma",
        "first in code-point order (upper case before lower)",
    )
    _eq(await t.where().and_where("title", "like", "beta%").count(), 2, "like")
    _eq(await t.where().and_where("n", "in", [9, -3]).count(), 2, "in")
    _eq(await t.where().and_where("n", "ne", 5).count(), 3, "ne")
    _eq(await t.where(at=None).count(), 3, "eq None is IS NULL")
    _eq(
        [r["title"] for r in await t.where().order_by("at").all()][:2],
        ["beta", "delta"],
        "NULLs last ascending",
    )
    _eq(
        [r["title"] for r in await t.where().order_by("at", desc=True).limit(4).all()][-1],
        "delta",
        "NULLs first descending",
    )
    got = await t.where(id=ids[2]).first()
    _eq((got or {}).get("meta"), {"k": [1, "x"]}, "jsonb round trip")
    _eq((got or {}).get("big"), 2**40, "bigint round trip")
    _eq(((await t.where(id=ids[1]).first()) or {}).get("price"), Decimal("2.50"), "numeric")
    _eq(((await t.where(id=ids[1]).first()) or {}).get("at"), at, "timestamp in UTC")
    _eq(await t.where(n=5).update(title="five"), 2, "update count")
    _eq(await t.where(title="five").count(), 2, "updated")
    _eq(await t.where(n=9).delete(), 1, "delete count")
    _eq(await t.count(), 4, "after delete")


async def check_refusals_write_nothing(db: EntityDatabase) -> None:
    """A bad value anywhere in a batch is refused before any statement, naming its column."""
    await db.migrate()
    t = db.table("items")
    good = {"id": new_id(), "title": "ok"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"id": new_id(), "title": "nul\x00"}, "items.title"),
        ({"id": new_id(), "title": "lone \ud800"}, "items.title"),
        ({"id": new_id(), "title": "x", "meta": {"k": "\ud800"}}, "items.meta"),
        ({"id": new_id(), "title": "x", "meta": {"k": "\x00"}}, "items.meta"),
        ({"id": new_id(), "title": "x", "secret": "\ud800"}, "items.secret"),
        ({"id": new_id(), "title": "x", "n": 2**31}, "items.n"),
        ({"id": new_id(), "title": "x", "big": 2**63}, "items.big"),
        ({"id": new_id(), "title": "x", "at": datetime(2026, 1, 1)}, "items.at"),
        ({"id": "not-a-uuid", "title": "x"}, "items.id"),
        ({"id": new_id()}, "items.title"),
        ({"id": new_id(), "title": "x", "nope": 1}, "unknown column"),
    ]
    for bad, named in cases:

        async def write(bad: dict[str, Any] = bad) -> int:
            return await t.insert_all([good, bad])

        exc = await _refused("X_ENTITY_VALUE_INVALID", write, f"insert_all of {named}")
        if named not in exc.message:
            raise AssertionError(f"the refusal {exc.message!r} does not name {named}")
    _eq(await t.count(), 0, "nothing written by a refused batch")
    await t.insert(good)
    await _refused(
        "X_ENTITY_CONFLICT",
        lambda: t.insert_all([{"id": new_id(), "title": "y"}, dict(good)]),
        "duplicate key",
    )
    _eq(await t.count(), 1, "a batch with a taken key writes nothing")
    await _refused("X_ENTITY_QUERY_INVALID", lambda: t.where(secret="x").all(), "sealed where")
    await _refused("X_ENTITY_QUERY_INVALID", lambda: t.where(nope=1).all(), "unknown where")


async def check_upsert(db: EntityDatabase) -> None:
    """upsert_all inserts, then overwrites on its key; within a call the last row wins."""
    await db.migrate()
    t = db.table("tallies")
    n = await t.upsert_all(
        [
            {"day": "d1", "kind": "a", "total": 1},
            {"day": "d1", "kind": "b", "total": 2},
            {"day": "d1", "kind": "a", "total": 3},
        ],
        on_conflict=["day", "kind"],
    )
    _eq(n, 2, "rows written (duplicates folded)")
    await t.upsert_all(
        [{"day": "d1", "kind": "b", "total": 20}, {"day": "d2", "kind": "a", "total": 7}],
        on_conflict=["kind", "day"],
    )
    got = {(r["day"], r["kind"]): r["total"] for r in await t.all()}
    _eq(got, {("d1", "a"): 3, ("d1", "b"): 20, ("d2", "a"): 7}, "after upserts")
    await _refused(
        "X_ENTITY_CONFLICT_UNCOVERED",
        lambda: t.upsert_all([{"day": "d", "kind": "k", "total": 1}], on_conflict=["day"]),
        "uncovered on_conflict",
    )
    rows = [{"day": f"d{i % 1500}", "kind": "bulk", "total": i} for i in range(2600)]
    _eq(await t.upsert_all(rows, on_conflict=["day", "kind"]), 1500, "chunked upsert")
    _eq(
        await t.where(kind="bulk", day="d3").first() or {},
        {"day": "d3", "kind": "bulk", "total": 1503},
        "last of a chunked batch wins",
    )


async def check_soft_delete_and_append_only(db: EntityDatabase) -> None:
    """Soft delete sets deleted_at and reads hide the row; append-only refuses delete/update."""
    await db.migrate()
    notes, events = db.table("notes"), db.table("events")
    a, b = new_id(), new_id()
    await notes.insert_all([{"id": a, "body": "keep"}, {"id": b, "body": "drop"}])
    _eq(await notes.where(id=b).delete(), 1, "soft delete count")
    _eq([r["id"] for r in await notes.all()], [a], "reads hide soft-deleted rows")
    _eq(await notes.count(), 1, "count hides them")
    hidden = await notes.where(id=b).with_deleted().first()
    if hidden is None or not isinstance(hidden["deleted_at"], datetime):
        raise AssertionError(f"with_deleted: {hidden!r} lacks deleted_at")
    await notes.upsert_all([{"id": b, "body": "back"}], on_conflict=["id"])
    _eq(await notes.count(), 2, "an upsert revives a soft-deleted row")
    e = new_id()
    await events.insert({"id": e, "what": "paid"})
    await _refused("X_ENTITY_WRITE_REFUSED", lambda: events.where(id=e).delete(), "append delete")
    await _refused(
        "X_ENTITY_WRITE_REFUSED", lambda: events.where(id=e).update(what="x"), "append update"
    )
    _eq(await events.count(), 1, "the append-only row stays")


async def check_tenancy(db: EntityDatabase) -> None:
    """Every statement on a tenant entity is scoped; other tenants' rows are out of reach."""
    await db.migrate()
    posts = db.table("posts")
    await _refused("X_TENANT_REQUIRED", lambda: posts.all(), "no ambient tenant")
    await _refused(
        "X_TENANT_REQUIRED",
        lambda: posts.insert({"id": new_id(), "slug": "s"}),
        "no ambient tenant on insert",
    )
    with use_tenant(TENANT_A):
        row = await posts.insert({"id": new_id(), "slug": "a-1"})
        _eq(row["org_id"], TENANT_A, "the tenant column is filled from the ambient tenant")
        await posts.insert({"id": new_id(), "slug": "a-2", "org_id": TENANT_A})
        await _refused(
            "X_FORBIDDEN",
            lambda: posts.insert({"id": new_id(), "slug": "x", "org_id": TENANT_B}),
            "insert of another tenant's row",
        )
    with use_tenant(TENANT_B):
        b_id = new_id()
        await posts.insert({"id": b_id, "slug": "b-1"})
        _eq([r["slug"] for r in await posts.all()], ["b-1"], "reads scoped to the tenant")
        _eq(await posts.where(slug="a-1").update(likes=5), 0, "updates scoped")
        _eq(await posts.where(slug="a-1").delete(), 0, "deletes scoped")
        await _refused(
            "X_FORBIDDEN",
            lambda: posts.where(id=b_id).update(org_id=TENANT_A),
            "moving a row to another tenant",
        )
        await _refused(
            "X_FORBIDDEN",
            lambda: posts.upsert_all(
                [
                    {"slug": "b-2", "id": new_id(), "likes": 1},
                    {"slug": "a-1", "id": new_id(), "likes": 1},
                ],
                on_conflict=["slug"],
            ),
            "upsert onto another tenant's key",
        )
        _eq(await posts.count(), 1, "the refused upsert wrote nothing")
    with use_actor(SYSTEM_ACTOR):
        every = await cross_tenant("conformance: count every org", posts.count)
        _eq(every, 3, "cross_tenant lifts the scope")


async def check_series(db: EntityDatabase) -> None:
    """Buckets are the first instant of each unit in the zone; a DST day is 23 or 25 hours."""
    await db.migrate()
    t = db.table("items")
    berlin = ZoneInfo("Europe/Berlin")
    # 2026-03-29 is a 23-hour day in Berlin (02:00 -> 03:00)
    instants = [
        datetime(2026, 3, 28, 23, 30, tzinfo=berlin),
        datetime(2026, 3, 29, 0, 15, tzinfo=berlin),
        datetime(2026, 3, 29, 23, 59, tzinfo=berlin),
        datetime(2026, 3, 30, 0, 0, tzinfo=berlin),
    ]
    await t.insert_all(
        [{"id": new_id(), "title": "s", "n": i + 1, "at": at} for i, at in enumerate(instants)]
    )
    got = await t.where().series(on="at", unit="day", time_zone="Europe/Berlin")
    want_days = [datetime(2026, 3, d, tzinfo=berlin) for d in (28, 29, 30)]
    _eq([p.bucket for p in got], want_days, "day buckets in Berlin")
    _eq([p.value for p in got], [1, 2, 1], "counts")
    length = got[2].bucket.astimezone(UTC) - got[1].bucket.astimezone(UTC)
    _eq(length, timedelta(hours=23), "the DST day's length (aware arithmetic across the change)")
    summed = await t.where().series(
        on="at", unit="day", time_zone="Europe/Berlin", value=("sum", "n")
    )
    _eq([p.value for p in summed], [1, 5, 4], "sums")
    utc = await t.where().series(on="at", unit="month", time_zone="UTC")
    _eq([(p.bucket, p.value) for p in utc], [(datetime(2026, 3, 1, tzinfo=UTC), 4)], "UTC month")
    await _refused(
        "X_ENTITY_QUERY_INVALID",
        lambda: t.where().series(on="at", unit="fortnight"),
        "unknown unit",
    )
    await _refused(
        "X_ENTITY_QUERY_INVALID",
        lambda: t.where().series(on="at", unit="day", time_zone="Mars/Olympus"),
        "unknown zone",
    )


def _revealed(row: Mapping[str, Any] | None, column: str) -> Any:
    value = (row or {}).get(column)
    if not isinstance(value, Sealed):
        raise AssertionError(f"a sealed column read back as {type(value).__name__}, not Sealed")
    return value.reveal()


async def check_sealed(db: EntityDatabase) -> None:
    """A sealed column reads back as a ``Sealed`` holding what was written (``[redacted]`` as
    text, refused as JSON), takes one back on a write, and cannot be queried on."""
    await db.migrate()
    t = db.table("items")
    i = new_id()
    card = "4111 1111 1111 1111"
    inserted = await t.insert({"id": i, "title": "s", "secret": card})
    _eq(_revealed(inserted, "secret"), card, "insert answers it sealed")
    row = await t.where(id=i).first()
    _eq(_revealed(row, "secret"), card, "round trip")
    assert row is not None
    _eq((str(row["secret"]), f"{row['secret']}"), (REDACTED, REDACTED), "its text form")
    _eq(card in repr(row), False, "repr of the row")
    try:
        to_json_form({"row": row})
    except XError as exc:
        _eq(exc.code, "X_SEALED_VALUE_EXPOSED", "its JSON form is refused")
        _eq(card in str(exc), False, "the refusal quotes no plaintext")
    else:
        raise AssertionError("the JSON form of a sealed value was not refused")
    await t.where(id=i).update(secret="changed")
    _eq(_revealed(await t.where(id=i).first(), "secret"), "changed", "update re-seals")
    await t.where(id=i).update(secret=row["secret"])  # a Sealed read back is written back
    _eq(_revealed(await t.where(id=i).first(), "secret"), card, "a Sealed written back")


async def check_transaction(db: EntityDatabase) -> None:
    """A transaction is all or nothing; a nested block is a savepoint."""
    await db.migrate()
    t = db.table("items")
    kept, inner, lost = new_id(), new_id(), new_id()

    class Boom(Exception):
        pass

    try:
        async with db.transaction():
            await t.insert({"id": lost, "title": "lost"})
            raise Boom
    except Boom:
        pass
    _eq(await t.count(), 0, "a rolled-back transaction wrote nothing")
    async with db.transaction():
        await t.insert({"id": kept, "title": "kept"})
        try:
            async with db.transaction():
                await t.insert({"id": inner, "title": "inner"})
                raise Boom
        except Boom:
            pass
        _eq(await t.count(), 1, "the savepoint rolled back its own insert only")
    _eq([r["id"] for r in await t.all()], [kept], "the outer block committed")


CONFORMANCE: tuple[Callable[[Any], Awaitable[None]], ...] = (
    check_insert_and_query,
    check_refusals_write_nothing,
    check_upsert,
    check_soft_delete_and_append_only,
    check_tenancy,
    check_series,
    check_sealed,
    check_transaction,
)
"""Every check, in order; each takes a fresh, empty database of :func:`conformance_entities`."""


# --- the SearchIndex conformance suite ------------------------------------------------------


def _doc(i: str, text: str, version: int, tenant: str | None = None) -> SearchDocument:
    return SearchDocument(f"notes:{i}", "notes", tenant, text, version)


async def check_search_upsert_list_and_search(index: SearchIndex) -> None:
    """Upserted documents list in id order (paged with ``after``), by tenant, and match."""
    await index.upsert(
        [
            _doc("b", "blue whale", 1, TENANT_A),
            _doc("a", "red fox", 1, TENANT_B),
            _doc("c", "blue fox", 1, TENANT_A),
        ]
    )
    _eq([d.id for d in await index.list()], ["notes:a", "notes:b", "notes:c"], "list order")
    _eq([d.id for d in await index.list(after="notes:a", limit=1)], ["notes:b"], "paging")
    _eq([d.id for d in await index.list(tenant=TENANT_A)], ["notes:b", "notes:c"], "by tenant")
    _eq(sorted(h.id for h in await index.search("fox")), ["notes:a", "notes:c"], "search")
    _eq([h.id for h in await index.search("blue fox")], ["notes:c"], "all words required")
    _eq([h.id for h in await index.search("fox", tenant=TENANT_B)], ["notes:a"], "search tenant")


async def check_search_stale_writes_lose(index: SearchIndex) -> None:
    """A write with a version not above the stored one changes nothing; removal tombstones."""
    _eq(await index.upsert([_doc("a", "new text", 5)]), 1, "first write")
    _eq(await index.upsert([_doc("a", "old text", 4)]), 0, "a stale upsert is skipped")
    _eq([d.text for d in await index.list()], ["new text"], "the newer text stays")
    _eq(await index.remove(["notes:a"], 3), 0, "a stale removal is skipped")
    _eq(len(await index.list()), 1, "still listed")
    _eq(await index.remove(["notes:a", "notes:zz"], 6), 2, "removal (and a tombstone ahead)")
    _eq(await index.list(), [], "removed documents are not listed")
    _eq(
        await index.upsert([_doc("a", "revived?", 6), _doc("zz", "late", 2)]),
        0,
        "an upsert at or below the tombstone stays removed",
    )
    _eq(await index.upsert([_doc("a", "revived", 7)]), 1, "a newer upsert revives")
    _eq([d.text for d in await index.list()], ["revived"], "revived text")
    _eq(await index.search("text"), [], "tombstoned text no longer matches")


SEARCH_CONFORMANCE: tuple[Callable[[Any], Awaitable[None]], ...] = (
    check_search_upsert_list_and_search,
    check_search_stale_writes_lose,
)
"""Every ``SearchIndex`` check; each takes a fresh, empty index."""
