"""ultimat3.jobs.testing: its __all__ is exactly its public surface, and its strategies draw
requests every driver accepts."""

from __future__ import annotations

import types

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ultimat3.jobs.testing as testing
from ultimat3.core import FrozenClock
from ultimat3.jobs.adapter import LIVE_STATES, EnqueueRequest
from ultimat3.jobs.memory import memory_job_driver
from ultimat3.jobs.testing import enqueue_batches, enqueue_requests, json_values


def test_all_names_exactly_the_public_members() -> None:
    for name in testing.__all__:  # every listed name resolves (the lazy ones included)
        getattr(testing, name)
    helpers = {"annotations", "Any", "TYPE_CHECKING"}
    public = {
        name
        for name, value in vars(testing).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in helpers
    }
    assert sorted(testing.__all__) == sorted(public)
    assert len(testing.__all__) == len(set(testing.__all__))


def test_the_conformance_base_is_not_collected_by_itself() -> None:
    assert not testing.JobDriverConformance.__name__.startswith("Test")


@given(enqueue_requests())
def test_a_drawn_request_is_well_formed(r: EnqueueRequest) -> None:
    assert r.name and r.queue and r.idempotency_key and r.id and r.run_id
    assert r.max_attempts >= 1


@given(json_values())
def test_a_drawn_payload_is_its_own_json_form(value: object) -> None:
    from ultimat3.core import to_json_form

    assert to_json_form(value) == value


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=50)
@given(batch=enqueue_batches(max_size=15, keys=st.sampled_from(["a", "b", "c"])))
async def test_every_drawn_batch_enqueues_with_one_live_row_per_key(
    batch: list[EnqueueRequest],
) -> None:
    driver = memory_job_driver(clock=FrozenClock())
    results = await driver.enqueue_many(batch)
    assert len(results) == len(batch)
    rows = await driver.introspect.list(limit=200)
    live = [(r.name, r.tenant_id, r.idempotency_key) for r in rows if r.state in LIVE_STATES]
    assert len(live) == len(set(live))
    assert len(rows) == sum(not r.deduped for r in results)
