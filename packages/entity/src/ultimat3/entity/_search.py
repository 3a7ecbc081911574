"""Search documents and the ``SearchIndex`` port: ``search_document_of(entity, row)`` over the
``.searchable()`` columns; every document carries a version, and an index never lets a stale
write (an upsert or a removal with a lower version) overwrite a newer one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ultimat3.core import Port, XError, current_clock

from ._entity import Entity


@dataclass(frozen=True, slots=True)
class SearchDocument:
    """One row's searchable text: ``id`` is ``"<entity>:<primary key>"``."""

    id: str
    entity: str
    tenant: str | None
    text: str
    version: int


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A match: the document id and its rank (higher is better)."""

    id: str
    rank: float


DocList = list[SearchDocument]
HitList = list[SearchHit]


def _flatten(value: Any) -> Iterable[str]:
    if value is None:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _flatten(v)
    elif not isinstance(value, bool):
        yield str(value)


def search_document_of(
    ent: Entity, row: Mapping[str, Any], *, version: int | None = None
) -> SearchDocument:
    """The document of ``row``: its searchable columns' text (JSON flattened to its strings and
    numbers), its tenant, and ``version`` (default: the clock's epoch milliseconds)."""
    if not ent.searchable_columns:
        raise XError(
            "X_INVARIANT",
            f"search_document_of: {ent.name!r} has no .searchable() column",
            fix="mark the columns to index: text().searchable()",
            meta={"entity": ent.name},
        )
    if not ent.primary_key:
        raise XError(
            "X_INVARIANT",
            f"search_document_of: {ent.name!r} has no primary key to name its documents",
            fix="declare a primary key",
            meta={"entity": ent.name},
        )
    missing = [c for c in ent.primary_key if row.get(c) is None]
    if missing:
        raise XError(
            "X_INVARIANT",
            f"search_document_of: the {ent.name} row lacks its key {missing}",
            fix="pass a row as read from the table",
            meta={"entity": ent.name},
        )
    key = ":".join(str(row[c]) for c in ent.primary_key)
    parts = [p for c in ent.searchable_columns for p in _flatten(row.get(c))]
    tenant = row.get(ent.tenant_column) if ent.tenant_column else None
    return SearchDocument(
        id=f"{ent.name}:{key}",
        entity=ent.name,
        tenant=None if tenant is None else str(tenant),
        text="\n".join(parts),
        version=current_clock().now_ms() if version is None else version,
    )


@runtime_checkable
class SearchIndex(Protocol):
    """A search index. Writes are versioned: a document (or a removal) with a version not above
    the stored one changes nothing."""

    async def upsert(self, docs: Sequence[SearchDocument]) -> int:
        """Store each document unless a newer version is stored; answer how many were stored."""
        ...

    async def remove(self, ids: Sequence[str], version: int) -> int:
        """Tombstone ``ids`` at ``version`` (a later upsert with a higher version revives one)."""
        ...

    async def list(
        self, *, tenant: str | None = None, after: str | None = None, limit: int = 500
    ) -> DocList:
        """Live documents in id order, after ``after``, of ``tenant`` when given."""
        ...

    async def search(self, query: str, *, tenant: str | None = None, limit: int = 20) -> HitList:
        """The best matches of ``query`` (words, all required)."""
        ...


SEARCH_INDEX: Port[SearchIndex] = Port(
    "search_index",
    fix="install_adapter(SEARCH_INDEX, postgres_search_index(db)) (memory_search_index() in a "
    "test)",
)


class MemorySearchIndex:
    """The in-memory index (tests): word matching, the same versioning."""

    def __init__(self) -> None:
        self._docs: dict[str, tuple[SearchDocument, bool]] = {}  # id -> (doc, removed)

    async def upsert(self, docs: Sequence[SearchDocument]) -> int:
        n = 0
        for doc in docs:
            held = self._docs.get(doc.id)
            if held is None or held[0].version < doc.version:
                self._docs[doc.id] = (doc, False)
                n += 1
        return n

    async def remove(self, ids: Sequence[str], version: int) -> int:
        n = 0
        for i in ids:
            held = self._docs.get(i)
            if held is None or held[0].version < version:
                entity = i.split(":", 1)[0]
                base = held[0] if held else SearchDocument(i, entity, None, "", version)
                self._docs[i] = (
                    SearchDocument(base.id, base.entity, base.tenant, "", version),
                    True,
                )
                n += 1
        return n

    async def list(
        self, *, tenant: str | None = None, after: str | None = None, limit: int = 500
    ) -> DocList:
        live = [d for _, (d, removed) in sorted(self._docs.items()) if not removed]
        if tenant is not None:
            live = [d for d in live if d.tenant == tenant]
        if after is not None:
            live = [d for d in live if d.id > after]
        return live[:limit]

    async def search(self, query: str, *, tenant: str | None = None, limit: int = 20) -> HitList:
        words = [w.lower() for w in query.split() if w]
        hits = []
        for doc in await self.list(tenant=tenant, limit=10**9):
            text = doc.text.lower().split()
            if words and all(w in text for w in words):
                hits.append(SearchHit(doc.id, float(sum(text.count(w) for w in words))))
        hits.sort(key=lambda h: (-h.rank, h.id))
        return hits[:limit]


def memory_search_index() -> MemorySearchIndex:
    """A fresh in-memory search index."""
    return MemorySearchIndex()
