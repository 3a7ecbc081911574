"""Column declarations: ``uuid()``, ``text()``, ... and their chained modifiers."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ultimat3.core import XError

if TYPE_CHECKING:
    from ._entity import Entity

Kind = Literal["uuid", "text", "integer", "bigint", "numeric", "boolean", "timestamp", "jsonb"]
OnDelete = Literal["cascade", "restrict", "set null"]

SQL_TYPES: dict[str, str] = {
    "uuid": "uuid",
    "text": "text",
    "integer": "integer",
    "bigint": "bigint",
    "numeric": "numeric",
    "boolean": "boolean",
    "timestamp": "timestamptz",
    "jsonb": "jsonb",
}
"""The Postgres type of each column kind (a sealed column is ``bytea`` whatever its kind)."""

UDT_NAMES: dict[str, str] = {
    "uuid": "uuid",
    "text": "text",
    "integer": "int4",
    "bigint": "int8",
    "numeric": "numeric",
    "boolean": "bool",
    "timestamp": "timestamptz",
    "jsonb": "jsonb",
}
"""What ``information_schema.columns.udt_name`` answers for each kind (``migrate`` compares)."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A foreign key: the referenced entity (or its name) and what a delete of the parent does."""

    target: Entity | str
    on_delete: OnDelete = "restrict"

    @property
    def target_name(self) -> str:
        return self.target if isinstance(self.target, str) else self.target.name


_NO_DEFAULT: Any = object()


@dataclass(frozen=True, slots=True)
class Column:
    """One declared column. Modifiers return a new column (declarations are immutable)."""

    kind: Kind
    is_primary_key: bool = False
    is_unique: bool = False
    is_tenant: bool = False
    is_nullable: bool = False
    default_value: Any = _NO_DEFAULT
    reference: Reference | None = None
    personal_data_kind: str | None = None
    is_sealed: bool = False
    is_searchable: bool = False

    # --- modifiers -------------------------------------------------------------------------

    def primary_key(self) -> Column:
        """This column is (part of) the primary key."""
        return replace(self, is_primary_key=True)

    def unique(self) -> Column:
        """A unique index on this column alone."""
        return replace(self, is_unique=True)

    def tenant(self) -> Column:
        """The tenant column: every statement on the entity is scoped to the ambient tenant."""
        return replace(self, is_tenant=True)

    def nullable(self) -> Column:
        """The column accepts ``None``."""
        return replace(self, is_nullable=True)

    def default(self, value: Any) -> Column:
        """A value filled in when an insert leaves the column out (checked at declaration)."""
        return replace(self, default_value=value)

    def references(self, target: Entity | str, *, on_delete: OnDelete = "restrict") -> Column:
        """A foreign key to ``target``'s (single-column) primary key."""
        if on_delete not in ("cascade", "restrict", "set null"):
            raise XError(
                "X_CONFIG_INVALID",
                f"references(on_delete={on_delete!r}): not one of 'cascade', 'restrict', "
                "'set null'",
                fix="uuid().references(users, on_delete='cascade')",
            )
        return replace(self, reference=Reference(target, on_delete))

    def personal_data(self, kind: str) -> Column:
        """Marks the column as personal data of ``kind`` (``'email'``, ``'name'``, ...)."""
        if not isinstance(kind, str) or not kind.strip():
            raise XError(
                "X_CONFIG_INVALID",
                f"personal_data(kind) needs a non-blank kind, got {kind!r}",
                fix="text().personal_data('email')",
            )
        return replace(self, personal_data_kind=kind)

    def sealed(self) -> Column:
        """Encrypted at rest (AES-GCM, the database's key ring); only ``text()`` may be sealed."""
        if self.kind != "text":
            raise XError(
                "X_CONFIG_INVALID",
                f"sealed(): only a text() column can be sealed, not {self.kind}()",
                fix="declare the column as text().sealed() and store its text form",
            )
        return replace(self, is_sealed=True)

    def searchable(self) -> Column:
        """The column feeds the entity's search document (``search_document_of``)."""
        if self.kind not in ("text", "jsonb"):
            raise XError(
                "X_CONFIG_INVALID",
                f"searchable(): only text() and jsonb() columns can be searchable, not "
                f"{self.kind}()",
                fix="text().searchable()",
            )
        return replace(self, is_searchable=True)

    # --- derived ---------------------------------------------------------------------------

    @property
    def has_default(self) -> bool:
        return self.default_value is not _NO_DEFAULT

    @property
    def sql_type(self) -> str:
        return "bytea" if self.is_sealed else SQL_TYPES[self.kind]

    @property
    def udt_name(self) -> str:
        return "bytea" if self.is_sealed else UDT_NAMES[self.kind]


def uuid() -> Column:
    """A ``uuid`` column (values: a UUID string or ``uuid.UUID``; read back as a lowercase str)."""
    return Column("uuid")


def text() -> Column:
    """A ``text`` column."""
    return Column("text")


def integer() -> Column:
    """An ``integer`` (32-bit) column."""
    return Column("integer")


def bigint() -> Column:
    """A ``bigint`` (64-bit) column."""
    return Column("bigint")


def numeric() -> Column:
    """A ``numeric`` column (read back as ``decimal.Decimal``)."""
    return Column("numeric")


def boolean() -> Column:
    """A ``boolean`` column."""
    return Column("boolean")


def timestamp() -> Column:
    """A ``timestamptz`` column (values: timezone-aware datetimes; read back in UTC)."""
    return Column("timestamp")


def jsonb() -> Column:
    """A ``jsonb`` column (values: JSON-able Python values)."""
    return Column("jsonb")
