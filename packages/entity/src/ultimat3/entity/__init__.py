"""ultimat3.entity: declared tables over psycopg 3 — not an ORM. Declarations, migrate(),
transactions that jobs join, the table handle (insert, upsert_all, where, series), tenancy,
sealed columns, views, partitions, search documents and the memory database."""

from ._columns import (
    Column,
    Reference,
    bigint,
    boolean,
    integer,
    jsonb,
    numeric,
    text,
    timestamp,
    uuid,
)
from ._database import Database, database
from ._entity import SOFT_DELETE_COLUMN, Entity, Index, PartitionBy, View, entity
from ._handle import UPSERT_CHUNK, Query, Table
from ._memory import MemoryDatabase, memory_database
from ._partitions import PARTITION_LOCK_TIMEOUT_MS, maintain_partitions
from ._pg_search import PostgresSearchIndex, postgres_search_index
from ._sealing import KeyRing, Sealed, exportable, redact
from ._search import (
    SEARCH_INDEX,
    MemorySearchIndex,
    SearchDocument,
    SearchHit,
    SearchIndex,
    memory_search_index,
    search_document_of,
)
from ._series import SERIES_UNITS, SeriesPoint

__all__ = [
    "PARTITION_LOCK_TIMEOUT_MS",
    "SEARCH_INDEX",
    "SERIES_UNITS",
    "SOFT_DELETE_COLUMN",
    "UPSERT_CHUNK",
    "Column",
    "Database",
    "Entity",
    "Index",
    "KeyRing",
    "MemoryDatabase",
    "MemorySearchIndex",
    "PartitionBy",
    "PostgresSearchIndex",
    "Query",
    "Reference",
    "Sealed",
    "SearchDocument",
    "SearchHit",
    "SearchIndex",
    "SeriesPoint",
    "Table",
    "View",
    "bigint",
    "boolean",
    "database",
    "entity",
    "exportable",
    "integer",
    "jsonb",
    "maintain_partitions",
    "memory_database",
    "memory_search_index",
    "numeric",
    "postgres_search_index",
    "redact",
    "search_document_of",
    "text",
    "timestamp",
    "uuid",
]
