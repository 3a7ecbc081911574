"""``define_subject()``: one person's data, declared once — the walk, the treatments, the plan,
and the personal-data checks (``unerased_personal_data``, ``unreached_personal_data``,
``personal_data_problems``).

The walk starts at the subject's entity and follows the declared ``.references()`` of the
database's entities, continuing only through tables whose treatment is ``'delete'`` (the likes on
a RETAINED post are not the person's; the likes on a deleted one go with it). ``columns=`` adds a
table that holds the person's key with no foreign key. Every reached table needs a treatment:
``'delete'``, ``Anonymize({column: value})`` or ``Retain('why')``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ultimat3.core import XError
from ultimat3.jobs.factories.entity_extra import need_entity

if TYPE_CHECKING:
    from ultimat3.entity import Database, Entity, MemoryDatabase


@dataclass(frozen=True, slots=True)
class Anonymize:
    """Keep the rows, overwrite ``values`` (``{column: value}``)."""

    values: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Retain:
    """Keep the rows as they are, for the stated reason (which law applies is the app's)."""

    why: str


Treatment = Literal["delete"] | Anonymize | Retain


@dataclass(frozen=True, slots=True)
class Link:
    """``table.column`` holds a key of ``parent`` (the subject's own key when ``parent`` is the
    subject's entity); ``declared`` is False for a ``columns=`` entry (no foreign key)."""

    table: str
    column: str
    parent: str
    declared: bool = True


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One table of the walk: its treatment and the links by which the person reaches it."""

    table: str
    treatment: Treatment
    via: tuple[Link, ...]

    @property
    def treatment_name(self) -> str:
        if self.treatment == "delete":
            return "delete"
        return "anonymize" if isinstance(self.treatment, Anonymize) else "retain"


@dataclass(frozen=True, slots=True)
class SubjectPlan:
    """``subject.plan()``: the ordered walk — children first, the subject last. ``cleared``:
    the nullable links of a loop of deleted tables, set to ``None`` before any delete."""

    subject: str
    steps: tuple[PlanStep, ...]
    reached: frozenset[str] = field(default_factory=frozenset)
    entities: Mapping[str, Entity] = field(default_factory=dict, repr=False)
    cleared: tuple[Link, ...] = ()

    def clears(self, table: str) -> bool:
        """Whether a cleared link leads into ``table`` (its rows are then written by their own
        key: the cleared column no longer finds them)."""
        return any(lk.table == table for lk in self.cleared)


def _treatment(subject: str, table: str, given: object) -> Treatment:
    if given == "delete":
        return "delete"
    if isinstance(given, Anonymize | Retain):
        return given
    if isinstance(given, Mapping) and set(given) == {"anonymize"}:
        values = given["anonymize"]
        if isinstance(values, Mapping):
            return Anonymize(dict(values))
    if isinstance(given, Mapping) and set(given) == {"retain"}:
        return Retain(given["retain"])
    raise XError(
        "X_SUBJECT_TREATMENT_INVALID",
        f"subject {subject!r}: table {table!r} has treatment {given!r}, not 'delete', "
        "Anonymize({column: value}) or Retain('why')",
        fix=f"tables={{{table!r}: 'delete'}}",
        meta={"subject": subject, "table": table},
    )


class Subject:
    """A declared person (``define_subject``): a plain value both job factories take."""

    def __init__(
        self,
        entity: Entity,
        database: Database | MemoryDatabase,
        key: Callable[[Any], Any],
        tables: Mapping[str, Treatment],
        columns: Mapping[str, str],
    ) -> None:
        self.entity = entity
        self.database = database
        self.key = key
        self.tables = dict(tables)
        self.columns = dict(columns)

    @property
    def name(self) -> str:
        return self.entity.name

    def __repr__(self) -> str:
        return f"Subject({self.entity.name!r}, tables={sorted(self.tables)})"

    def _refuse(self, code: str, table: str, message: str, fix: str) -> XError:
        return XError(
            code,
            f"subject {self.name!r}: {message}",
            fix=fix,
            meta={"subject": self.name, "table": table},
        )

    def plan(self) -> SubjectPlan:
        """The ordered walk, or the first refusal: ``X_SUBJECT_TABLE_UNDECLARED``,
        ``X_SUBJECT_TREATMENT_INVALID``, ``X_SUBJECT_CYCLE``, ``X_PERSONAL_DATA_UNERASED``."""
        entities = self.database.entities
        root = self.name
        links: dict[str, list[Link]] = {}
        for ent in entities.values():
            for cname, col in ent.columns.items():
                if col.reference is not None:
                    links.setdefault(col.reference.target_name, []).append(
                        Link(ent.name, cname, col.reference.target_name)
                    )
        for table, column in self.columns.items():
            links.setdefault(root, []).append(Link(table, column, root, declared=False))
        # breadth first from the subject, on through deleted tables only
        via: dict[str, list[Link]] = {}
        frontier, expanded = [root], {root}
        while frontier:
            parent = frontier.pop(0)
            for link in links.get(parent, []):
                if link.table == root:
                    continue
                via.setdefault(link.table, [])
                if link not in via[link.table]:
                    via[link.table].append(link)
                treatment = self.tables.get(link.table)
                if treatment == "delete" and link.table not in expanded:
                    expanded.add(link.table)
                    frontier.append(link.table)
        for table in [root, *via]:
            if table not in self.tables:
                raise self._refuse(
                    "X_SUBJECT_TABLE_UNDECLARED",
                    table,
                    f"the walk reaches {table!r}, which has no treatment",
                    f"tables={{..., {table!r}: 'delete' | Anonymize({{...}}) | Retain('why')}}",
                )
        for table in self.tables:
            if table not in entities:
                raise self._refuse(
                    "X_SUBJECT_TREATMENT_INVALID",
                    table,
                    f"{table!r} is not an entity of the database",
                    "name the entities as declared",
                )
        deleted = {t for t in [root, *via] if self.tables[t] == "delete"}
        for table in [root, *via]:
            self._check_treatment(table, self.tables[table], via.get(table, []), deleted)
        order, cleared = self._children_first(root, via, deleted)
        cleared += self._subject_links(root, deleted)
        steps = tuple(PlanStep(t, self.tables[t], tuple(via.get(t, ()))) for t in [*order, root])
        plan = SubjectPlan(root, steps, frozenset([root, *via]), entities, cleared)
        problems = unerased_personal_data(plan)
        if problems:
            raise problems[0]
        return plan

    def _check_treatment(
        self, table: str, treatment: Treatment, via: Sequence[Link], deleted: set[str]
    ) -> None:
        ent = self.database.entities[table]
        if treatment == "delete":
            if ent.append_only or ent.soft_delete:
                kind = "append-only" if ent.append_only else "soft-delete"
                raise self._refuse(
                    "X_SUBJECT_TREATMENT_INVALID",
                    table,
                    f"'delete' on {table!r}, a {kind} entity",
                    "Anonymize({...}) or Retain('why') for it",
                )
            return
        if isinstance(treatment, Retain) and (
            not isinstance(treatment.why, str) or not treatment.why.strip()
        ):
            raise self._refuse(
                "X_SUBJECT_TREATMENT_INVALID",
                table,
                f"Retain on {table!r} has a blank reason",
                "Retain('invoices are kept ten years (HGB §257)')",
            )
        if isinstance(treatment, Anonymize):
            if not treatment.values:
                raise self._refuse(
                    "X_SUBJECT_TREATMENT_INVALID",
                    table,
                    f"Anonymize on {table!r} names no column",
                    "name the columns to overwrite, or Retain('why') the table as it is",
                )
            for column, value in treatment.values.items():
                col = ent.columns.get(column)
                if col is None:
                    raise self._refuse(
                        "X_SUBJECT_TREATMENT_INVALID",
                        table,
                        f"Anonymize names {table}.{column}, which is not a column",
                        f"one of {list(ent.columns)}",
                    )
                if value is None and not col.is_nullable:
                    raise self._refuse(
                        "X_SUBJECT_TREATMENT_INVALID",
                        table,
                        f"Anonymize sets {table}.{column} to None, which is not nullable",
                        f"a placeholder value, or .nullable() on {table}.{column}",
                    )
                if col.is_primary_key or col.is_tenant:
                    raise self._refuse(
                        "X_SUBJECT_TREATMENT_INVALID",
                        table,
                        f"Anonymize rewrites {table}.{column}, a key or the tenant",
                        "anonymize the data columns only",
                    )
        # a kept row under a deleted parent would block the delete or be cascaded away
        for link in via:
            if link.parent not in deleted:
                continue
            cleared = isinstance(treatment, Anonymize) and (
                link.column in treatment.values and treatment.values[link.column] is None
            )
            if not cleared:
                raise self._refuse(
                    "X_SUBJECT_TREATMENT_INVALID",
                    table,
                    f"{table!r} is kept under the deleted {link.parent!r} without its key "
                    f"{table}.{link.column} anonymized to None",
                    f"'delete' it, or Anonymize({{{link.column!r}: None, ...}})",
                )

    def _subject_links(self, root: str, deleted: set[str]) -> tuple[Link, ...]:
        """The subject's own keys to a deleted table (``members.avatar_id`` to ``files``): a loop
        through the subject, cleared first when nullable, else ``X_SUBJECT_CYCLE``."""
        out: list[Link] = []
        for column, col in self.database.entities[root].columns.items():
            target = col.reference.target_name if col.reference is not None else None
            if target is None or target == root or target not in deleted:
                continue
            if not col.is_nullable:
                raise self._refuse(
                    "X_SUBJECT_CYCLE",
                    root,
                    f"the subject's {root}.{column} references the deleted {target!r}, which "
                    f"references the subject: {root} -> {target} -> {root} is a loop with no "
                    "nullable key to clear first",
                    f"make {root}.{column} .nullable() (it is set to None before the deletes), "
                    f"or give {target!r} another treatment",
                )
            out.append(Link(root, column, target))
        return tuple(out)

    def _children_first(
        self, root: str, via: Mapping[str, Sequence[Link]], deleted: set[str]
    ) -> tuple[list[str], tuple[Link, ...]]:
        """Every reached table, each before the deleted tables it references (post-order), and
        the nullable links cleared first to break each loop of deleted tables."""
        edges = [lk for ls in via.values() for lk in ls if lk.parent != root]
        cleared: list[Link] = []
        while (loop := _find_loop([lk for lk in edges if lk not in cleared])) is not None:
            pairs = list(zip(loop, [*loop[1:], loop[0]], strict=True))
            for child, parent in pairs:
                links = [lk for lk in edges if (lk.table, lk.parent) == (child, parent)]
                ent = self.database.entities[child]
                if all(ent.columns[lk.column].is_nullable for lk in links):
                    cleared += links
                    break
            else:
                names = " -> ".join([*loop, loop[0]])
                raise self._refuse(
                    "X_SUBJECT_CYCLE",
                    loop[0],
                    f"the deleted tables {names} form a loop with no nullable key to clear first",
                    "make one foreign key of the loop .nullable() (it is set to None before the "
                    "deletes), or give one table another treatment",
                )
        # a table's parents among the reached deleted ones: it must be written before them
        active = [lk for lk in edges if lk not in cleared]
        parents: dict[str, set[str]] = {t: set() for t in via}
        for lk in active:
            parents[lk.table].add(lk.parent)
        order: list[str] = []
        done: set[str] = set()

        def visit(table: str) -> None:
            if table in done:
                return
            done.add(table)
            # the tables referencing this one come first (children before parents)
            for child, ps in parents.items():
                if table in ps:
                    visit(child)
            order.append(table)

        for table in via:
            visit(table)
        return order, tuple(cleared)


def _find_loop(links: Sequence[Link]) -> list[str] | None:
    """A loop of ``links`` as its tables ``[a, b, ...]`` (``a`` references ``b``, ..., the last
    references ``a``), or ``None``."""
    refs: dict[str, list[str]] = {}
    for lk in links:
        refs.setdefault(lk.table, [])
        if lk.parent not in refs[lk.table]:
            refs[lk.table].append(lk.parent)
    state: dict[str, str] = {}

    def visit(table: str, path: list[str]) -> list[str] | None:
        if state.get(table) == "done":
            return None
        if state.get(table) == "open":
            return path[path.index(table) :]
        state[table] = "open"
        for parent in refs.get(table, []):
            found = visit(parent, [*path, table])
            if found is not None:
                return found
        state[table] = "done"
        return None

    for table in list(refs):
        found = visit(table, [])
        if found is not None:
            return found
    return None


def define_subject(
    entity: Entity,
    *,
    database: Database | MemoryDatabase,
    key: Callable[[Any], Any],
    tables: Mapping[str, Any],
    targets: Sequence[Any] = (),
    columns: Mapping[str, str] | None = None,
) -> Subject:
    """Declare the person whose rows live in ``entity`` (their key is ``key(input)``) and the
    treatment of every table the walk reaches; see the module. ``subject.plan()`` answers the
    walk or refuses it."""
    ent_mod = need_entity("define_subject")
    if not isinstance(entity, ent_mod.Entity):
        raise XError(
            "X_SUBJECT_TREATMENT_INVALID",
            f"define_subject: {entity!r} is not an entity()",
            fix="define_subject(members, database=db, key=..., tables={...})",
        )
    if not isinstance(database, ent_mod.Database | ent_mod.MemoryDatabase):
        raise XError(
            "X_SUBJECT_TREATMENT_INVALID",
            f"define_subject({entity.name!r}): database {database!r} is not a database()",
            fix="database=db",
        )
    if database.entities.get(entity.name) is not entity:
        raise XError(
            "X_SUBJECT_TREATMENT_INVALID",
            f"define_subject({entity.name!r}): the database does not declare it",
            fix="list the entity in database(dsn, [...])",
        )
    if len(entity.primary_key) != 1:
        raise XError(
            "X_SUBJECT_TREATMENT_INVALID",
            f"define_subject({entity.name!r}): the subject needs a one-column primary key",
            fix="declare one primary key column (the person's key)",
        )
    if not callable(key):
        raise XError(
            "X_SUBJECT_TREATMENT_INVALID",
            f"define_subject({entity.name!r}): key must be a callable of the input",
            fix="key=lambda i: i.member_id",
        )
    if targets:
        raise XError(
            "X_CONFIG_INVALID",
            f"define_subject({entity.name!r}): targets= are not available in this version",
            fix="list the framework data as tables of the database, or leave targets out",
        )
    if not isinstance(tables, Mapping):
        raise XError(
            "X_SUBJECT_TREATMENT_INVALID",
            f"define_subject({entity.name!r}): tables must map entity names to treatments",
            fix="tables={'comments': 'delete'}",
        )
    treatments = {t: _treatment(entity.name, t, v) for t, v in tables.items()}
    extra = dict(columns or {})
    for table, column in extra.items():
        ent = database.entities.get(table)
        if ent is None or column not in ent.columns:
            raise XError(
                "X_SUBJECT_TREATMENT_INVALID",
                f"define_subject({entity.name!r}): columns names {table}.{column}, which the "
                "database does not declare",
                fix="columns={'audit_copies': 'member_id'}",
            )
    return Subject(entity, database, key, treatments, extra)


_JOBS: weakref.WeakKeyDictionary[Any, Subject] = weakref.WeakKeyDictionary()


def mark_subject_job(job: Any, subject: Subject) -> None:
    """Record that ``job`` (a ``subject_erase`` / ``subject_export``) works on ``subject``."""
    _JOBS[job] = subject


def subject_of_job(job: object) -> Subject | None:
    """The subject a ``subject_erase`` / ``subject_export`` job works on (``x verify`` and
    ``x exercise`` find subjects through the app's jobs); ``None`` for any other job."""
    try:
        return _JOBS.get(job)
    except TypeError:  # not weak-referenceable: no job of ours
        return None


def _personal_refusal(plan: SubjectPlan, table: str, left: Sequence[str]) -> XError:
    return XError(
        "X_PERSONAL_DATA_UNERASED",
        f"subject {plan.subject!r}: {table!r} is anonymized but leaves its personal data "
        f"{', '.join(f'{table}.{c}' for c in left)} untouched",
        fix=f"name {', '.join(left)} in its Anonymize, or 'delete' / Retain('why') the table",
        meta={"subject": plan.subject, "table": table, "columns": list(left)},
    )


def unerased_personal_data(plan: SubjectPlan) -> list[XError]:
    """``X_PERSONAL_DATA_UNERASED`` for each reached table whose ``Anonymize`` names fewer than
    every ``.personal_data()`` column ('delete' clears the row; a retain is a stated reason)."""
    out: list[XError] = []
    for step in plan.steps:
        if not isinstance(step.treatment, Anonymize):
            continue
        marked = plan.entities[step.table].personal_data_columns
        left = [c for c in marked if c not in step.treatment.values]
        if left:
            out.append(_personal_refusal(plan, step.table, left))
    return out


def unreached_personal_data(
    plans: Sequence[SubjectPlan], entities: Sequence[Entity]
) -> list[XError]:
    """``X_PERSONAL_DATA_UNREACHED`` for each entity with a ``.personal_data()`` column that no
    subject's walk reaches."""
    reached = {t for p in plans for t in p.reached}
    return [
        XError(
            "X_PERSONAL_DATA_UNREACHED",
            f"{e.name!r} holds personal data ({', '.join(e.personal_data_columns)}) that no "
            "subject's walk reaches",
            fix=f"a .references() to the subject from {e.name!r}, or columns={{{e.name!r}: "
            "'<key column>'}} in define_subject",
            meta={"table": e.name, "columns": list(e.personal_data_columns)},
        )
        for e in entities
        if e.personal_data_columns and e.name not in reached
    ]


def personal_data_problems(subjects: Sequence[Subject]) -> list[XError]:
    """Both checks over ``subjects`` and every entity of their databases: each plan's refusal
    (any plan refusal counts) plus the unerased and unreached findings."""
    problems: list[XError] = []
    plans: list[SubjectPlan] = []
    entities: dict[str, Entity] = {}
    for s in subjects:
        entities.update(s.database.entities)
        try:
            plans.append(s.plan())
        except XError as err:
            problems.append(err)
    problems += unreached_personal_data(plans, list(entities.values()))
    return problems


__all__ = [
    "Anonymize",
    "Link",
    "PlanStep",
    "Retain",
    "Subject",
    "SubjectPlan",
    "Treatment",
    "define_subject",
    "mark_subject_job",
    "personal_data_problems",
    "subject_of_job",
    "unerased_personal_data",
    "unreached_personal_data",
]
