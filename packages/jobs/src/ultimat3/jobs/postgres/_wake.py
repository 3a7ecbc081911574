"""The wake: one LISTEN session per worker process, so an idle worker passes the moment a job is
queued instead of at its next poll.

The enqueue statement carries ``pg_notify(channel, queue)`` (transactional: delivered when the row
commits, never on a rollback; at most one per queue per 250 ms from one process). ``QueueWake``
holds the LISTEN session, calls ``on_wake(queue)`` for every notification of a queue it serves,
re-dials a lost session (then wakes every queue once, a catch-up pass for what it missed), and
proves itself: a probe sent through the driver's POOL must come back on the session
(``jobs.wake.live``). If it does not — PgBouncer in transaction mode delivers no notification —
it logs ``jobs.wake.unverified`` once and ``proven`` stays False (keep the 2 s poll ceiling). A
session that stops answering probes after it was proven (half-open) is re-dialled.

The session also wakes event waiters: a publish notifies ``EVENT_NOTE<id>`` on the same channel
(on commit), and the session runs ``wake_published`` for it, making the runs that suspended on
that event after the publish statement (but before its commit) due now — then once more
``EVENT_RESWEEP_S`` later, for a run whose suspend was still committing at the first sweep. The
publish statement itself wakes the runs suspended before it.

The poll is the guarantee: a notification is lost with the session that would have carried it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Final

from ultimat3.core import XError, log_event
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._listen import ListenSession
from ultimat3.jobs.postgres._sql import EVENT_NOTE, wake_channel

EVENT_RESWEEP_S: Final = 1.0
"""An event's waiters are woken when its commit is heard and once more this much later: a run
whose suspend was still committing at the first sweep (it read the bus before the event
committed) is caught by the second."""


class QueueWake(ListenSession):
    """The LISTEN session of one worker process. Build it with :func:`start_queue_wake`."""

    kind = "queue wake"
    listen_statement = "wake_listen"
    probe_statement = "wake_probe"
    unverified_fix = (
        "give the worker role a direct or session-pooled DATABASE_URL (PgBouncer in transaction "
        "mode delivers no notification)"
    )

    def __init__(
        self,
        db: Database,
        on_wake: Callable[[str], object],
        *,
        queues: Collection[str] | None = None,
        dsn: str | None = None,
        probe_timeout_s: float = 2.0,
        probe_every_s: float = 30.0,
        redial_max_s: float = 5.0,
    ) -> None:
        super().__init__(
            db,
            channel=wake_channel(db.schema),
            dsn=dsn or db.conninfo(),  # refused here, at start, when there is none to dial
            probe_timeout_s=probe_timeout_s,
            probe_every_s=probe_every_s,
            redial_max_s=redial_max_s,
        )
        self._on_wake = on_wake
        self._queues = None if queues is None else frozenset(queues)
        self._event_wakes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> QueueWake:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _stopped(self) -> None:
        for wake in list(self._event_wakes):
            wake.cancel()
        if self._event_wakes:
            await asyncio.gather(*self._event_wakes, return_exceptions=True)

    def _note(self, payload: str) -> None:
        if payload.startswith(EVENT_NOTE):
            self._wake_published(payload[len(EVENT_NOTE) :])
        else:
            self._wake(payload)

    def _redialled(self) -> None:
        self._wake_all()

    def _wake(self, queue: str) -> None:
        if self._queues is None or queue in self._queues:
            self._on_wake(queue)

    def _wake_published(self, event_id: str) -> None:
        """An event committed: wake its late waiters, off the notification loop."""
        if not event_id.isdigit():
            return
        task = asyncio.create_task(self._run_wake_published(int(event_id)))
        self._event_wakes.add(task)
        task.add_done_callback(self._event_wakes.discard)

    async def _run_wake_published(self, event_id: int) -> None:
        try:
            for pause in (0.0, EVENT_RESWEEP_S):
                await asyncio.sleep(pause)
                await self._db.fetchone(
                    "wake_published",
                    {"id": event_id},
                    what=f"waking the waiters of event {event_id}",
                )
        except XError as exc:  # the 15-min backstop poll still resumes them
            log_event(
                "jobs.wake.event-failed",
                level="warning",
                channel=self._channel,
                event_id=event_id,
                error=exc.message[:200],
            )

    def _wake_all(self) -> None:
        for queue in sorted(self._queues) if self._queues is not None else ["*"]:
            self._on_wake(queue)
