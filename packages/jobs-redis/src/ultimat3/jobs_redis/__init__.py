"""ultimat3.jobs_redis: the Redis job driver, the second durable driver for ``ultimat3.jobs``.

``install_job_driver(redis_job_driver("redis://127.0.0.1:6379/0"))``: every ``JobDriver`` member
as one atomic Lua script, plus the lease store (fleet-wide ``concurrency`` and ``with_lock``),
introspection, the worker registry, task fires, counters and the backfill ledger. Where a
guarantee differs from the Postgres driver, ``docs/redis.md`` says which and why.
"""

from ._backfills import RedisBackfillLedger
from ._driver import RedisJobDriver, RedisStepStore, redis_job_driver, redis_wake_listener
from ._introspect import RedisJobIntrospection
from ._leases import RedisLeaseStore
from ._wake import RedisWakeListener

__all__ = [
    "RedisBackfillLedger",
    "RedisJobDriver",
    "RedisJobIntrospection",
    "RedisLeaseStore",
    "RedisStepStore",
    "RedisWakeListener",
    "redis_job_driver",
    "redis_wake_listener",
]
