"""Chunked data: what ``put`` takes, gathered or passed through."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from ultimat3.core import XError

from ._port import PutData

CHUNK_BYTES = 1_048_576
"""The chunk ``stream`` answers and streamed writes are cut into: 1 MiB."""


def _as_bytes(chunk: object) -> bytes:
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, bytearray | memoryview):
        return bytes(chunk)
    raise XError(
        "X_INVARIANT",
        f"put() got a chunk of type {type(chunk).__name__}; chunks must be bytes",
        fix="yield bytes (encode text first: text.encode('utf-8'))",
    )


async def chunks_of(data: PutData) -> AsyncIterator[bytes]:
    """``data`` as an async iterator of non-empty ``bytes`` chunks."""
    if isinstance(data, bytes | bytearray | memoryview):
        if len(data):
            yield bytes(data)
        return
    if not isinstance(data, AsyncIterable):
        raise XError(
            "X_INVARIANT",
            f"put() got data of type {type(data).__name__}",
            fix="pass bytes or an async iterable of bytes",
        )
    async for chunk in data:
        piece = _as_bytes(chunk)
        if piece:
            yield piece


async def collect(data: PutData) -> bytes:
    """``data`` whole (for stores that hold objects in memory)."""
    if isinstance(data, bytes):
        return data
    buf = bytearray()
    async for chunk in chunks_of(data):
        buf += chunk
    return bytes(buf)
