"""A sealed value read from an entity never lands in plaintext in a step checkpoint, a job result,
a job's input, a log line, an export or ``x jobs show``: reads answer a ``Sealed`` whose text form
is ``[redacted]`` and whose JSON form is refused (``X_SEALED_VALUE_EXPOSED``) before anything is
written."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, log_event, new_id
from ultimat3.entity import KeyRing, Sealed, entity, exportable, memory_database, redact, text
from ultimat3.entity import uuid as uuid_col
from ultimat3.jobs import job
from ultimat3.jobs.adapter import show_redacted
from ultimat3.jobs.testing import JobHarness

SSN = "078-05-1120-PLAINTEXT"
people = entity(
    "people",
    columns={
        "id": uuid_col().primary_key(),
        "name": text(),
        "ssn": text().sealed().personal_data("national_id"),
    },
)
RING = KeyRing({"k1": KeyRing.generate_key()})


class Person(BaseModel):
    person_id: str


class Loose(BaseModel):
    person_id: str
    extra: Any = None


async def seeded() -> tuple[Any, str]:
    db = memory_database([people], key_ring=RING)
    await db.migrate()
    pid = new_id()
    await db.people.insert({"id": pid, "name": "Ada", "ssn": SSN})
    return db, pid


def assert_no_plaintext(*texts: object) -> None:
    for t in texts:
        assert SSN not in str(t), f"the sealed plaintext leaked into {t!r}"


async def test_a_step_that_checkpoints_a_sealed_row_is_refused_and_stores_nothing() -> None:
    db, pid = await seeded()

    async def body(i: Person, step: Any, ctx: Any) -> None:
        async def read(signal: Any) -> Any:
            return await db.people.where(id=i.person_id).first()

        await step.run("read", read)

    reader = job(input=Person, idempotency_key=lambda i: i.person_id, name="sealed.step", run=body)
    harness = JobHarness(jobs=[reader])
    async with harness:
        await reader.enqueue(Person(person_id=pid))
        await harness.drain()
        (row,) = await harness.rows()
        shown = await show_redacted(harness.driver, row.id)
    assert row.state in {"dead", "failed"}
    assert row.last_error is not None and row.last_error["code"] == "X_SEALED_VALUE_EXPOSED"
    assert "people.ssn" in row.last_error["message"]
    assert "read" not in shown.steps or shown.steps["read"].output is None
    assert_no_plaintext(row.last_error, shown, json.dumps(row.last_error))


async def test_a_result_holding_a_sealed_value_is_refused() -> None:
    db, pid = await seeded()

    async def body(i: Person, step: Any, ctx: Any) -> Any:
        return {"ssn": (await db.people.where(id=i.person_id).first() or {})["ssn"]}

    leaky = job(input=Person, idempotency_key=lambda i: i.person_id, name="sealed.result", run=body)
    harness = JobHarness(jobs=[leaky])
    async with harness:
        await leaky.enqueue(Person(person_id=pid))
        await harness.drain()
        (row,) = await harness.rows()
    assert row.result is None
    assert row.last_error is not None and row.last_error["code"] == "X_SEALED_VALUE_EXPOSED"
    assert_no_plaintext(row.last_error)


async def test_an_input_holding_a_sealed_value_is_refused_before_any_row() -> None:
    db, pid = await seeded()
    sealed = (await db.people.where(id=pid).first() or {})["ssn"]
    assert isinstance(sealed, Sealed)

    async def body(i: Loose, step: Any, ctx: Any) -> None:
        return None

    loose = job(input=Loose, idempotency_key=lambda i: i.person_id, name="sealed.input", run=body)
    harness = JobHarness(jobs=[loose])
    async with harness:
        with pytest.raises(XError) as caught:
            await loose.enqueue(Loose(person_id=pid, extra={"ssn": sealed}))
        assert await harness.rows() == []
    assert caught.value.code == "X_SEALED_VALUE_EXPOSED"
    assert "people.ssn" in caught.value.message and "$.extra.ssn" in caught.value.message
    assert_no_plaintext(caught.value, caught.value.to_dict())
    # revealing it is the explicit way to send plaintext
    async with harness:
        await loose.enqueue(Loose(person_id=pid, extra={"ssn": sealed.reveal()}))
        (row,) = await harness.rows()
    assert row.payload["extra"]["ssn"] == SSN


async def test_a_log_line_an_f_string_and_an_export_show_no_plaintext(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db, pid = await seeded()
    row = await db.people.where(id=pid).first()
    assert row is not None and row["ssn"].reveal() == SSN
    with caplog.at_level(logging.DEBUG, logger="ultimat3"):
        log_event("app.person.read", level="info", row=row, ssn=row["ssn"])
    assert "app.person.read" in caplog.text and "[redacted]" in caplog.text
    assert_no_plaintext(caplog.text, f"{row['ssn']}", str(row), repr(row))
    assert "ssn" not in exportable(people, row)
    assert redact(people, row)["ssn"] == "[redacted]"


async def test_a_sealed_value_copies_as_itself_and_refuses_pickle() -> None:
    import copy
    import pickle

    db, pid = await seeded()
    row = await db.people.where(id=pid).first()
    assert row is not None
    assert copy.deepcopy(row)["ssn"].reveal() == SSN and copy.copy(row["ssn"]) is row["ssn"]
    with pytest.raises(XError) as caught:
        pickle.dumps(row)
    assert caught.value.code == "X_SEALED_VALUE_EXPOSED"
    assert_no_plaintext(caught.value)
