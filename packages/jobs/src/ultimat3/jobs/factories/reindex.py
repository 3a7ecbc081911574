"""``reindex()``: rebuild a search index from its entity — a backfill in two phases, one durable
step per page.

Phase one (rows): every row the source reads becomes ``search_document_of(entity, row)`` at the
run's version ``V`` (the run's start, epoch ms, fixed in a step of its own) and goes to the index.
Phase two (the sweep): the index is listed page by page; every document of the entity whose
version is below ``V`` was not written by phase one — its row is gone, or the source no longer
reads it (moved to another tenant) — and is removed, tombstoned one millisecond above its listed
version, so an id written again meanwhile keeps its newer document. The source is the WHOLE
table: a narrowed source empties the index of the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ultimat3.core import (
    SYSTEM_ACTOR,
    Duration,
    Signal,
    XError,
    adapter,
    cross_tenant,
    to_json_form,
    use_actor,
)
from ultimat3.jobs import Job, JobContext, Retry, Step, job
from ultimat3.jobs.factories.backfill import MAX_PAGE_SIZE, BackfillPage, NoInput
from ultimat3.jobs.factories.entity_extra import answer, need_entity

if TYPE_CHECKING:
    from ultimat3.entity import Database, Entity, MemoryDatabase, SearchIndex


@dataclass(frozen=True, slots=True)
class ReindexSource:
    """The default source: the entity's table in primary-key order, keyset-paged."""

    db: Any
    entity: Any
    cross: bool
    name: str

    async def __call__(self, page: BackfillPage[Any]) -> tuple[list[dict[str, Any]], Any]:
        [pk] = self.entity.primary_key
        q = self.db.table(self.entity.name).where()
        if page.after is not None:
            q = q.and_where(pk, "gt", page.after)
        q = q.order_by(pk).limit(page.limit)

        async def fetch() -> list[dict[str, Any]]:
            return cast("list[dict[str, Any]]", await q.all())

        if self.cross:
            with use_actor(SYSTEM_ACTOR):
                rows = await cross_tenant(f"reindex {self.name}: every tenant's rows", fetch)
        else:
            rows = await fetch()
        more = len(rows) == page.limit
        return rows, (rows[-1][pk] if more and rows else None)


def _invariant(name: object, message: str, fix: str) -> XError:
    return XError("X_INVARIANT", f"reindex({name!r}): {message}", fix=fix)


def _invalid(name: object, message: str, fix: str) -> XError:
    return XError("X_JOB_DECLARATION_INVALID", f"reindex({name!r}): {message}", fix=fix)


def reindex(
    *,
    name: str,
    entity: Entity,
    database: Database | MemoryDatabase,
    source: Callable[[BackfillPage[Any]], Any] | None = None,
    tenant: Any = "none",
    index: SearchIndex | Callable[[], SearchIndex] | None = None,
    page_size: int = 500,
    input: type[Any] | None = None,
    retry: Retry | None = None,
    queue: str | None = None,
    timeout: Duration | None = None,
) -> Job[Any, dict[str, Any]]:
    """A job re-deriving ``entity``'s search documents into ``index`` (default: the installed
    ``SEARCH_INDEX``) and sweeping the ones whose row is gone; see the module. ``source(page)``
    answers ``(rows, next_cursor)`` as ``backfill()``'s does; the default reads the whole table
    in primary-key order (every tenant under ``tenant='none'``). The result:
    ``{"rows": n, "pages": n, "removed": n}``."""
    ent_mod = need_entity("reindex")
    if not isinstance(name, str) or not name.strip():
        raise _invalid(name, "name is required (a durable queue key)", "reindex(name='...')")
    if not isinstance(entity, ent_mod.Entity):
        raise _invalid(name, f"entity {entity!r} is not an entity()", "entity=notes")
    if not entity.searchable_columns:
        raise _invariant(
            name,
            f"{entity.name!r} has no .searchable() column: nothing to index",
            "mark the columns to index: text().searchable()",
        )
    if not isinstance(database, ent_mod.Database | ent_mod.MemoryDatabase):
        raise _invalid(name, f"database {database!r} is not a database()", "database=db")
    if database.entities.get(entity.name) is not entity:
        raise _invalid(name, f"database does not declare {entity.name!r}", "database(dsn, [...])")
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise _invalid(
            name, f"page_size {page_size!r} is not a whole number from 1 to {MAX_PAGE_SIZE}", "500"
        )
    if source is None:
        if len(entity.primary_key) != 1:
            raise _invalid(
                name,
                f"{entity.name!r} has a composite primary key: the default source pages on one",
                "give source=lambda page: (rows, next_cursor)",
            )
        read: Callable[[BackfillPage[Any]], Any] = ReindexSource(
            database, entity, cross=tenant == "none" and entity.tenant_column is not None, name=name
        )
    elif callable(source):
        read = source
    else:
        raise _invalid(name, "source must be a callable", "source=lambda page: (rows, next)")
    if index is not None and not callable(index) and not isinstance(index, ent_mod.SearchIndex):
        raise _invalid(
            name, f"index {index!r} is not a SearchIndex", "index=postgres_search_index(db)"
        )
    search_document_of = ent_mod.search_document_of
    model: type[Any] = NoInput if input is None else input

    def the_index() -> SearchIndex:
        if index is None:
            return cast("SearchIndex", adapter(ent_mod.SEARCH_INDEX))
        if isinstance(index, ent_mod.SearchIndex):
            return cast("SearchIndex", index)
        return cast("Callable[[], SearchIndex]", index)()

    def idempotency_key(i: Any) -> str:
        form = json.dumps(to_json_form(i), sort_keys=True, separators=(",", ":"))
        return f"reindex:{name}:{hashlib.sha256(form.encode()).hexdigest()[:32]}"

    async def run(i: Any, step: Step, ctx: JobContext) -> dict[str, Any]:
        async def begin(signal: Signal) -> int:
            return ctx.clock.now_ms()

        version = cast("int", await step.run("reindex:begin", begin))
        after: Any = None
        rows = pages = 0
        while True:

            async def rows_page(signal: Signal, page: int = pages, after: Any = after) -> Any:
                got = await answer(read(BackfillPage(input=i, after=after, limit=page_size)))
                if not isinstance(got, tuple) or len(got) != 2:
                    raise _invariant(
                        name,
                        f"source answered {type(got).__name__}, not (rows, next_cursor)",
                        "return (rows, next_cursor) from source; None ends the pass",
                    )
                found, next_cursor = list(got[0]), got[1]
                if len(found) > page_size:
                    raise _invariant(
                        name,
                        f"page {page} answered {len(found)} rows, more than {page_size}",
                        "answer at most page.limit rows",
                    )
                docs = [search_document_of(entity, r, version=version) for r in found]
                if docs:
                    await the_index().upsert(docs)
                return {"rows": len(found), "next": to_json_form(next_cursor)}

            done = cast("dict[str, Any]", await step.run(f"reindex:rows:{pages:05d}", rows_page))
            rows += int(done["rows"])
            pages += 1
            if done["next"] is None:
                break
            after = done["next"]

        listed_tenant = None if tenant == "none" else ctx.tenant_id
        removed = sweeps = 0
        cursor: str | None = None
        while True:

            async def sweep_page(signal: Signal, after: str | None = cursor) -> Any:
                idx = the_index()
                listed = await idx.list(tenant=listed_tenant, after=after, limit=page_size)
                stale = [d for d in listed if d.entity == entity.name and d.version < version]
                by_version: dict[int, list[str]] = {}
                for d in stale:  # one millisecond above the listed version: a newer write wins
                    by_version.setdefault(d.version + 1, []).append(d.id)
                for v, ids in sorted(by_version.items()):
                    await idx.remove(ids, v)
                more = len(listed) == page_size
                return {"removed": len(stale), "next": listed[-1].id if more else None}

            swept = cast(
                "dict[str, Any]", await step.run(f"reindex:sweep:{sweeps:05d}", sweep_page)
            )
            removed += int(swept["removed"])
            sweeps += 1
            if swept["next"] is None:
                break
            cursor = str(swept["next"])
        return {"rows": rows, "pages": pages, "removed": removed}

    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    return job(
        name=name,
        input=model,
        idempotency_key=idempotency_key,
        tenant=tenant,
        retry=retry,
        timeout=timeout,
        run=run,
        **options,
    )


__all__ = ["ReindexSource", "reindex"]
