"""``x jobs drain`` on Postgres, the source: a batch of one queue's rows no worker holds, locked
(``FOR UPDATE SKIP LOCKED``) inside one transaction that deletes them only after the target
acknowledged them, then commits. A crash anywhere before the commit rolls the transaction back:
the rows stay here, and the drain run again takes them again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ultimat3.jobs.adapter import MovedJob
from ultimat3.jobs.postgres._db import Conn, Database

if TYPE_CHECKING:
    from ultimat3.jobs.postgres._driver import PostgresJobDriver


@dataclass(slots=True)
class PostgresDrainBatch:
    jobs: list[MovedJob]
    _db: Database
    _conn: Conn

    async def delete(self) -> int:
        if not self.jobs:
            return 0
        return await self._db.rowcount(
            "drain_delete",
            {"ids": [job["id"] for job in self.jobs]},
            conn=self._conn,
            what=f"deleting {len(self.jobs)} drained jobs",
        )


class PostgresDrainSource:
    """The rows of one Postgres driver's schema a drain may move."""

    def __init__(self, driver: PostgresJobDriver) -> None:
        self._db: Database = driver._db

    @asynccontextmanager
    async def take(self, queue: str, limit: int) -> AsyncIterator[PostgresDrainBatch]:
        async with self._db.transaction(f"draining queue {queue!r}") as conn:
            rows = await self._db.fetchall(
                "drain_take", {"queue": queue, "limit": limit}, conn=conn
            )
            yield PostgresDrainBatch([row[0] for row in rows], self._db, conn)

    async def left(self, queues: Sequence[str]) -> dict[str, int]:
        rows = await self._db.fetchall(
            "drain_left", {"queues": list(queues)}, what="counting rows a drain leaves"
        )
        return {str(state): int(n) for state, n in rows}
