"""``OutboxStore`` over ``x_outbox``: the transactional record behind an enqueue made in a
Postgres transaction the job driver cannot join (a driver on another database, Redis, ...).

``stage`` writes the requests on the caller's connection, inside its transaction: committed, they
are the relay's to publish; rolled back, they never existed. The relay claims a batch in staging
order (leased, ``FOR UPDATE SKIP LOCKED``: two relays never share a row), publishes it with
``driver.enqueue_many`` and deletes it with ``mark_published_many``. Rows keep the job ids they
were staged with, so a batch republished after a crash adds no job. ``start_wake`` is the relay
loop's LISTEN session on the stage's commit notification (``_outbox_wake``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ultimat3.core import XError
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres._db import Conn, Database, Pool, is_psycopg_async_connection
from ultimat3.jobs.postgres._outbox_wake import OutboxWake
from ultimat3.jobs.postgres._rows import check_text, check_uuid, json_form


def _row(req: EnqueueRequest) -> dict[str, Any]:
    who = f"staging job {req.id!r} ({req.name!r})"
    check_uuid(req.id, what=f"{who}: id")
    check_text(req.name, what=f"{who}: name")
    return {
        "id": req.id,
        "run_id": req.run_id,
        "name": req.name,
        "queue": req.queue,
        "payload": json_form(req.payload, what=f"the payload of job {req.id} ({req.name})"),
        "idempotency_key": req.idempotency_key,
        "max_attempts": req.max_attempts,
        "tenant_id": req.tenant_id,
        "concurrency_key": req.concurrency_key,
        "delay_ms": req.delay_ms,
        "run_at_ms": req.run_at_ms,
        "trace_context": None if req.trace_context is None else dict(req.trace_context),
    }


def _request(doc: dict[str, Any]) -> EnqueueRequest:
    return EnqueueRequest(
        id=doc["id"],
        run_id=doc["run_id"],
        name=doc["name"],
        queue=doc["queue"],
        payload=doc.get("payload"),
        idempotency_key=doc["idempotency_key"],
        max_attempts=doc["max_attempts"],
        tenant_id=doc.get("tenant_id"),
        concurrency_key=doc.get("concurrency_key"),
        delay_ms=doc.get("delay_ms"),
        run_at_ms=doc.get("run_at_ms"),
        trace_context=doc.get("trace_context"),
    )


def _ids(row_ids: Sequence[str]) -> list[int]:
    out: list[int] = []
    for row_id in row_ids:
        try:
            out.append(int(row_id))
        except (TypeError, ValueError):
            raise XError(
                "X_INVARIANT",
                f"outbox: {row_id!r} is not a row id claim_batch answered",
                fix="pass the ids claim_batch returned",
            ) from None
    return out


class PostgresOutboxStore:
    """The outbox of one schema of one database (``migrate()`` creates ``x_outbox``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"PostgresOutboxStore(schema={self._db.schema!r})"

    def accepts(self, connection: object) -> bool:
        """True for a psycopg ``AsyncConnection`` (the app's transaction)."""
        return is_psycopg_async_connection(connection)

    async def stage(self, connection: object, requests: Sequence[EnqueueRequest]) -> None:
        if not is_psycopg_async_connection(connection):
            raise XError(
                "X_INVARIANT",
                f"the Postgres outbox cannot stage into a {type(connection).__name__}",
                fix="make the app's psycopg AsyncConnection ambient (transaction(pool)), or "
                "install the outbox store of that connection's database",
            )
        if not requests:
            return
        doc = json.dumps([_row(r) for r in requests], separators=(",", ":"), ensure_ascii=False)
        conn: Conn = connection  # type: ignore[assignment]
        await self._db.fetchone(
            "outbox_stage", {"rows": doc}, conn=conn, what=f"staging {len(requests)} jobs"
        )

    async def claim_batch(self, *, limit: int, lease_ms: int) -> list[tuple[str, EnqueueRequest]]:
        """Up to ``limit`` committed, unpublished rows no other relay holds, oldest first; each
        is leased for ``lease_ms``."""
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms <= 0:
            raise XError(
                "X_INVARIANT",
                f"claim_batch: lease_ms {lease_ms!r} is not a positive number of milliseconds",
                fix="pass lease_ms=30000",
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise XError("X_INVARIANT", f"claim_batch: limit {limit!r} is not a count")
        if limit == 0:
            return []
        rows = await self._db.fetchall(
            "outbox_claim", {"limit": limit, "lease_ms": lease_ms}, what="claiming outbox rows"
        )
        rows.sort(key=lambda r: int(r[0]))
        return [(str(r[0]), _request(r[1])) for r in rows]

    async def mark_published_many(self, row_ids: Sequence[str]) -> None:
        if row_ids:
            await self._db.rowcount(
                "outbox_published", {"ids": _ids(row_ids)}, what="marking outbox rows published"
            )

    async def release(self, row_ids: Sequence[str]) -> None:
        if row_ids:
            await self._db.rowcount(
                "outbox_release", {"ids": _ids(row_ids)}, what="releasing outbox rows"
            )

    async def start_wake(
        self, on_wake: Callable[[], object], *, probe_every_s: float = 30.0
    ) -> OutboxWake:
        """Start a LISTEN session on this outbox's stage channel: ``on_wake()`` runs when a
        stage commits (the relay loop passes at once). ``await wake.stop()``."""
        wake = OutboxWake(self._db, on_wake, probe_every_s=probe_every_s)
        await wake.start()
        return wake

    async def close(self) -> None:
        await self._db.close()


def postgres_outbox_store(
    dsn_or_pool: str | Pool, *, schema: str | None = None, max_size: int = 4
) -> PostgresOutboxStore:
    """The outbox of the app's database (``x_outbox`` in ``schema``, default ``public``; run
    ``migrate()`` there). ``install_adapter(OUTBOX_STORE, store)``."""
    return PostgresOutboxStore(
        Database(
            dsn_or_pool,
            schema="public" if schema is None else schema,
            min_size=1,
            max_size=max_size,
            timeout_s=10.0,
        )
    )
