"""The demo's workload plan, its settings and its percentile: pure pieces of ``x demo``."""

from __future__ import annotations

import pytest

from ultimat3.core import XError
from ultimat3_demo.jobs import DEMO_JOBS, FLAKY_EVERY
from ultimat3_demo.run import (
    IDLE_PROBES,
    DemoSettings,
    check_schema_name,
    percentile,
    plan,
    probes_of,
)


def test_the_plan_makes_exactly_the_jobs_asked_for_a_quarter_of_them_orders() -> None:
    receipts, orders = plan(3000)
    assert len(receipts) + len(orders) + 2 == 3000  # + the sleep and the dead letter
    assert len(orders) == 750
    assert sum(o.flaky for o in orders) == 750 // FLAKY_EVERY
    assert len({r.order_id for r in receipts}) == len(receipts)  # distinct keys: no dedupe


@pytest.mark.parametrize(("jobs", "probes"), [(3000, IDLE_PROBES), (300, IDLE_PROBES), (20, 3)])
def test_a_few_receipts_are_kept_back_to_measure_the_idle_pickup(jobs: int, probes: int) -> None:
    receipts, _ = plan(jobs)
    assert probes_of(receipts) == probes  # never more than a quarter of the receipts
    assert probes_of(receipts) <= len(receipts) // 4


def test_every_demo_job_has_its_own_name_and_queue() -> None:
    assert sorted(j.name for j in DEMO_JOBS) == [
        "export_ledger",
        "fulfil_order",
        "send_receipt",
        "trial_reminder",
    ]
    assert {j.queue for j in DEMO_JOBS} == {"emails", "orders", "reports"}


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) == 0.0


def test_bad_settings_name_every_cause() -> None:
    with pytest.raises(XError) as caught:
        DemoSettings(jobs=1, concurrency=0, batch=0, backlog=0, timeout_s=0, io_ms=-1).check()
    assert caught.value.code == "X_INVARIANT"
    assert len(caught.value.meta["causes"]) == 6
    DemoSettings().check()


@pytest.mark.parametrize("schema", ["", "public", "Public", "pg_temp", "information_schema"])
def test_the_demo_never_drops_a_schema_an_app_may_hold(schema: str) -> None:
    with pytest.raises(XError, match="X_CONFIG_INVALID"):
        check_schema_name(schema)
    check_schema_name("x_demo")
