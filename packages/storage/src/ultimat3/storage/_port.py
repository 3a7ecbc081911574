"""The ``ObjectStore`` port and the ``ObjectInfo`` it answers."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from ultimat3.core import Port

ByteRange = tuple[int, int]
"""A half-open byte range ``(start, end)``: ``start`` included, ``end`` excluded."""

PutData = bytes | bytearray | memoryview | AsyncIterable[bytes]
"""What ``put`` takes: the whole object, or an async iterable of its chunks (streamed)."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored object: its key, size in bytes, an opaque ``etag`` that changes whenever the
    object does, and when it was last written."""

    key: str
    size: int
    etag: str
    modified: datetime


@runtime_checkable
class ObjectStore(Protocol):
    """Object storage: ``/``-separated keys, whole-object atomic writes, ranged reads.

    Every method checks its key first (``X_STORAGE_KEY_INVALID``, nothing touched); ``stat``,
    ``get`` and ``stream`` of a missing key are ``X_STORAGE_NOT_FOUND``."""

    name: str
    """What the store is, for messages: ``disk('/srv/imports')``, ``memory_store()``, ..."""

    async def stat(self, key: str) -> ObjectInfo:
        """The object's size, etag and modification time."""
        ...

    async def get(self, key: str, *, range: ByteRange | None = None) -> bytes:
        """The object's bytes, or the half-open ``range`` of them (an end past the size is
        clamped; a start at or past the size answers ``b''``)."""
        ...

    def stream(self, key: str, *, range: ByteRange | None = None) -> AsyncIterator[bytes]:
        """The object's bytes (or ``range`` of them) in chunks, never the whole in memory."""
        ...

    async def put(self, key: str, data: PutData, *, content_type: str | None = None) -> ObjectInfo:
        """Write the object whole: a reader sees the old object or the whole new one, never a
        part; a put whose data fails midway leaves the old object as it was."""
        ...

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a plain string prefix), in key order."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error."""
        ...


OBJECT_STORE: Port[ObjectStore] = Port(
    "object_store",
    fix="install_adapter(OBJECT_STORE, disk('/srv/objects')) or pass the store explicitly",
)
"""The ambient object store port, for apps that install one store for everything."""


def check_range(range: object, key: str) -> ByteRange | None:
    """``range`` as a ``(start, end)`` pair of ints with ``0 <= start <= end``; ``X_INVARIANT``
    naming the key otherwise."""
    from ultimat3.core import XError

    if range is None:
        return None
    ok = (
        isinstance(range, tuple)
        and len(range) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in range)
        and 0 <= range[0] <= range[1]
    )
    if not ok:
        raise XError(
            "X_INVARIANT",
            f"byte range {range!r} for {key!r} is not a (start, end) pair with 0 <= start <= end",
            fix="pass range=(start, end), a half-open range of byte offsets",
            meta={"key": key},
        )
    return range  # type: ignore[return-value]


def clamp(range: ByteRange | None, size: int) -> tuple[int, int]:
    """``range`` (or the whole object) clamped to ``size``."""
    if range is None:
        return 0, size
    start, end = range
    return min(start, size), min(end, size)
