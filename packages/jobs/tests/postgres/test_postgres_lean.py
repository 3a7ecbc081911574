"""The lean path of the driver's own connections (``DriverConnection.lean_fetchone``): the single
enqueue's statements prepared once per connection and sent straight through libpq, answering and
failing as they would through a cursor."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import EnqueueRequest
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


def _count_readers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fds the running loop is asked to watch for reading, in order."""
    loop = asyncio.get_running_loop()
    added: list[int] = []
    original = loop.add_reader

    def add_reader(fd: Any, callback: Any, *args: Any) -> None:
        added.append(fd)
        original(fd, callback, *args)

    monkeypatch.setattr(loop, "add_reader", add_reader)
    return added


async def test_the_socket_is_watched_once_across_lean_statements(
    database_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reader for a run of single enqueues, not one per statement; a statement psycopg runs
    on the connection takes it (psycopg waits on the socket itself), and the next enqueue
    watches again."""
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    try:
        await driver.enqueue(req(0))
        added = _count_readers(monkeypatch)
        async with asyncio.timeout(20):  # a lost watch waits forever
            for i in range(1, 21):
                await driver.enqueue(req(i))
            # the reader of the first enqueue serves the next twenty; on a loaded machine the
            # watch was seen armed again twice in twenty (cause not pinned down): a few, never
            # one per statement
            assert len(added) <= 3, f"one watch per statement, not one per run: {added}"
            before = len(added)
            await driver.stats()  # a cursor statement: psycopg's own wait
            psycopg_waits = len(added) - before
            assert psycopg_waits >= 1
            for i in range(21, 31):
                await driver.enqueue(req(i))
        again = len(added) - before - psycopg_waits
        assert 1 <= again <= 3, f"watched again once, then kept (not per statement): {added}"
    finally:
        await driver.close()


async def test_lean_and_cursor_statements_take_turns_on_one_connection(
    database_url: str, pg_schema: str
) -> None:
    """Were the lean watch left in place under psycopg's wait, psycopg's reader would replace it
    and then leave the socket unwatched: the next enqueue would wait forever."""
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    try:
        async with asyncio.timeout(20):
            for i in range(30):
                await driver.enqueue(req(i))
                [stats] = await driver.stats()
                assert stats.ready == i + 1
                again = await driver.enqueue(req(i))
                assert again.deduped
    finally:
        await driver.close()


async def test_data_nobody_waits_for_takes_the_watch_off(
    database_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the idle connection (its goodbye and EOF arrive with no lean statement
    waiting): the reader fires once and unwatches, instead of waking the loop on every turn
    while the socket stays readable; the next enqueue goes through on a new connection."""
    driver = postgres_job_driver(database_url, schema=pg_schema, min_size=1, max_size=1)
    wakes = 0
    original = DriverConnection._lean_readable

    def counted(self: DriverConnection) -> None:
        nonlocal wakes
        wakes += 1
        original(self)

    monkeypatch.setattr(DriverConnection, "_lean_readable", counted)
    try:
        await driver.enqueue(req(1))
        wakes = 0
        async with driver._db.connection() as conn:
            pid = conn.info.backend_pid
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        await asyncio.sleep(0.3)  # the loop turns many times meanwhile
        assert wakes == 1
        later = await driver.enqueue(req(2))
        assert not later.deduped
    finally:
        await driver.close()


async def test_a_closed_connection_leaves_no_watch_on_its_socket_number(
    database_url: str,
) -> None:
    """A closed socket's number is the next one a new socket gets. Had the closed connection's
    reader stayed registered with the loop, the new connection's first watch on that number
    would fail (the loop thinks it watches a socket the kernel already forgot)."""
    probe = lean_statement("probe", "SELECT %(a)s::text")
    first = await DriverConnection.connect(database_url, autocommit=True)
    assert await first.lean_fetchone("probe", probe, {"a": "one"}) == ("one",)
    number = first.pgconn.socket
    await first.close()
    second = await DriverConnection.connect(database_url, autocommit=True)
    try:
        assert second.pgconn.socket == number, "precondition: the socket number is reused"
        async with asyncio.timeout(10):
            assert await second.lean_fetchone("probe", probe, {"a": "two"}) == ("two",)
            cur = await second.execute("SELECT 3")
            assert await cur.fetchone() == (3,)
            assert await second.lean_fetchone("probe", probe, {"a": "four"}) == ("four",)
    finally:
        await second.close()
