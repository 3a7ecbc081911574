"""What a database backend does for the table handle. The handle checks, scopes and seals;
a store only executes (Postgres: one composed statement; memory: the same on dicts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ._entity import Entity
from ._series import SeriesPoint

Op = Literal["eq", "ne", "lt", "lte", "gt", "gte", "in", "like", "is_null", "not_null"]
OPS: tuple[str, ...] = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "like")


@dataclass(frozen=True, slots=True)
class Filter:
    """``column op value`` with the value already normalized to its column."""

    column: str
    op: Op
    value: Any = None


@dataclass(frozen=True, slots=True)
class Order:
    column: str
    desc: bool = False


class Store(Protocol):
    """One backend's statements; ``rows`` are complete, normalized and sealed already."""

    async def insert(self, ent: Entity, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Insert every row (one transaction); answer the stored rows."""
        ...

    async def upsert(
        self,
        ent: Entity,
        rows: Sequence[dict[str, Any]],
        conflict: tuple[str, ...],
        update: tuple[str, ...],
        guard: tuple[str, Any] | None,
    ) -> int:
        """Insert or update on ``conflict``; ``update`` the columns to overwrite; ``guard``
        ``(column, value)`` an existing row must hold to be overwritten. Answers rows written."""
        ...

    async def select(
        self,
        ent: Entity,
        filters: Sequence[Filter],
        order: Sequence[Order],
        limit: int | None,
    ) -> list[dict[str, Any]]: ...

    async def count(self, ent: Entity, filters: Sequence[Filter]) -> int: ...

    async def update(
        self, ent: Entity, filters: Sequence[Filter], values: dict[str, Any]
    ) -> int: ...

    async def delete(self, ent: Entity, filters: Sequence[Filter]) -> int: ...

    async def series(
        self,
        ent: Entity,
        filters: Sequence[Filter],
        on: str,
        unit: str,
        zone: str,
        value: tuple[str, str | None],
    ) -> list[SeriesPoint]: ...

    async def refresh(self, ent: Entity, concurrently: bool) -> None: ...
