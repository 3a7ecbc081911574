"""The Redis driver's redaction catalog: a worker's start declares its jobs' ``x-sensitive``
paths (a union per job name), and ``show_redacted`` — what ``x jobs show`` reads — redacts
them, on a real Redis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import REDACTED, EnqueueRequest, show_redacted
from ultimat3.jobs_redis import RedisJobDriver


class Signup(BaseModel):
    email: str
    otp: str = Field(json_schema_extra={"x-sensitive": True})


async def _none(i: Signup, step: Any, ctx: Any) -> None:
    return None


signup = job(input=Signup, idempotency_key=lambda i: i.email, name="redis.signup", run=_none)


async def test_the_catalog_is_a_union_of_whole_paths(driver: RedisJobDriver) -> None:
    catalog = driver.redactions
    await catalog.declare({"a": [("x", "y")], "b": [()]})
    await catalog.declare({"a": [("x",), ("x", "y")]})
    await catalog.declare({"a": [("x",)]})  # an older worker marking less un-redacts nothing
    assert await catalog.lookup(["a", "b", "c"]) == {"a": [("x",), ("x", "y")], "b": [()]}
    assert await catalog.lookup([]) == {}


async def test_a_started_worker_declares_and_show_redacts(
    driver: RedisJobDriver, req: Callable[..., EnqueueRequest]
) -> None:
    queued = await driver.enqueue(
        req(name="redis.signup", queue="other", payload={"email": "a@b.c", "otp": "914211"})
    )
    worker = job_worker(jobs=[signup], driver=driver, queues=["default"])
    await worker.start()
    await worker.stop()
    shown = await show_redacted(driver, queued.id)
    assert shown.payload == {"email": "a@b.c", "otp": REDACTED}
    assert (await driver.introspect.show(queued.id)).payload["otp"] == "914211"  # stored
