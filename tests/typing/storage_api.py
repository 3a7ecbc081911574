"""ultimat3.storage, import_rows() and export_rows(): what their types promise (mypy --strict)."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from ultimat3.core import JsonValue
from ultimat3.jobs import ExportPage, ImportBatch, ImportErrors, Job, export_rows, import_rows
from ultimat3.storage import ObjectInfo, ObjectStore, disk, memory_store, s3


async def stores() -> None:
    store: ObjectStore = disk("/srv/objects")
    assert_type(await store.stat("a"), ObjectInfo)
    assert_type(await store.get("a", range=(0, 10)), bytes)
    async for chunk in store.stream("a"):
        assert_type(chunk, bytes)
    async for info in store.list("a/"):
        assert_type(info.size, int)
    other: ObjectStore = memory_store()
    remote: ObjectStore = s3("bucket", endpoint="http://127.0.0.1:9000")
    del other, remote


class Order(BaseModel):
    id: int
    total: int


class In(BaseModel):
    key: str


async def upsert(batch: ImportBatch[In, Order]) -> None:
    assert_type(batch.rows, list[Order])
    assert_type(batch.input, In)
    assert_type(batch.page, int)


imp = import_rows(
    name="orders.import",
    input=In,
    tenant="none",
    source=lambda i: disk("imports"),
    key=lambda i: i.key,
    format="csv",
    columns=["id", "total"],
    schema=Order,
    handle=upsert,
    errors=ImportErrors(sink=lambda i: disk("imports"), prefix=lambda i: f"errors/{i.key}"),
)
assert_type(imp, Job[In, dict[str, JsonValue]])


def read(page: ExportPage[In]) -> tuple[list[dict[str, Any]], int | None]:
    assert_type(page.limit, int)
    return [], None


exp = export_rows(
    name="orders.export",
    input=In,
    tenant="none",
    read=read,
    sink=lambda i: disk("exports"),
    prefix=lambda i: f"exports/{i.key}",
    format="ndjson",
    columns=["id", "total"],
)
assert_type(exp, Job[In, dict[str, JsonValue]])

import_rows(  # type: ignore[call-arg]  # format is required
    name="x",
    input=In,
    tenant="none",
    source=lambda i: disk(),
    key=lambda i: i.key,
    columns=["id"],
    schema=Order,
    handle=upsert,
)
