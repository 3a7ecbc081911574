"""The one ambient enqueue path: dedupe, run ids, batches, tenants, the outbox, refusals — on the
memory driver and on Postgres (``engine``), where an enqueue inside ``transaction(pool)`` commits
or vanishes with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given as for_all
from hypothesis import settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from ultimat3.core import (
    SYSTEM_ACTOR,
    AbortController,
    Actor,
    FrozenClock,
    XError,
    cross_tenant,
    is_lowercase_uuid,
    swap_adapter,
    to_epoch_ms,
    use_actor,
    use_clock,
    use_connection,
    use_signal,
)
from ultimat3.jobs import MAX_ENQUEUE_BATCH, Concurrency, EnqueueResult, Retry, job, outbox_relay
from ultimat3.jobs.adapter import (
    JOB_DRIVER,
    OUTBOX_STORE,
    ColumnEnqueuer,
    EnqueueColumns,
    EnqueueRequest,
)
from ultimat3.jobs.memory import MemoryTransaction, memory_job_driver, memory_outbox_store
from ultimat3.jobs.postgres import transaction
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class Org(BaseModel):
    org_id: UUID
    note: str = ""


async def _noop(input: Any, step: Any, ctx: Any) -> None:
    return None


onboard = job(
    input=Org,
    tenant=lambda i: str(i.org_id),
    idempotency_key=lambda i: f"onboard:{i.org_id}",
    retry=Retry(attempts=4),
    name="onboard",
    run=_noop,
)
untenanted = job(input=Org, idempotency_key=lambda i: f"u:{i.org_id}", name="untenanted", run=_noop)
other_name = job(
    input=Org,
    tenant=lambda i: str(i.org_id),
    idempotency_key=lambda i: f"onboard:{i.org_id}",
    name="other-name",
    run=_noop,
)


class SpyDriver:
    """A driver that counts the calls reaching the port."""

    def __init__(self, inner: EngineDriver) -> None:
        self.inner = inner
        self.many_calls: list[int] = []
        self.one_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def enqueue(self, request: EnqueueRequest, *, connection: object = None) -> Any:
        self.one_calls += 1
        return await self.inner.enqueue(request, connection=connection)

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, connection: object = None
    ) -> Any:
        self.many_calls.append(len(requests))
        return await self.inner.enqueue_many(requests, connection=connection)

    async def enqueue_columns(self, columns: EnqueueColumns, *, connection: object = None) -> Any:
        """A batch as columns is one call too; passed on as the inner driver takes it."""
        self.many_calls.append(len(columns))
        if isinstance(self.inner, ColumnEnqueuer):
            return await self.inner.enqueue_columns(columns, connection=connection)
        return await self.inner.enqueue_many(columns.requests(), connection=connection)


@pytest.fixture
def clock() -> Iterator[FrozenClock]:
    c = FrozenClock()
    with use_clock(c):
        yield c


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


@pytest.fixture
def spy(engine: Engine) -> Iterator[SpyDriver]:
    d = SpyDriver(engine.driver)
    with swap_adapter(JOB_DRIVER, d):
        yield d


def org() -> dict[str, str]:
    return {"org_id": str(uuid4())}


async def _rows(driver: EngineDriver) -> list[Any]:
    return await driver.introspect.list(limit=200)


async def test_enqueue_answers_the_new_rows_ids(driver: EngineDriver) -> None:
    i = org()
    result = await onboard.enqueue(i)
    assert isinstance(result, EnqueueResult)
    assert result.deduped is False
    assert is_lowercase_uuid(result.id)
    assert is_lowercase_uuid(result.run_id)
    row = await driver.introspect.show(result.id)
    assert row.run_id == result.run_id
    assert row.name == "onboard"
    assert row.queue == "default"
    assert row.state == "ready"
    assert row.max_attempts == 4
    assert row.tenant_id == i["org_id"]
    assert row.idempotency_key == f"onboard:{i['org_id']}"
    assert row.payload == {"org_id": i["org_id"], "note": ""}


async def test_the_model_itself_is_an_input(driver: EngineDriver) -> None:
    oid = uuid4()
    result = await onboard.enqueue(Org(org_id=oid))
    assert (await driver.introspect.show(result.id)).payload["org_id"] == str(oid)


async def test_a_live_key_dedupes_onto_the_live_row_and_the_first_payload_wins(
    driver: EngineDriver,
) -> None:
    oid = str(uuid4())
    first = await onboard.enqueue({"org_id": oid, "note": "first"})
    second = await onboard.enqueue({"org_id": oid, "note": "second"})
    assert second == EnqueueResult(first.id, first.run_id, deduped=True)
    assert len(await _rows(driver)) == 1
    assert (await driver.introspect.show(first.id)).payload["note"] == "first"


async def test_a_running_row_holds_its_key(driver: EngineDriver) -> None:
    i = org()
    first = await onboard.enqueue(i)
    claimed = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    assert [c.id for c in claimed] == [first.id]
    again = await onboard.enqueue(i)
    assert again.deduped is True
    assert again.id == first.id


async def test_a_terminal_row_frees_its_key_at_once(driver: EngineDriver) -> None:
    i = org()
    first = await onboard.enqueue(i)
    [c] = await driver.claim(queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=1000)
    assert await driver.ack(c.id, worker_id="w", claim=c.claim)
    again = await onboard.enqueue(i)
    assert again.deduped is False
    assert again.id != first.id


async def test_the_key_is_scoped_by_job_name_and_tenant(driver: EngineDriver) -> None:
    i = org()
    a = await onboard.enqueue(i)
    b = await other_name.enqueue(i)  # same key, another job
    c = await untenanted.enqueue(i, tenant_id="org-a")
    d = await untenanted.enqueue(i, tenant_id="org-b")  # same key, another tenant
    e = await untenanted.enqueue(i, tenant_id="org-b")
    assert not a.deduped and not b.deduped and not c.deduped and not d.deduped
    assert e.deduped and e.id == d.id


async def test_a_given_run_id_names_the_run(driver: EngineDriver) -> None:
    run_id = str(uuid4())
    result = await onboard.enqueue(org(), run_id=run_id)
    assert result.run_id == run_id
    assert (await driver.introspect.show(result.id)).run_id == run_id


@pytest.mark.parametrize("bad", ["not-a-uuid", "0193A0B2-7C4D-7E8F-9A0B-1C2D3E4F5A6B", "", 42])
async def test_a_bad_run_id_is_refused_before_anything_is_queued(
    driver: EngineDriver, bad: Any
) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue(org(), run_id=bad)
    assert exc.value.code == "X_ID_INVALID"
    assert "run_id" in exc.value.message
    assert await _rows(driver) == []


async def test_a_bad_run_id_stages_nothing_either(driver: EngineDriver) -> None:
    store = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, store), MemoryTransaction() as tx, use_connection(tx):
        with pytest.raises(XError) as exc:
            await onboard.enqueue(org(), run_id="RUN")
        assert exc.value.code == "X_ID_INVALID"
    assert store.unpublished() == []


async def test_delay_and_run_at_schedule_the_row(driver: EngineDriver) -> None:
    before = await driver.now_ms()
    later = await onboard.enqueue(org(), delay="1h")
    after = await driver.now_ms()
    row = await driver.introspect.show(later.id)
    assert row.state == "delayed"
    assert before + 3_600_000 <= to_epoch_ms(row.run_at) <= after + 3_600_000  # the driver's now
    at = datetime(2030, 1, 1, tzinfo=UTC)
    fixed = await onboard.enqueue(org(), run_at=at)
    assert (await driver.introspect.show(fixed.id)).run_at == at
    with pytest.raises(XError) as exc:
        await onboard.enqueue(org(), delay="1h", run_at=at)
    assert exc.value.code == "X_INVARIANT"


async def test_enqueue_many_answers_in_input_order_with_one_driver_call(spy: SpyDriver) -> None:
    inputs = [org() for _ in range(5)]
    inputs.insert(3, dict(inputs[1]))  # a shared key: the second is deduped onto the first
    results = await onboard.enqueue_many(inputs)
    assert spy.many_calls == [6]
    assert spy.one_calls == 0
    assert [r.deduped for r in results] == [False, False, False, True, False, False]
    assert results[3].id == results[1].id
    for given, result in zip(inputs, results, strict=True):
        row = await spy.inner.introspect.show(result.id)
        assert row.payload["org_id"] == given["org_id"]


async def test_enqueue_many_of_nothing_calls_nothing(spy: SpyDriver) -> None:
    assert await onboard.enqueue_many([]) == []
    assert spy.many_calls == []


async def test_enqueue_many_past_the_batch_bound_is_refused_before_any_write(
    spy: SpyDriver,
) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue_many([org()] * (MAX_ENQUEUE_BATCH + 1))
    assert exc.value.code == "X_JOB_ENQUEUE_BATCH_TOO_LARGE"
    assert str(MAX_ENQUEUE_BATCH) in exc.value.message
    assert exc.value.fix and "backfill" in exc.value.fix
    assert spy.many_calls == []


async def test_an_empty_key_in_any_input_refuses_the_whole_call(spy: SpyDriver) -> None:
    keyed = job(
        input=Org,
        idempotency_key=lambda i: i.note,
        name="keyed-by-note",
        run=_noop,
    )
    inputs = [{"org_id": str(uuid4()), "note": n} for n in ("a", "b", "", "d")]
    with pytest.raises(XError) as exc:
        await keyed.enqueue_many(inputs)
    assert exc.value.code == "X_INVARIANT"
    assert exc.value.meta["index"] == 2
    assert spy.many_calls == []
    assert await spy.inner.introspect.list() == []


async def test_a_bad_concurrency_key_refuses_the_enqueue(spy: SpyDriver) -> None:
    capped = job(
        input=Org,
        idempotency_key=lambda i: f"c:{i.org_id}",
        concurrency=Concurrency(key=lambda i: i.note),
        name="capped",
        run=_noop,
    )
    with pytest.raises(XError) as exc:
        await capped.enqueue({"org_id": str(uuid4()), "note": ""})
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    with pytest.raises(XError) as exc:
        await capped.enqueue_many([{"org_id": str(uuid4()), "note": "x" * 201}])
    assert exc.value.code == "X_JOB_DECLARATION_INVALID"
    assert spy.many_calls == [] and spy.one_calls == 0
    ok = await capped.enqueue({"org_id": str(uuid4()), "note": "acct-1"})
    assert (await spy.inner.introspect.show(ok.id)).concurrency_key == "acct-1"


async def test_an_invalid_payload_is_refused_before_anything_is_queued(spy: SpyDriver) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue_many([org(), {"org_id": "nope"}])
    assert exc.value.code == "X_BODY_INVALID"
    assert spy.many_calls == []


# --- tenants ------------------------------------------------------------------------------------


async def test_an_explicit_tenant_other_than_the_inputs_is_a_mismatch(spy: SpyDriver) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue(org(), tenant_id="org-b")
    assert exc.value.code == "X_JOB_TENANT_MISMATCH"
    assert exc.value.fix
    assert spy.one_calls == 0


async def test_enqueue_as_an_actor_of_another_org_is_a_mismatch(spy: SpyDriver) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue_as(Actor(id="u1", org_id="org-b"), org())
    assert exc.value.code == "X_JOB_TENANT_MISMATCH"
    assert "u1" in exc.value.message


async def test_an_ambient_actor_of_another_org_is_a_mismatch(spy: SpyDriver) -> None:
    with use_actor(Actor(id="u2", org_id="org-b")), pytest.raises(XError) as exc:
        await onboard.enqueue(org())
    assert exc.value.code == "X_JOB_TENANT_MISMATCH"
    with use_actor(Actor(id="u2", org_id="org-b")), pytest.raises(XError) as exc:
        await onboard.enqueue_many([org()])
    assert exc.value.code == "X_JOB_TENANT_MISMATCH"
    assert spy.one_calls == 0 and spy.many_calls == []


async def test_the_same_org_everywhere_is_fine(driver: EngineDriver) -> None:
    i = org()
    with use_actor(Actor(id="u", org_id=i["org_id"])):
        r = await onboard.enqueue(i, tenant_id=i["org_id"])
    assert (await driver.introspect.show(r.id)).tenant_id == i["org_id"]


async def test_cross_tenant_admits_the_ambient_check_only(driver: EngineDriver) -> None:
    crosser = Actor(id="ops", org_id="org-b", permissions=frozenset({"tenancy:cross"}))
    i = org()
    with use_actor(crosser):
        r = await cross_tenant("support fix", lambda: onboard.enqueue(i))
        assert r.deduped is False
        with pytest.raises(XError) as exc:
            await cross_tenant("support fix", lambda: onboard.enqueue(org(), tenant_id="org-b"))
        assert exc.value.code == "X_JOB_TENANT_MISMATCH"
        with pytest.raises(XError) as exc:
            await cross_tenant("support fix", lambda: onboard.enqueue_as(crosser, org()))
        assert exc.value.code == "X_JOB_TENANT_MISMATCH"


async def test_an_actor_with_no_org_is_never_compared(driver: EngineDriver) -> None:
    i = org()
    with use_actor(SYSTEM_ACTOR):
        r = await onboard.enqueue(i)
    s = await onboard.enqueue_as(Actor(id="bot"), org())
    t = await onboard.enqueue_as(None, org())
    for result in (r, s, t):
        assert (await driver.introspect.show(result.id)).tenant_id is not None


async def test_a_none_tenant_job_takes_only_an_explicit_tenant(driver: EngineDriver) -> None:
    with use_actor(Actor(id="u", org_id="org-ambient")):
        ambient = await untenanted.enqueue(org())
        explicit = await untenanted.enqueue(org(), tenant_id="org-x")
        as_actor = await untenanted.enqueue_as(Actor(id="v", org_id="org-v"), org())
        as_none = await untenanted.enqueue_as(None, org())
        as_orgless = await untenanted.enqueue_as(Actor(id="w"), org())
    show = driver.introspect.show
    assert (await show(ambient.id)).tenant_id is None
    assert (await show(explicit.id)).tenant_id == "org-x"
    assert (await show(as_actor.id)).tenant_id == "org-v"
    assert (await show(as_none.id)).tenant_id is None
    assert (await show(as_orgless.id)).tenant_id is None


async def test_an_empty_tenant_id_is_refused(driver: EngineDriver) -> None:
    with pytest.raises(XError) as exc:
        await untenanted.enqueue(org(), tenant_id="")
    assert exc.value.code == "X_INVARIANT"


# --- the ambient facade ------------------------------------------------------------------------


async def test_with_no_driver_installed_the_enqueue_names_the_fix(clock: FrozenClock) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue(org())
    assert exc.value.code == "X_ADAPTER_MISSING"
    assert exc.value.fix and "install_job_driver" in exc.value.fix


async def test_inside_a_transaction_the_enqueue_is_staged_and_commit_is_the_enqueue(
    driver: EngineDriver,
) -> None:
    store = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, store):
        with MemoryTransaction() as tx, use_connection(tx):
            staged = await onboard.enqueue(org())
            assert store.unpublished() == []  # invisible until commit
        assert [r.id for r in store.unpublished()] == [staged.id]
        assert await _rows(driver) == []
        assert await outbox_relay(store, driver) == 1
    row = await driver.introspect.show(staged.id)
    assert row.run_id == staged.run_id


async def test_a_rolled_back_enqueue_never_existed(driver: EngineDriver) -> None:
    store = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, store):

        async def handler() -> None:
            with MemoryTransaction() as tx, use_connection(tx):
                await onboard.enqueue(org())
                raise RuntimeError("the business write failed")

        with pytest.raises(RuntimeError):
            await handler()
        assert store.unpublished() == []
        assert await outbox_relay(store, driver) == 0
    assert await _rows(driver) == []


async def test_a_staged_batch_dedupes_shared_keys_inside_it(driver: EngineDriver) -> None:
    store = memory_outbox_store()
    i = org()
    with swap_adapter(OUTBOX_STORE, store):
        with MemoryTransaction() as tx, use_connection(tx):
            results = await onboard.enqueue_many([i, org(), i])
        assert results[2] == EnqueueResult(results[0].id, results[0].run_id, deduped=True)
        assert len(store.unpublished()) == 2


async def test_a_transaction_nobody_can_join_is_refused_not_enqueued_outside_it(
    driver: EngineDriver,
) -> None:
    with use_connection(object()), pytest.raises(XError) as exc:
        await onboard.enqueue(org())
    assert exc.value.code == "X_ADAPTER_MISSING"
    assert "outbox" in exc.value.message
    assert await _rows(driver) == []


async def test_a_driver_that_owns_the_connection_enqueues_on_it(clock: FrozenClock) -> None:
    seen: list[object] = []

    class Owning(SpyDriver):
        def owns_connection(self, connection: object) -> bool:
            return True

        async def enqueue(self, request: EnqueueRequest, *, connection: object = None) -> Any:
            seen.append(connection)
            return await super().enqueue(request, connection=connection)

    conn = object()
    d = Owning(memory_job_driver())
    with swap_adapter(JOB_DRIVER, d), use_connection(conn):
        await onboard.enqueue(org())
    assert seen == [conn]


async def test_on_postgres_an_enqueue_inside_a_transaction_commits_or_vanishes_with_it(
    pg_engine: Engine,
) -> None:
    driver = pg_engine.driver
    assert pg_engine.database_url is not None
    store = memory_outbox_store()  # installed, yet the driver joins the transaction itself
    i = org()
    async with AsyncConnectionPool(pg_engine.database_url, min_size=1, open=False) as pool:
        with swap_adapter(OUTBOX_STORE, store):
            async with transaction(pool):
                kept = await onboard.enqueue(i)
                again = await onboard.enqueue(i)  # the transaction sees its own row
                many = await onboard.enqueue_many([org(), org(), i])
                assert again == EnqueueResult(kept.id, kept.run_id, deduped=True)
                assert many[2] == again
                assert await _rows(driver) == []  # nobody outside sees it before the commit
                assert (
                    await driver.claim(
                        queues=["default"], limit=10, worker_id="w", visibility_timeout_ms=30_000
                    )
                    == []
                )

            async def fails_after_enqueueing() -> str:
                async with transaction(pool):
                    dropped = await onboard.enqueue(org())
                    await onboard.enqueue_many([org(), org()])
                    assert (await onboard.enqueue(i)).id == kept.id  # committed: the live row
                    raise RuntimeError(dropped.id)

            with pytest.raises(RuntimeError) as failed:
                await fails_after_enqueueing()
    assert store.unpublished() == []  # nothing was staged: the rows went in the transaction
    rows = await _rows(driver)
    assert sorted(r.id for r in rows) == sorted([kept.id, many[0].id, many[1].id])
    assert {r.state for r in rows} == {"ready"}
    with pytest.raises(XError) as missing:
        await driver.introspect.show(str(failed.value))
    assert missing.value.code == "X_JOB_NOT_FOUND"  # rolled back: it never existed
    h = pg_engine.harness([onboard])
    await h.drain()
    assert {r.state for r in await _rows(driver)} == {"done"}


async def test_under_an_aborted_signal_an_enqueue_rethrows_the_reason(
    driver: EngineDriver,
) -> None:
    controller = AbortController()
    controller.abort(XError("X_DRAINING", "worker w is draining"))
    with use_signal(controller.signal), pytest.raises(XError) as exc:
        await onboard.enqueue(org())
    assert exc.value.code == "X_DRAINING"
    assert await _rows(driver) == []


async def test_enqueue_many_takes_a_sequence(spy: SpyDriver) -> None:
    with pytest.raises(XError) as exc:
        await onboard.enqueue_many(org())  # type: ignore[arg-type]
    assert exc.value.code == "X_INVARIANT"
    assert "enqueue_many" in exc.value.message
    assert exc.value.fix


async def test_prepared_requests_keep_the_batch_bound(spy: SpyDriver) -> None:
    from ultimat3.jobs._declare.enqueue import enqueue_requests

    request = EnqueueRequest(
        id=str(uuid4()),
        run_id=str(uuid4()),
        name="onboard",
        queue="default",
        payload={},
        idempotency_key="k",
        max_attempts=1,
    )
    with pytest.raises(XError) as exc:
        await enqueue_requests([request] * (MAX_ENQUEUE_BATCH + 1))
    assert exc.value.code == "X_JOB_ENQUEUE_BATCH_TOO_LARGE"
    assert await enqueue_requests([]) == []
    [result] = await enqueue_requests([request])
    assert result.id == request.id
    assert spy.one_calls == 1


async def test_a_tenant_function_answering_an_empty_string_is_refused(spy: SpyDriver) -> None:
    blank = job(
        input=Org,
        tenant=lambda i: "",
        idempotency_key=lambda i: "k",
        name="blank-tenant",
        run=_noop,
    )
    with pytest.raises(XError) as exc:
        await blank.enqueue(org())
    assert exc.value.code == "X_INVARIANT"
    assert "tenant" in exc.value.message
    assert spy.one_calls == 0


# --- the batch path builds what the one-by-one path builds ---------------------------------------


_NOTES = st.sampled_from(["a", "b", "", "x" * 3])
_INPUTS = st.lists(
    st.one_of(
        st.builds(lambda n: {"org_id": str(UUID(int=n)), "note": "n"}, st.integers(0, 5)),
        st.builds(lambda note: {"org_id": str(uuid4()), "note": note}, _NOTES),
        st.just({"org_id": "nope"}),
    ),
    max_size=8,
)


@for_all(inputs=_INPUTS, tenant_id=st.sampled_from([None, "t-1"]))
@settings(max_examples=60, deadline=None)
def test_the_batch_requests_equal_the_one_by_one_requests(
    inputs: list[dict[str, str]], tenant_id: str | None
) -> None:
    """_batch (one validation, one dump, one id allocation, columns) answers the rows _request
    per input answers — ids aside — or raises the refusal that path raises, naming the same
    input."""
    from ultimat3.jobs._declare.enqueue import _batch, _request

    by_note = job(input=Org, idempotency_key=lambda i: i.note, name="by-note", run=_noop)
    for declared in (onboard, untenanted, by_note):

        def one_by_one(declared: Any = declared) -> list[EnqueueRequest]:
            return [
                _request(
                    declared,
                    one,
                    run_id=None,
                    tenant_id=tenant_id,
                    delay_ms=5,
                    run_at_ms=None,
                    as_actor=None,
                    trace_context=None,
                    index=i,
                )
                for i, one in enumerate(inputs)
            ]

        def batch(declared: Any = declared) -> list[EnqueueRequest]:
            built = _batch(
                declared,
                inputs,
                tenant_id=tenant_id,
                delay_ms=5,
                run_at_ms=None,
                as_actor=None,
                trace_context=None,
            )
            return built.requests() if isinstance(built, EnqueueColumns) else built

        outcomes: list[tuple[object, ...]] = []
        for build in (one_by_one, batch):
            try:
                built = build()
            except XError as exc:
                outcomes.append(("refused", exc.code, exc.message, exc.meta.get("index")))
            else:
                assert all(is_lowercase_uuid(r.id) and is_lowercase_uuid(r.run_id) for r in built)
                assert len({r.id for r in built} | {r.run_id for r in built}) == 2 * len(built)
                outcomes.append(
                    ("built", [dataclasses.replace(r, id="", run_id="") for r in built])
                )
        assert outcomes[0] == outcomes[1]
