"""ultimat3.jobs.postgres: the default, durable job driver (psycopg 3 + psycopg_pool).

```python
from ultimat3.jobs.postgres import migrate, postgres_job_driver, transaction

await migrate(DATABASE_URL)                       # idempotent; safe from two processes at once
driver = postgres_job_driver(DATABASE_URL)        # owns a pool, opened on first use
install_job_driver(driver)

async with transaction(pool) as conn:             # business rows and jobs commit together
    await conn.execute("insert into posts ...")
    await notify_subscribers.enqueue({...})       # written on conn, in this transaction
```

The schema is ``sql/schema.sql`` (authoritative), the statements ``sql/queries/*.sql``; see
docs/postgres.md.
"""

from ultimat3.jobs.adapter import AckRequest
from ultimat3.jobs.postgres._driver import (
    PostgresJobDriver,
    postgres_event_bus,
    postgres_job_driver,
    start_queue_wake,
)
from ultimat3.jobs.postgres._events import PostgresEventBus
from ultimat3.jobs.postgres._introspect import PostgresJobIntrospection
from ultimat3.jobs.postgres._leases import PostgresLeaseStore
from ultimat3.jobs.postgres._migrate import migrate
from ultimat3.jobs.postgres._outbox import PostgresOutboxStore, postgres_outbox_store
from ultimat3.jobs.postgres._sql import outbox_channel, wake_channel
from ultimat3.jobs.postgres._steps import PostgresStepStore
from ultimat3.jobs.postgres._transaction import transaction
from ultimat3.jobs.postgres._wake import QueueWake

__all__ = [
    "AckRequest",
    "PostgresEventBus",
    "PostgresJobDriver",
    "PostgresJobIntrospection",
    "PostgresLeaseStore",
    "PostgresOutboxStore",
    "PostgresStepStore",
    "QueueWake",
    "migrate",
    "outbox_channel",
    "postgres_event_bus",
    "postgres_job_driver",
    "postgres_outbox_store",
    "start_queue_wake",
    "transaction",
    "wake_channel",
]
