"""``ObjectStoreConformance``: the ``ObjectStore`` contract as a pytest base class.

    class TestMyStore(ObjectStoreConformance):
        async def make_store(self) -> ObjectStore:
            return my_store(...)

Every store of this package passes it (``disk``, ``memory_store``, ``s3`` against an
S3-compatible server on loopback). Needs pytest with an asyncio plugin in auto mode
(``pip install "ultimat3-storage[testing]"``).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest

from ultimat3.core import XError

from ._port import ObjectInfo, ObjectStore
from ._rss import RssPeak

MIB = 1_048_576

INVALID_KEYS: tuple[str, ...] = (
    "",
    "/abs",
    "/",
    "../x",
    "a/../../b",
    "a/..",
    "./a",
    "a/./b",
    "a//b",
    "a/",
    "a\\b",
    "..\\x",
    "a\x00b",
    "a\nb",
    "a\rb",
    "a\tb",
    "a\x1bb",
    "a\x7fb",
    "a\x85b",
    "x" * 1025,
)
"""Keys every store refuses with ``X_STORAGE_KEY_INVALID``, touching nothing."""

LISTED_KEYS: tuple[str, ...] = ("b.txt", "a/2", "a/10", "a/1", "ab", "a-b", "z/y/x", "é/1", "Z")


def pattern(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic, non-repeating-looking bytes."""
    out = bytearray()
    block = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{block}".encode()).digest()
        block += 1
    return bytes(out[:size])


async def generated(size: int, chunk: int = MIB, seed: int = 0) -> AsyncIterator[bytes]:
    """``size`` bytes as chunks made on the fly (never the whole in memory)."""
    base = pattern(chunk, seed)
    sent = 0
    n = 0
    while sent < size:
        piece = base[: min(chunk, size - sent)]
        head = n.to_bytes(8, "big")  # every chunk differs, so a misplaced one shows
        piece = head[: len(piece)] + piece[len(head) :]
        sent += len(piece)
        n += 1
        yield piece
        await asyncio.sleep(0)


async def digest_of(chunks: AsyncIterator[bytes]) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    async for chunk in chunks:
        h.update(chunk)
        size += len(chunk)
    return size, h.hexdigest()


class _Boom(Exception):
    pass


class ObjectStoreConformance:
    """The ``ObjectStore`` contract. Subclasses implement ``make_store`` (a fresh, empty store
    per test) and may override ``close_store`` and the size knobs below."""

    large_object_bytes: ClassVar[int] = 200 * MIB
    """The object the streaming test puts and reads back in chunks."""
    max_rss_growth_bytes: ClassVar[int | None] = 64 * MIB
    """The RSS growth the streaming test allows; ``None`` for a store that holds objects in this
    process (the memory store), where it checks the data only."""
    atomic_object_bytes: ClassVar[int] = 4 * MIB
    atomic_rounds: ClassVar[int] = 12

    async def make_store(self) -> ObjectStore:
        raise NotImplementedError("implement make_store() -> a fresh, empty ObjectStore")

    async def close_store(self, store: ObjectStore) -> None:
        return None

    @pytest.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        made = await self.make_store()
        try:
            yield made
        finally:
            await self.close_store(made)

    async def keys_of(self, store: ObjectStore, prefix: str = "") -> list[str]:
        return [info.key async for info in store.list(prefix)]

    # --- put, get, stat -----------------------------------------------------------------------

    async def test_put_then_get_answers_the_bytes_and_stat_their_size(
        self, store: ObjectStore
    ) -> None:
        data = pattern(10_000)
        info = await store.put("docs/one.bin", data, content_type="application/octet-stream")
        assert isinstance(info, ObjectInfo)
        assert (info.key, info.size) == ("docs/one.bin", len(data))
        assert await store.get("docs/one.bin") == data
        stat = await store.stat("docs/one.bin")
        assert (stat.key, stat.size, stat.etag) == ("docs/one.bin", len(data), info.etag)
        assert stat.modified.tzinfo is not None

    async def test_an_overwrite_replaces_the_object_and_changes_its_etag(
        self, store: ObjectStore
    ) -> None:
        first = await store.put("k", b"first version")
        second = await store.put("k", bytearray(b"second"))
        assert await store.get("k") == b"second"
        assert second.size == 6
        assert second.etag != first.etag

    async def test_an_empty_object_and_a_memoryview_round_trip(self, store: ObjectStore) -> None:
        await store.put("empty", b"")
        assert await store.get("empty") == b""
        assert (await store.stat("empty")).size == 0
        await store.put("view", memoryview(b"viewed"))
        assert await store.get("view") == b"viewed"
        assert [c async for c in store.stream("empty")] in ([], [b""])

    async def test_a_streamed_put_joins_its_chunks_in_order(self, store: ObjectStore) -> None:
        async def parts() -> AsyncIterator[bytes]:
            for i in range(5):
                yield f"part {i};".encode()

        info = await store.put("joined.txt", parts(), content_type="text/plain")
        expected = b"".join(f"part {i};".encode() for i in range(5))
        assert info.size == len(expected)
        assert await store.get("joined.txt") == expected

    # --- missing objects ----------------------------------------------------------------------

    async def test_stat_get_and_stream_of_a_missing_key_are_not_found_naming_it(
        self, store: ObjectStore
    ) -> None:
        for call in (
            lambda: store.stat("missing/one"),
            lambda: store.get("missing/one"),
            lambda: store.get("missing/one", range=(0, 10)),
            lambda: store.get("missing/one", range=(3, 3)),
        ):
            with pytest.raises(XError) as caught:
                await call()
            assert caught.value.code == "X_STORAGE_NOT_FOUND"
            assert "missing/one" in caught.value.message
        with pytest.raises(XError) as streamed:
            async for _ in store.stream("missing/one"):
                pass
        assert streamed.value.code == "X_STORAGE_NOT_FOUND"

    async def test_delete_removes_and_deleting_a_missing_key_is_no_error(
        self, store: ObjectStore
    ) -> None:
        await store.put("gone/soon", b"x")
        await store.delete("gone/soon")
        await store.delete("gone/soon")
        await store.delete("never/was")
        with pytest.raises(XError) as caught:
            await store.get("gone/soon")
        assert caught.value.code == "X_STORAGE_NOT_FOUND"
        assert await self.keys_of(store) == []

    # --- ranges -------------------------------------------------------------------------------

    async def test_every_range_is_half_open_and_clamped_at_the_end(
        self, store: ObjectStore
    ) -> None:
        data = b"0123456789"
        await store.put("r", data)
        for start in range(14):
            for end in range(start, 16):
                got = await store.get("r", range=(start, end))
                assert got == data[start:end], (start, end)
        for start, end in ((0, 4), (4, 10), (7, 30), (10, 12), (12, 20), (0, 10)):
            streamed = b"".join([c async for c in store.stream("r", range=(start, end))])
            assert streamed == data[start:end], (start, end)

    async def test_a_range_that_is_not_a_start_end_pair_is_refused(
        self, store: ObjectStore
    ) -> None:
        await store.put("r", b"abc")
        for bad in ((2, 1), (-1, 2), (0,), [0, 1], (0.0, 1)):
            with pytest.raises(XError) as caught:
                await store.get("r", range=bad)  # type: ignore[arg-type]
            assert caught.value.code == "X_INVARIANT"
            assert "r" in caught.value.message

    # --- listing ------------------------------------------------------------------------------

    async def test_list_answers_keys_in_order_under_a_plain_string_prefix(
        self, store: ObjectStore
    ) -> None:
        for i, key in enumerate(LISTED_KEYS):
            await store.put(key, str(i).encode())
        assert await self.keys_of(store) == sorted(LISTED_KEYS)
        assert await self.keys_of(store, "a") == ["a-b", "a/1", "a/10", "a/2", "ab"]
        assert await self.keys_of(store, "a/") == ["a/1", "a/10", "a/2"]
        assert await self.keys_of(store, "a/1") == ["a/1", "a/10"]
        assert await self.keys_of(store, "z/y/") == ["z/y/x"]
        assert await self.keys_of(store, "é") == ["é/1"]
        assert await self.keys_of(store, "nothing/") == []
        sizes = {info.key: info.size async for info in store.list("")}
        assert sizes == {key: len(str(i)) for i, key in enumerate(LISTED_KEYS)}

    # --- refused keys -------------------------------------------------------------------------

    async def test_every_invalid_key_is_refused_naming_it_and_nothing_is_touched(
        self, store: ObjectStore
    ) -> None:
        await store.put("kept", b"kept")
        for key in INVALID_KEYS:
            for what, call in (
                ("stat", lambda k=key: store.stat(k)),
                ("get", lambda k=key: store.get(k)),
                ("put", lambda k=key: store.put(k, b"overwritten")),
                ("delete", lambda k=key: store.delete(k)),
            ):
                with pytest.raises(XError) as caught:
                    await call()
                assert caught.value.code == "X_STORAGE_KEY_INVALID", (what, key)
                assert repr(key)[1:-1][:40] in caught.value.message, (what, key)
            with pytest.raises(XError) as streamed:
                async for _ in store.stream(key):
                    pass
            assert streamed.value.code == "X_STORAGE_KEY_INVALID", key
        for prefix in ("/abs", "../", "a//", "a\\", "a\x00"):
            with pytest.raises(XError) as listed:
                async for _ in store.list(prefix):
                    pass
            assert listed.value.code == "X_STORAGE_KEY_INVALID", prefix
        with pytest.raises(XError) as typed:
            await store.get(b"kept")  # type: ignore[arg-type]
        assert typed.value.code == "X_STORAGE_KEY_INVALID"
        assert await self.keys_of(store) == ["kept"]
        assert await store.get("kept") == b"kept"

    # --- atomic writes ------------------------------------------------------------------------

    async def test_a_concurrent_reader_sees_the_old_object_or_the_whole_new_one(
        self, store: ObjectStore
    ) -> None:
        size = self.atomic_object_bytes
        versions = [bytes([65 + i]) * size for i in range(3)]
        await store.put("atomic", versions[0])
        seen: set[bytes] = set()
        done = asyncio.Event()

        async def chunked(data: bytes) -> AsyncIterator[bytes]:
            for at in range(0, len(data), 256 * 1024):
                yield data[at : at + 256 * 1024]
                await asyncio.sleep(0)

        async def writer() -> None:
            try:
                for i in range(self.atomic_rounds):
                    data = versions[(i + 1) % 3]
                    await store.put("atomic", chunked(data) if i % 2 else data)
            finally:
                done.set()

        async def reader() -> None:
            while not done.is_set():
                got = await store.get("atomic")
                assert len(got) == size, f"a reader saw {len(got)} of {size} bytes"
                assert got.count(got[:1]) == size, "a reader saw a mixed object"
                seen.add(got[:1])
                await asyncio.sleep(0)

        await asyncio.gather(writer(), reader(), reader())
        assert seen, "the readers read nothing"
        assert await store.get("atomic") == versions[self.atomic_rounds % 3]

    async def test_a_put_whose_data_fails_midway_leaves_the_old_object(
        self, store: ObjectStore
    ) -> None:
        await store.put("folder/kept", b"the old object")

        async def failing() -> AsyncIterator[bytes]:
            yield b"x" * MIB
            yield b"y" * MIB
            raise _Boom("the source failed midway")

        with pytest.raises(_Boom):
            await store.put("folder/kept", failing())
        with pytest.raises(_Boom):
            await store.put("folder/new", failing())
        assert await store.get("folder/kept") == b"the old object"
        assert await self.keys_of(store) == ["folder/kept"]

    # --- large objects ------------------------------------------------------------------------

    async def test_a_large_object_streams_in_and_out_with_memory_bounded(
        self, store: ObjectStore
    ) -> None:
        size = self.large_object_bytes
        expected = await digest_of(generated(size))
        with RssPeak() as put_peak:
            info = await store.put("large/object.bin", generated(size))
        assert info.size == size
        with RssPeak() as get_peak:
            streamed = await digest_of(store.stream("large/object.bin"))
        assert streamed == expected
        last = b""
        async for chunk in generated(size):
            last = (last + chunk)[-10:]
        assert await store.get("large/object.bin", range=(size - 10, size + 10)) == last
        bound = self.max_rss_growth_bytes
        if bound is not None:
            assert put_peak.growth <= bound, f"put grew RSS {put_peak.growth / MIB:.0f} MiB"
            assert get_peak.growth <= bound, f"stream grew RSS {get_peak.growth / MIB:.0f} MiB"
