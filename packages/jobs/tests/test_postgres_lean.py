"""The lean path of the driver's own connections (``DriverConnection.lean_fetchone``): the single
enqueue's statements prepared once per connection and sent straight through libpq, answering and
failing as they would through a cursor."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError, new_id
from ultimat3.jobs._model import EnqueueRequest
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3.jobs.postgres._db import LEAN, DriverConnection, _text_params, lean_statement


def req(i: int = 0, *, key: str | None = None, **kw: Any) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="lean.job",
        queue="q",
        payload=kw.pop("payload", {"i": i}),
        idempotency_key=key if key is not None else f"k{i}",
        max_attempts=3,
        **kw,
    )


@given(
    st.lists(
        st.one_of(st.sampled_from(["a", "b", "id", "run_at_ms", "x_1"]), st.just("%%")),
        max_size=12,
    )
)
def test_each_named_placeholder_becomes_one_numbered_one(parts: list[str]) -> None:
    text = " , ".join(p if p == "%%" else f"%({p})s" for p in parts)
    statement = lean_statement("demo", text)
    names = [p for p in parts if p != "%%"]
    assert statement.order == tuple(dict.fromkeys(names))
    expected = " , ".join("%" if p == "%%" else f"${statement.order.index(p) + 1}" for p in parts)
    assert statement.query == expected.encode()
    assert statement.name == b"x_demo"


def test_parameters_take_their_text_form_and_refuse_what_they_cannot_carry() -> None:
    assert _text_params([None, True, False, 7, -3, "é"], "utf-8") == [
        None,
        b"t",
        b"f",
        b"7",
        b"-3",
        "é".encode(),
    ]
    with pytest.raises(psycopg.DataError, match="NUL"):
        _text_params(["ok", "a\x00b"], "utf-8")
    with pytest.raises(psycopg.ProgrammingError, match="float"):
        _text_params([1.5], "utf-8")


async def test_the_single_enqueue_is_prepared_once_per_connection(
    database_url: str, pg_schema: str
) -> None:
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    try:
        first = await driver.enqueue(req(1))
        for i in range(2, 6):
            await driver.enqueue(req(i))
        again = await driver.enqueue(req(1))
        assert (again.id, again.deduped) == (first.id, True)
        async with driver._db.connection() as conn:
            assert isinstance(conn, DriverConnection)
            cur = await conn.execute(
                "SELECT name FROM pg_prepared_statements WHERE name LIKE 'x\\_%' ORDER BY name"
            )
            prepared = [r[0] for r in await cur.fetchall()]
        assert prepared == sorted(f"x_{name}" for name in LEAN)
    finally:
        await driver.close()


async def test_a_payload_larger_than_the_socket_takes_at_once_goes_through(
    pg_driver: Any,
) -> None:
    big = "x" * (6 * 1024 * 1024)  # several socket buffers: the flush waits for writability
    done = await pg_driver.enqueue(req(1, payload={"blob": big}))
    row = await pg_driver.introspect.show(done.id)
    assert row is not None and row.payload == {"blob": big}


async def test_a_value_the_server_refuses_is_an_x_invariant_and_the_connection_lives_on(
    database_url: str, pg_schema: str
) -> None:
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    try:
        with pytest.raises(XError) as caught:
            await driver.enqueue(req(1, run_at_ms=10**16))  # past timestamptz's range
        assert caught.value.code == "X_INVARIANT"
        assert re.search(r"enqueue of job \S+: Postgres refused a value", caught.value.message)
        done = await driver.enqueue(req(2))
        assert not done.deduped
        [stats] = await driver.stats()
        assert stats.ready == 1, "the refused enqueue wrote nothing"
    finally:
        await driver.close()


async def test_statements_deallocated_under_it_are_prepared_again(
    database_url: str, pg_schema: str
) -> None:
    """psycopg sends DEALLOCATE ALL on a connection after a ROLLBACK, DROP or ALTER it ran
    there (an operator call's transaction rolled back, say): the lean statements are prepared
    again, and the enqueue answers as before."""
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    try:
        await driver.enqueue(req(1))
        async with driver._db.connection() as conn:
            await conn.execute("DEALLOCATE ALL")
        second = await driver.enqueue(req(2))
        assert not second.deduped
        async with driver._db.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT 1")
                await conn.execute("SELECT 1")
            await conn.execute("ROLLBACK")  # outside a transaction: a warning, and a clear
        third = await driver.enqueue(req(2))
        assert (third.id, third.deduped) == (second.id, True)
        async with driver._db.connection() as conn:
            await conn.execute("DEALLOCATE x_enqueue_blind")  # one gone, the others kept
            await conn.execute("DEALLOCATE x_enqueue_holder")
        fourth = await driver.enqueue(req(4))
        assert not fourth.deduped
        async with driver._db.connection() as conn:
            assert isinstance(conn, DriverConnection)
            conn._lean_prepared = frozenset()  # as if it forgot one still prepared
        fifth = await driver.enqueue(req(4))
        assert (fifth.id, fifth.deduped) == (fourth.id, True)
    finally:
        await driver.close()
