"""The conformance suite on both databases: Postgres (a schema of its own) and memory."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ultimat3.entity import memory_database
from ultimat3.entity.testing import CONFORMANCE, CONFORMANCE_KEY_RING, conformance_entities

Check = Callable[[Any], Awaitable[None]]
MakeDb = Callable[..., Any]


@pytest.mark.parametrize("check", CONFORMANCE, ids=lambda c: c.__name__)
async def test_postgres_passes(check: Check, make_db: MakeDb) -> None:
    await check(make_db(conformance_entities(), CONFORMANCE_KEY_RING))


@pytest.mark.parametrize("check", CONFORMANCE, ids=lambda c: c.__name__)
async def test_memory_passes(check: Check) -> None:
    await check(memory_database(conformance_entities(), key_ring=CONFORMANCE_KEY_RING))
