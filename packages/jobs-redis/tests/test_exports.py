"""The public surface of ``ultimat3.jobs_redis`` is exactly ``__all__``."""

import ultimat3.jobs_redis as jobs_redis
from ultimat3.jobs.adapter import (
    BackfillLedger,
    JobDriver,
    JobIntrospection,
    LeaseStore,
    StepStore,
    TaskFirer,
    WorkerRegistry,
)


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(jobs_redis).items()
        if not name.startswith("_") and type(value).__name__ != "module"
    }
    assert set(jobs_redis.__all__) == public
    assert len(jobs_redis.__all__) == len(set(jobs_redis.__all__))


async def test_the_driver_is_every_port_it_claims_to_be() -> None:
    driver = jobs_redis.redis_job_driver("redis://127.0.0.1:1/0")
    try:
        assert isinstance(driver, JobDriver)
        assert isinstance(driver, WorkerRegistry)
        assert isinstance(driver, TaskFirer)
        assert isinstance(driver.steps, StepStore)
        assert isinstance(driver.leases, LeaseStore)
        assert isinstance(driver.introspect, JobIntrospection)
        assert isinstance(driver.backfills, BackfillLedger)
        assert driver.name == "redis"
        assert driver.owns_connection(object()) is False
    finally:
        await driver.close()
