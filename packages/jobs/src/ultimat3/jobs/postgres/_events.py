"""``EventBus`` over ``x_events``: what ``step.wait_for_event`` resumes from.

``publish`` stores the event and, in the same statement, makes every run suspended on it due now
(and announces their queues), so a waiting run resumes on the worker's next pass; on the caller's
connection it commits and rolls back with the caller. "After the wait began" is the database's:
a marker is the snapshot at the wait's start, and an event is after it when its transaction is
one that snapshot could not see — committed later, or still in flight — whatever its stamp.
"""

from __future__ import annotations

from typing import Any, Final

from ultimat3.core import XError
from ultimat3.jobs.postgres._db import Conn, Database, is_psycopg_async_connection
from ultimat3.jobs.postgres._rows import check_text, to_json_text

POSTGRES_EVENT_POLL_MS: Final = 15 * 60_000
"""The backstop poll of a wait on this bus: the publish itself wakes the waiters."""


class PostgresEventBus:
    """The event bus of a Postgres driver's schema (it wakes that driver's runs)."""

    default_poll_ms: Final = POSTGRES_EVENT_POLL_MS

    def __init__(self, db: Database) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"PostgresEventBus(schema={self._db.schema!r})"

    async def publish(self, event: str, payload: Any, *, connection: object | None = None) -> str:
        """Store ``event`` and wake its waiters in one statement; answers the event's id."""
        check_text(event, what="publish: the event name")
        payload_json = to_json_text(payload, what=f"the payload of event {event!r}")
        conn: Conn | None = None
        if connection is not None:
            if not is_psycopg_async_connection(connection):
                raise XError(
                    "X_INVARIANT",
                    f"the Postgres event bus cannot publish inside a {type(connection).__name__}",
                    fix="publish inside the app's psycopg transaction, or outside any",
                )
            conn = connection  # type: ignore[assignment]
        row = await self._db.fetchone(
            "event_publish",
            {"event": event, "payload": payload_json},
            conn=conn,
            what=f"publishing event {event!r}",
        )
        assert row is not None
        return str(row[0])

    async def marker(self) -> str:
        row = await self._db.fetchone("event_marker", {}, what="reading the event bus marker")
        assert row is not None
        return str(row[0])

    async def find_after(self, event: str, marker: str, *, limit: int = 100) -> list[Any]:
        if not isinstance(marker, str) or marker.count(":") < 2:
            raise XError(
                "X_INVARIANT",
                f"the Postgres event bus does not know the marker {marker!r}",
                fix="pass a marker this bus answered",
            )
        rows = await self._db.fetchall(
            "event_find_after",
            {"event": event, "marker": marker, "limit": limit},
            what=f"reading events {event!r}",
        )
        return [r[0] for r in rows]
