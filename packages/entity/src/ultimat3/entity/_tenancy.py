"""Tenancy: every statement on an entity with a ``.tenant()`` column is scoped to the ambient
tenant (``use_tenant``); no ambient tenant is a refusal, never an unscoped statement; inside
``cross_tenant(reason, fn)`` the scope is lifted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ultimat3.core import XError, cross_tenant_reason, current_tenant

from ._entity import Entity
from ._values import check_value


@dataclass(frozen=True, slots=True)
class Scope:
    """``tenant`` the statement is scoped to; ``None`` when unscoped (no tenant column, or
    inside ``cross_tenant``)."""

    column: str | None
    tenant: Any


UNSCOPED = Scope(None, None)


def scope_of(ent: Entity, what: str) -> Scope:
    """The scope of one statement on ``ent`` (``what`` names it in a refusal)."""
    col = ent.tenant_column
    if col is None or cross_tenant_reason() is not None:
        return UNSCOPED
    tenant = current_tenant()
    if tenant is None:
        raise XError(
            "X_TENANT_REQUIRED",
            f"{ent.name}.{what}: {ent.name!r} is a tenant entity (column {col!r}) and no tenant "
            "is ambient; the statement was not run",
            fix="async with use_tenant(org_id): ...  — or cross_tenant('why', fn) as a system "
            "actor",
            meta={"entity": ent.name, "column": col},
        )
    return Scope(col, check_value(ent.name, col, ent.columns[col], tenant))


def forbid_other_tenant(ent: Entity, scope: Scope, value: Any, what: str) -> None:
    """``X_FORBIDDEN`` when a written row names a tenant other than the ambient one."""
    if scope.column is not None and value != scope.tenant:
        raise XError(
            "X_FORBIDDEN",
            f"{ent.name}.{what}: the row's {scope.column} {value!r} is not the ambient tenant "
            f"{scope.tenant!r}",
            fix="write rows of the ambient tenant, or cross_tenant('why', fn) as a system actor",
            meta={"entity": ent.name, "column": scope.column},
        )


def tenant_collision(ent: Entity, n: int, conflict: tuple[str, ...]) -> XError:
    """An upsert whose key is held by another tenant's row: ``X_FORBIDDEN``, nothing written."""
    return XError(
        "X_FORBIDDEN",
        f"{ent.name}.upsert_all: {n} row(s) collide with another tenant's row on "
        f"{list(conflict)}; nothing was written",
        fix="include the tenant column in the unique key, or cross_tenant('why', fn)",
        meta={"entity": ent.name, "columns": list(conflict)},
    )
