"""``entity()``: a declared table (or view), checked once at declaration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ultimat3.core import Duration, XError, parse_duration

from ._columns import Column
from ._names import check_identifier, derived_name
from ._values import check_value

SOFT_DELETE_COLUMN = "deleted_at"


@dataclass(frozen=True, slots=True)
class View:
    """The entity is a view over ``sql`` (a ``select``; unqualified names resolve in the
    database's schema); ``materialized=True`` makes it a materialized view (``refresh()``)."""

    sql: str
    materialized: bool = False


@dataclass(frozen=True, slots=True)
class PartitionBy:
    """Range partitions on a ``timestamp()`` column, one per ``unit`` (UTC boundaries):
    ``ahead`` partitions past the current one; ``retain`` (a duration) drops older ones."""

    column: str
    unit: Literal["month", "day"] = "month"
    ahead: int = 3
    retain: Duration | None = None

    def retain_ms(self) -> int | None:
        return None if self.retain is None else parse_duration(self.retain)


@dataclass(frozen=True, slots=True)
class Index:
    """An index over ``columns`` (``unique=True`` for a unique one)."""

    columns: tuple[str, ...]
    unique: bool = False
    name: str | None = None


@dataclass(frozen=True)
class Entity:
    """A declared table: its columns in order and what the declaration implies."""

    name: str
    columns: Mapping[str, Column]
    primary_key: tuple[str, ...]
    indexes: tuple[Index, ...]
    view: View | None
    partition_by: PartitionBy | None
    append_only: bool
    soft_delete: bool
    tenant_column: str | None = field(default=None)

    def __repr__(self) -> str:
        return f"Entity({self.name!r}, columns={list(self.columns)})"

    @property
    def sealed_columns(self) -> tuple[str, ...]:
        return tuple(n for n, c in self.columns.items() if c.is_sealed)

    @property
    def searchable_columns(self) -> tuple[str, ...]:
        return tuple(n for n, c in self.columns.items() if c.is_searchable)

    @property
    def personal_data_columns(self) -> dict[str, str]:
        """``{column: kind}`` of the ``.personal_data(kind)`` columns."""
        return {n: c.personal_data_kind for n, c in self.columns.items() if c.personal_data_kind}

    @property
    def all_columns(self) -> tuple[str, ...]:
        """Declared columns plus ``deleted_at`` on a soft-delete entity."""
        extra = (SOFT_DELETE_COLUMN,) if self.soft_delete else ()
        return (*self.columns, *extra)

    def unique_sets(self) -> list[frozenset[str]]:
        """Every column set a unique index covers (the primary key included)."""
        sets = [frozenset(self.primary_key)] if self.primary_key else []
        sets += [frozenset({n}) for n, c in self.columns.items() if c.is_unique]
        sets += [frozenset(i.columns) for i in self.indexes if i.unique]
        return sets

    def index_name(self, index: Index) -> str:
        return index.name or derived_name(
            self.name, *index.columns, suffix="key" if index.unique else "idx"
        )

    def all_indexes(self) -> list[Index]:
        """Declared indexes plus one unique index per ``.unique()`` column."""
        uniq = [Index((n,), unique=True) for n, c in self.columns.items() if c.is_unique]
        return [*uniq, *self.indexes]


def entity(
    name: str,
    *,
    columns: Mapping[str, Column],
    indexes: Sequence[Index | Sequence[str]] = (),
    primary_key: Sequence[str] | str | None = None,
    view: View | None = None,
    partition_by: PartitionBy | None = None,
    append_only: bool = False,
    soft_delete: bool = False,
) -> Entity:
    """Declare a table. Every name is checked here (``X_CONFIG_INVALID`` naming the entity and
    the column); identifiers are always quoted in SQL, so reserved words are fine names."""
    fix = "entity('orders', columns={'id': uuid().primary_key(), 'total': numeric()})"
    check_identifier(name, what="entity name", fix=fix)
    if not isinstance(columns, Mapping) or not columns:
        raise XError("X_CONFIG_INVALID", f"entity {name!r}: no columns declared", fix=fix)
    for col_name, col in columns.items():
        check_identifier(col_name, what=f"entity {name!r}: column name", fix=fix)
        if not isinstance(col, Column):
            raise XError(
                "X_CONFIG_INVALID",
                f"entity {name!r}: column {col_name!r} is a {type(col).__name__}, not a column",
                fix="columns={'title': text()}",
            )
        if col.has_default:
            check_value(name, col_name, col, col.default_value)
    if soft_delete and SOFT_DELETE_COLUMN in columns:
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: soft_delete=True adds {SOFT_DELETE_COLUMN!r} itself; do not "
            "declare it",
            fix=f"drop the {SOFT_DELETE_COLUMN!r} column from columns=",
        )
    if soft_delete and append_only:
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: append_only and soft_delete exclude each other (an append-only "
            "row is never deleted)",
            fix="pick one",
        )
    pk = _primary_key(name, columns, primary_key)
    tenants = [n for n, c in columns.items() if c.is_tenant]
    if len(tenants) > 1:
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: {len(tenants)} tenant columns {tenants}; at most one",
            fix="mark one column .tenant()",
        )
    idx = tuple(_index(name, columns, i) for i in indexes)
    if partition_by is not None:
        _check_partition(name, columns, pk, idx, partition_by)
    sealed_bad = [n for n, c in columns.items() if c.is_sealed and (c.is_unique or c.is_tenant)]
    sealed_bad += [n for n in pk if columns[n].is_sealed]
    if sealed_bad:
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: sealed column {sealed_bad[0]!r} cannot be a key, unique or the "
            "tenant (its ciphertext differs on every write)",
            fix="keep sealed columns out of keys and indexes",
        )
    return Entity(
        name=name,
        columns=dict(columns),
        primary_key=pk,
        indexes=idx,
        view=view,
        partition_by=partition_by,
        append_only=append_only,
        soft_delete=soft_delete,
        tenant_column=tenants[0] if tenants else None,
    )


def _primary_key(
    name: str, columns: Mapping[str, Column], given: Sequence[str] | str | None
) -> tuple[str, ...]:
    marked = tuple(n for n, c in columns.items() if c.is_primary_key)
    if given is None:
        return marked
    pk = (given,) if isinstance(given, str) else tuple(given)
    if marked and set(marked) != set(pk):
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: primary_key={list(pk)} disagrees with the columns marked "
            f".primary_key() {list(marked)}",
            fix="declare the primary key one way",
        )
    _known(name, columns, pk, "primary_key")
    return pk


def _known(name: str, columns: Mapping[str, Column], cols: Sequence[str], what: str) -> None:
    unknown = [c for c in cols if c not in columns]
    if unknown or not cols:
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: {what} names unknown column(s) {unknown or list(cols)}",
            fix=f"name declared columns: {list(columns)}",
        )


def _index(name: str, columns: Mapping[str, Column], given: Index | Sequence[str]) -> Index:
    index = given if isinstance(given, Index) else Index(tuple(given))
    index = Index(tuple(index.columns), index.unique, index.name)
    _known(name, columns, index.columns, "an index")
    if index.name is not None:
        check_identifier(index.name, what=f"entity {name!r}: index name", fix="Index(('a',))")
    return index


def _check_partition(
    name: str,
    columns: Mapping[str, Column],
    pk: tuple[str, ...],
    indexes: tuple[Index, ...],
    by: PartitionBy,
) -> None:
    fix = "PartitionBy('created_at', unit='month', ahead=3, retain='365d')"
    col = columns.get(by.column)
    if col is None or col.kind != "timestamp" or col.is_nullable:
        raise XError(
            "X_CONFIG_INVALID",
            f"entity {name!r}: partition_by column {by.column!r} must be a declared, "
            "non-nullable timestamp() column",
            fix=fix,
        )
    if by.unit not in ("month", "day"):
        raise XError("X_CONFIG_INVALID", f"entity {name!r}: partition unit {by.unit!r}", fix=fix)
    if not isinstance(by.ahead, int) or by.ahead < 0:
        raise XError("X_CONFIG_INVALID", f"entity {name!r}: ahead={by.ahead!r}", fix=fix)
    try:
        by.retain_ms()
    except XError as exc:
        raise XError(
            "X_CONFIG_INVALID", f"entity {name!r}: retain: {exc.message}", fix=fix
        ) from exc
    uniques = [pk] if pk else []
    uniques += [i.columns for i in indexes if i.unique]
    uniques += [(n,) for n, c in columns.items() if c.is_unique]
    for cols in uniques:
        if by.column not in cols:
            raise XError(
                "X_CONFIG_INVALID",
                f"entity {name!r}: unique key {list(cols)} lacks the partition column "
                f"{by.column!r} (Postgres requires it)",
                fix=f"primary_key=('id', {by.column!r})",
            )


__all__ = ["SOFT_DELETE_COLUMN", "Entity", "Index", "PartitionBy", "View", "entity"]
