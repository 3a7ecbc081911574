"""``memory_store()``: objects in a dict, for tests and development."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from ._chunks import CHUNK_BYTES, collect
from ._keys import check_key, check_prefix, not_found
from ._port import ByteRange, ObjectInfo, PutData, check_range, clamp


class MemoryStore:
    """An ``ObjectStore`` over a dict: each put swaps in a whole new ``bytes`` object, so a
    reader holds the old object or the new one. Nothing survives the process."""

    name = "memory_store()"

    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, ObjectInfo]] = {}
        self._writes = 0

    async def stat(self, key: str) -> ObjectInfo:
        return self._entry(check_key(key))[1]

    async def get(self, key: str, *, range: ByteRange | None = None) -> bytes:
        data = self._entry(check_key(key))[0]
        start, end = clamp(check_range(range, key), len(data))
        return data if (start, end) == (0, len(data)) else data[start:end]

    async def stream(self, key: str, *, range: ByteRange | None = None) -> AsyncIterator[bytes]:
        data = self._entry(check_key(key))[0]
        start, end = clamp(check_range(range, key), len(data))
        view = memoryview(data)
        for at in range_of(start, end):
            yield bytes(view[at : min(at + CHUNK_BYTES, end)])
            await asyncio.sleep(0)

    async def put(self, key: str, data: PutData, *, content_type: str | None = None) -> ObjectInfo:
        check_key(key)
        body = await collect(data)  # a failing iterable raises here: the old object stays
        self._writes += 1
        etag = f"{hashlib.md5(body, usedforsecurity=False).hexdigest()}-{self._writes}"
        info = ObjectInfo(key, len(body), etag, datetime.now(UTC))
        self._objects[key] = (body, info)
        return info

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        check_prefix(prefix)
        for key in sorted(k for k in self._objects if k.startswith(prefix)):
            entry = self._objects.get(key)
            if entry is not None:
                yield entry[1]

    async def delete(self, key: str) -> None:
        self._objects.pop(check_key(key), None)

    def _entry(self, key: str) -> tuple[bytes, ObjectInfo]:
        entry = self._objects.get(key)
        if entry is None:
            raise not_found(key, self.name)
        return entry


def range_of(start: int, end: int) -> range:
    return range(start, end, CHUNK_BYTES)


def memory_store() -> MemoryStore:
    """An empty in-memory ``ObjectStore``."""
    return MemoryStore()
