"""The outbox relay: moves committed, staged enqueues onto the job driver.

One pass claims a batch (``batch_size``, 500 by default) and publishes it in two calls —
``driver.enqueue_many`` then ``store.mark_published_many``. A batch that fails anywhere falls
back to the row loop for that batch, which publishes in order up to the failing row, releases the
rest, and names the poison row in ``jobs.outbox.publish-failed``. A store without
``mark_published_many`` keeps the row loop, marking each row with its ``mark_published``. Every
row is published under the id it was staged with, so a batch republished after a crash before
its mark adds no row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ultimat3.core import XError, adapter, log_event

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import EnqueueRequest, JobDriver, OutboxStore

DEFAULT_RELAY_BATCH = 500
DEFAULT_RELAY_LEASE_MS = 30_000


async def outbox_relay(
    store: OutboxStore | None = None,
    driver: JobDriver | None = None,
    *,
    batch_size: int = DEFAULT_RELAY_BATCH,
    lease_ms: int = DEFAULT_RELAY_LEASE_MS,
) -> int:
    """One relay pass: publish up to ``batch_size`` committed rows; answers how many landed.
    ``store`` and ``driver`` default to the installed adapters."""
    from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE

    store = store if store is not None else adapter(OUTBOX_STORE)
    driver = driver if driver is not None else adapter(JOB_DRIVER)
    _check_marks(store)  # before anything is claimed or published
    batch = await store.claim_batch(limit=batch_size, lease_ms=lease_ms)
    if not batch:
        return 0
    ids = [row_id for row_id, _ in batch]
    mark = getattr(store, "mark_published_many", None)
    if mark is None:  # a store that marks one row at a time keeps the row loop
        return await _row_loop(store, driver, batch)
    try:
        await driver.enqueue_many([request for _, request in batch])
    except Exception:
        return await _row_loop(store, driver, batch)
    await mark(ids)
    return len(batch)


async def _row_loop(
    store: OutboxStore, driver: JobDriver, batch: list[tuple[str, EnqueueRequest]]
) -> int:
    published = 0
    for index, (row_id, request) in enumerate(batch):
        try:
            await driver.enqueue(request)
        except Exception as exc:
            log_event(
                "jobs.outbox.publish-failed",
                row_id=row_id,
                job=request.name,
                job_id=request.id,
                error=f"{type(exc).__name__}: {exc}",
            )
            await store.release([rid for rid, _ in batch[index:]])
            return published
        await _mark_one(store, row_id)
        published += 1
    return published


async def _mark_one(store: OutboxStore, row_id: str) -> None:
    """Mark one row: ``mark_published_many([id])``, or ``mark_published(id)`` on a store that
    offers only that."""
    many = getattr(store, "mark_published_many", None)
    if many is not None:
        await many([row_id])
        return
    _check_marks(store)
    await store.mark_published(row_id)  # type: ignore[attr-defined]


def _check_marks(store: OutboxStore) -> None:
    if getattr(store, "mark_published_many", None) is None and (
        getattr(store, "mark_published", None) is None
    ):
        raise XError(
            "X_CONFIG_INVALID",
            f"the outbox store {store!r} has neither mark_published_many nor mark_published: "
            "the relay cannot mark what it published, and would publish it again every pass",
            fix="implement OutboxStore.mark_published_many(row_ids)",
        )
