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

The schema is ``sql/schema.sql`` (authoritative), the statements ``sql/queries.sql``; see
docs/postgres.md.
"""

from ultimat3.jobs._model import AckRequest

from ._driver import PostgresJobDriver, PostgresStepStore, postgres_job_driver
from ._introspect import PostgresJobIntrospection
from ._leases import PostgresLeaseStore
from ._migrate import migrate
from ._sql import wake_channel
from ._transaction import transaction
from ._wake import QueueWake, start_queue_wake

__all__ = [
    "AckRequest",
    "PostgresJobDriver",
    "PostgresJobIntrospection",
    "PostgresLeaseStore",
    "PostgresStepStore",
    "QueueWake",
    "migrate",
    "postgres_job_driver",
    "start_queue_wake",
    "transaction",
    "wake_channel",
]
