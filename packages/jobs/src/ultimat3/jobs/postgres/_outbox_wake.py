"""The outbox relay's wake: a LISTEN session on the stage's channel, so an idle relay passes the
moment a staged enqueue commits instead of at its next poll.

``outbox_stage`` carries ``pg_notify(outbox_channel(schema), '')`` (transactional: delivered
when the app's transaction commits, never on a rollback). ``OutboxWake`` holds one session of its
own on the OUTBOX's database — which need not be the job driver's (the outbox exists for an app
database the driver cannot join), and ``x relay`` runs without a worker — calls ``on_wake()`` for
every notification, re-dials a lost session (then wakes once: a catch-up pass for what it
missed), and proves itself: a probe sent through the store's pool must come back on the session
(``jobs.wake.live``). Until it does ``proven`` is False, and the relay keeps its 2 s idle ceiling
(5 s while proven). A session that stops answering probes after it was proven is re-dialled.

The poll is the guarantee: a notification is lost with the session that would have carried it.
"""

from __future__ import annotations

from collections.abc import Callable

from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._listen import ListenSession
from ultimat3.jobs.postgres._sql import outbox_channel


class OutboxWake(ListenSession):
    """The relay's LISTEN session; made by ``PostgresOutboxStore.start_wake(on_wake)``."""

    kind = "outbox wake"
    listen_statement = "outbox_listen"
    probe_statement = "outbox_probe"
    unverified_fix = (
        "give the relay a direct or session-pooled database URL (PgBouncer in transaction mode "
        "delivers no notification)"
    )

    def __init__(
        self,
        db: Database,
        on_wake: Callable[[], object],
        *,
        probe_timeout_s: float = 2.0,
        probe_every_s: float = 30.0,
        redial_max_s: float = 5.0,
    ) -> None:
        super().__init__(
            db,
            channel=outbox_channel(db.schema),
            probe_timeout_s=probe_timeout_s,
            probe_every_s=probe_every_s,
            redial_max_s=redial_max_s,
        )
        self._on_wake = on_wake

    def _note(self, payload: str) -> None:
        self._on_wake()

    def _redialled(self) -> None:
        self._on_wake()  # the catch-up pass for what the lost session missed
