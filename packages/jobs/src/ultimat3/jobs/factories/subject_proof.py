"""``subject_proof()``: prove a ``define_subject()`` erases what it says — on a database.

The proof takes the subject's plan (its refusals raise, as a run's would), seeds one generated
person into every table the walk reaches — a canary value in every text and JSON column, every
key pointing at the person's rows, the tables they reference but the walk does not reach filled
with plain rows — erases that person exactly as ``subject_erase()`` does (the same steps, run in
process), then reads every stored row of the reached tables. A canary left in a table that is not
retained is a finding, ``X_SUBJECT_ERASE_INCOMPLETE``, naming the table and the column. Last, it
removes what it seeded and what the erase kept (where it can: an append-only row stays).

Run it on a scratch copy of the schema (``x exercise`` makes one and drops it after): on the
declared schema it reads the reached tables whole.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ultimat3.core import Signal, XError, never_signal, new_id, to_json_form, use_tenant
from ultimat3.jobs.factories.subject import Link, Retain, Subject, SubjectPlan
from ultimat3.jobs.factories.subject_erase import erase_person

if TYPE_CHECKING:
    from ultimat3.entity import Column, Database, Entity, MemoryDatabase

CANARY = "x-canary"
"""Every seeded canary starts ``x-canary:<token>:``."""


class _InProcess:
    """``step.run`` without the engine: the proof is about the walk, not about durability."""

    async def run(self, name: str, fn: Callable[[Signal], Awaitable[Any]], /) -> Any:
        return to_json_form(await fn(never_signal()))


class _Seeder:
    def __init__(self, db: Any, plan: SubjectPlan, token: str, tenant: str | None) -> None:
        self.db = db
        self.plan = plan
        self.token = token
        self.tenant = tenant
        self.rows: dict[str, dict[str, Any]] = {}  # the person's row per reached table
        self.inserted: list[tuple[str, str, Any]] = []  # (table, pk column, key) in order
        self.deferred: list[tuple[str, str, Any, str]] = []  # (table, column, key, parent)
        self.open: set[str] = set()
        self.rng = random.Random(token)
        self.links: dict[str, list[Link]] = {s.table: list(s.via) for s in plan.steps}

    def canary(self, table: str, column: str) -> str:
        return f"{CANARY}:{self.token}:{table}.{column}"

    def value(self, ent: Entity, column: str, col: Column, reached: bool) -> Any:
        kind = col.kind
        if col.is_tenant:
            return self.tenant
        if col.is_primary_key or kind == "uuid":
            return new_id() if kind in ("uuid", "text") else self.rng.randint(1, 2**30)
        if kind == "text":
            return self.canary(ent.name, column) if reached else f"filler:{new_id()}"
        if kind == "jsonb":
            return {"canary": self.canary(ent.name, column)} if reached else {}
        if kind in ("integer", "bigint"):
            return self.rng.randint(1, 2**30)
        if kind == "numeric":
            return Decimal(self.rng.randint(1, 2**30))
        if kind == "boolean":
            return True
        return datetime.now(UTC)  # timestamp

    async def row_of(self, table: str) -> dict[str, Any]:
        """The row seeded in ``table`` (inserting it, and what it needs, first)."""
        if table in self.rows:
            return self.rows[table]
        ent: Entity = self.db.entities[table]
        reached = table in self.plan.reached
        self.open.add(table)
        row: dict[str, Any] = {}
        later: list[tuple[str, str]] = []  # (column, parent) set once both rows exist
        via = {lk.column: lk.parent for lk in self.links.get(table, [])}
        for column, col in ent.columns.items():
            parent = via.get(column)
            if parent is None and col.reference is not None:
                parent = col.reference.target_name
            if parent is None:
                row[column] = self.value(ent, column, col, reached)
                continue
            if parent == self.plan.subject and parent in self.rows:
                row[column] = self._key_of(parent)
            elif parent in self.open or parent == table:
                if not col.is_nullable:
                    raise XError(
                        "X_SUBJECT_CYCLE",
                        f"subject_proof({self.plan.subject!r}): cannot seed {table}.{column}: "
                        f"{parent!r} needs {table!r} first and the key is not nullable",
                        fix=f"make {table}.{column} .nullable()",
                        meta={"subject": self.plan.subject, "table": table, "column": column},
                    )
                row[column] = None
                later.append((column, parent))
            elif col.reference is None:  # a columns= entry: the person's key, no foreign key
                row[column] = self._key_of(self.plan.subject)
            elif col.is_nullable and column not in via and parent not in self.rows:
                row[column] = None  # set once every row exists, when the walk reaches it
                if parent in self.plan.reached:
                    later.append((column, parent))
            else:
                row[column] = self._key_of(parent, await self.row_of(parent))
        created = await self.db.table(table).insert(row)
        self.rows[table] = dict(created)
        self.open.discard(table)
        pk = ent.primary_key[0] if len(ent.primary_key) == 1 else None
        if pk is not None:
            self.inserted.append((table, pk, created[pk]))
            for column, parent in later:
                self.deferred.append((table, column, created[pk], parent))
        return self.rows[table]

    def _key_of(self, table: str, row: Mapping[str, Any] | None = None) -> Any:
        ent: Entity = self.db.entities[table]
        got = self.rows[table] if row is None else row
        return got[ent.primary_key[0]]

    async def link_deferred(self) -> None:
        """The keys of a loop, set once both rows exist (the cleared path is then exercised)."""
        for table, column, key, parent in self.deferred:
            pk = self.db.entities[table].primary_key[0]
            await (
                self.db.table(table)
                .where(**{pk: key})
                .update(**{column: self._key_of(parent, await self.row_of(parent))})
            )

    async def remove(self) -> None:
        """What was seeded and is still there: the loops' keys unset, then children first."""
        for table, column, key, _ in self.deferred:
            pk = self.db.entities[table].primary_key[0]
            with contextlib.suppress(XError):
                await self.db.table(table).where(**{pk: key}).update(**{column: None})
        for table, pk, key in reversed(self.inserted):
            with contextlib.suppress(XError):
                await self.db.table(table).where(**{pk: key}).delete()


def _finding(plan: SubjectPlan, table: str, column: str, treatment: str) -> XError:
    return XError(
        "X_SUBJECT_ERASE_INCOMPLETE",
        f"subject {plan.subject!r}: after the erase, {table}.{column} still holds the person's "
        f"value ({table!r} is treated {treatment!r})",
        fix=f"name {column!r} in the Anonymize of {table!r}, or 'delete' / Retain('why') the table",
        meta={"subject": plan.subject, "table": table, "column": column},
    )


def _holds(value: Any, needle: str) -> bool:
    if isinstance(value, str):
        return needle in value
    if isinstance(value, Mapping | list):
        return needle in repr(value)
    return False


async def subject_proof(
    subject: Subject,
    *,
    database: Database | MemoryDatabase | None = None,
    page_size: int = 500,
) -> list[XError]:
    """Seed a generated person into ``database`` (default: the subject's own; it must declare
    the subject's entities), erase them, and answer the ``X_SUBJECT_ERASE_INCOMPLETE`` findings —
    one per table and column still holding a canary outside a retain; ``[]`` is a clean proof.
    The plan's refusals raise (``X_SUBJECT_TABLE_UNDECLARED``, ...)."""
    if not isinstance(subject, Subject):
        raise XError(
            "X_CONFIG_INVALID",
            f"subject_proof: {subject!r} is not a define_subject()",
            fix="subject_proof(member_subject, database=scratch_db)",
        )
    db: Any = subject.database if database is None else database
    declared = subject.database.entities
    for name in subject.plan().reached:
        if db.entities.get(name) is not declared[name]:
            raise XError(
                "X_CONFIG_INVALID",
                f"subject_proof({subject.name!r}): the database does not declare the subject's "
                f"entity {name!r}",
                fix="database(dsn, list(subject.database.entities.values()), schema='scratch')",
                meta={"subject": subject.name, "table": name},
            )
    scratch = Subject(db.entities[subject.name], db, subject.key, subject.tables, subject.columns)
    plan = scratch.plan()
    await db.migrate()
    token = new_id()[:8]
    tenant = new_id() if any(e.tenant_column for e in db.entities.values()) else None
    with use_tenant(tenant) if tenant is not None else contextlib.nullcontext():
        seeder = _Seeder(db, plan, token, tenant)
        try:
            for step in reversed(plan.steps):  # the subject first
                await seeder.row_of(step.table)
            await seeder.link_deferred()
            person = to_json_form(seeder._key_of(plan.subject))
            await erase_person(_InProcess(), plan, db, person, page_size)
            return await _search(db, plan, token)
        finally:
            await seeder.remove()


async def _search(db: Any, plan: SubjectPlan, token: str) -> list[XError]:
    needle = f"{CANARY}:{token}:"
    findings: list[XError] = []
    for step in plan.steps:
        if isinstance(step.treatment, Retain):
            continue
        ent: Entity = db.entities[step.table]
        left: list[str] = []
        for row in await db.table(step.table).all():
            left += [c for c in ent.columns if c not in left and _holds(row.get(c), needle)]
        findings += [_finding(plan, step.table, c, step.treatment_name) for c in left]
    return findings


__all__ = ["CANARY", "subject_proof"]
