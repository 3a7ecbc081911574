"""Sealed columns: AES-GCM at rest; any text round-trips, the stored bytes never contain it;
rotation — old keys decrypt, the newest encrypts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from ultimat3.core import XError, new_id
from ultimat3.entity import KeyRing, database, entity, redact, text, uuid

MakeDb = Callable[..., Any]

K1, K2 = KeyRing.generate_key(), KeyRing.generate_key()
people = entity(
    "people",
    columns={"id": uuid().primary_key(), "ssn": text().sealed().personal_data("national_id")},
)
printable = st.text(
    st.characters(codec="utf-8", blacklist_characters="\x00"),
    min_size=1,
    max_size=200,
)


async def _stored(db: Any, pid: str) -> bytes:
    async with db.store.connection() as conn:
        cur = await conn.execute(f'select ssn from "{db.schema}".people where id = %s', [pid])
        row = await cur.fetchone()
        return bytes(row[0])


@pytest.mark.timeout(600)  # many Postgres round trips on a machine maybe shared
@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(secret=printable)
def test_any_text_round_trips_and_the_ciphertext_never_contains_it(
    sync_schema: str, database_url: str, secret: str
) -> None:
    async def run() -> None:
        ring = KeyRing({"k1": K1})
        async with database(database_url, [people], schema=sync_schema, key_ring=ring) as db:
            await db.migrate()
            pid = new_id()
            await db.people.insert({"id": pid, "ssn": secret})
            assert (await db.people.where(id=pid).first() or {})["ssn"].reveal() == secret
            stored = await _stored(db, pid)
            if len(secret.encode()) >= 8:  # shorter byte strings turn up in random bytes by chance
                assert secret.encode() not in stored
            assert ring.key_id_of(stored) == "k1"

    try:
        asyncio.run(run())
    finally:
        _drop_schema(database_url, sync_schema)


async def test_rotation_old_keys_decrypt_the_newest_encrypts(make_db: MakeDb) -> None:
    old = make_db([people], KeyRing({"k1": K1}))
    await old.migrate()
    a = new_id()
    await old.people.insert({"id": a, "ssn": "old"})
    rotated = make_db([people], KeyRing({"k1": K1, "k2": K2}), schema=old.schema)
    b = new_id()
    await rotated.people.insert({"id": b, "ssn": "new"})
    assert {r["id"]: r["ssn"].reveal() for r in await rotated.people.all()} == {
        a: "old",
        b: "new",
    }
    assert rotated.key_ring.key_id_of(await _stored(rotated, a)) == "k1"
    assert rotated.key_ring.key_id_of(await _stored(rotated, b)) == "k2"
    await rotated.people.where(id=a).update(ssn="old")  # re-seal under the newest key
    assert rotated.key_ring.key_id_of(await _stored(rotated, a)) == "k2"
    dropped = make_db([people], KeyRing({"k1": K1}), schema=old.schema)
    with pytest.raises(XError) as caught:
        await dropped.people.all()
    assert caught.value.code == "X_SEALED_UNREADABLE" and "'k2'" in caught.value.message


def test_a_ciphertext_moved_to_another_column_does_not_open() -> None:
    ring = KeyRing({"k1": K1})
    sealed = ring.seal("secret", where="people.ssn")
    with pytest.raises(XError) as caught:
        ring.unseal(sealed, where="people.note")
    assert caught.value.code == "X_SEALED_UNREADABLE"


def test_key_ring_refusals_and_parse() -> None:
    for bad in ({}, {"k": "not base64!"}, {"k": b"short"}, {"": K1}):
        with pytest.raises(XError) as caught:
            KeyRing(bad)
        assert caught.value.code == "X_CONFIG_INVALID"
    with pytest.raises(XError):
        KeyRing({"k1": K1}, current="k9")
    with pytest.raises(XError):
        KeyRing.parse("no-colon")
    ring = KeyRing.parse(f"k1:{K1}, k2:{K2}")
    assert ring.current == "k2" and K1 not in repr(ring)


def test_redact_hides_sealed_values_for_logs() -> None:
    assert redact(people, {"id": "x", "ssn": "123"}) == {"id": "x", "ssn": "[redacted]"}


def test_exportable_drops_sealed_columns() -> None:
    from ultimat3.entity import exportable

    assert exportable(people, {"id": "x", "ssn": "123"}) == {"id": "x"}


def _drop_schema(url: str, schema: str) -> None:
    """Each example drops what it made, so a run cut short leaves nothing behind."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
