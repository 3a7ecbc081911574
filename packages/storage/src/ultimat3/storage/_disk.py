"""``disk(root)``: objects as files under one folder.

A put writes a temp file beside the target (same folder, so the same filesystem), fsyncs it and
``os.replace``s it over the target: a reader opens the old file or the whole new one. Keys are
checked as strings first, then the resolved path must stay inside the root, so a symlink that
points out of it is ``X_STORAGE_KEY_INVALID`` before anything is read or written.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from ultimat3.core import XError

from ._chunks import CHUNK_BYTES, chunks_of
from ._keys import check_key, check_prefix, not_found
from ._port import ByteRange, ObjectInfo, PutData, check_range, clamp

TEMP_MARK = ".~put-"
"""Temp files of puts in flight start with this; ``list`` never shows them."""


class DiskStore:
    """An ``ObjectStore`` over a folder (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.name = f"disk({str(self.root)!r})"

    # --- paths --------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        check_key(key)
        if any(part.startswith(TEMP_MARK) for part in key.split("/")):
            raise XError(
                "X_STORAGE_KEY_INVALID",
                f"object key {key!r} is refused: a segment starts with {TEMP_MARK!r}, the "
                "disk store's mark for writes in flight",
                fix=f"rename the key so no segment starts with {TEMP_MARK!r}",
                meta={"key": key},
            )
        root = os.path.realpath(self.root)
        resolved = os.path.realpath(os.path.join(root, *key.split("/")))
        if not resolved.startswith(root + os.sep):
            raise XError(
                "X_STORAGE_KEY_INVALID",
                f"object key {key!r} resolves outside {self.name} (through a symlink)",
                fix="keep every object inside the store's root; remove the symlink or use a "
                "store rooted where the link points",
                meta={"key": key},
            )
        return Path(resolved)

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            key,
            st.st_size,
            f"{st.st_mtime_ns:x}-{st.st_size:x}-{st.st_ino:x}",
            datetime.fromtimestamp(st.st_mtime, UTC),
        )

    def _stat(self, key: str, path: Path) -> os.stat_result:
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise not_found(key, self.name) from None
        if not path.is_file():
            raise not_found(key, self.name)
        return st

    # --- the port -----------------------------------------------------------------------------

    async def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        return self._info(key, await asyncio.to_thread(self._stat, key, path))

    async def get(self, key: str, *, range: ByteRange | None = None) -> bytes:
        path = self._path(key)
        check_range(range, key)
        return await asyncio.to_thread(self._read, key, path, range)

    def _read(self, key: str, path: Path, byte_range: ByteRange | None) -> bytes:
        try:
            f = path.open("rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise not_found(key, self.name) from None
        with f:
            start, end = clamp(byte_range, os.fstat(f.fileno()).st_size)
            f.seek(start)
            return f.read(end - start)

    async def stream(self, key: str, *, range: ByteRange | None = None) -> AsyncIterator[bytes]:
        path = self._path(key)
        check_range(range, key)
        try:
            f = await asyncio.to_thread(path.open, "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise not_found(key, self.name) from None
        try:
            start, end = clamp(range, os.fstat(f.fileno()).st_size)
            f.seek(start)
            at = start
            while at < end:
                chunk = await asyncio.to_thread(f.read, min(CHUNK_BYTES, end - at))
                if not chunk:
                    break
                at += len(chunk)
                yield chunk
        finally:
            f.close()

    async def put(self, key: str, data: PutData, *, content_type: str | None = None) -> ObjectInfo:
        path = self._path(key)
        await asyncio.to_thread(self._mkdirs, key, path.parent)
        temp = path.parent / f"{TEMP_MARK}{path.name[:64]}-{uuid.uuid4().hex}"
        f = await asyncio.to_thread(temp.open, "xb")
        try:
            try:
                async for chunk in chunks_of(data):
                    await asyncio.to_thread(f.write, chunk)
                await asyncio.to_thread(_flush, f)
            finally:
                f.close()
            await asyncio.to_thread(os.replace, temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        return self._info(key, await asyncio.to_thread(path.stat))

    def _mkdirs(self, key: str, folder: Path) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise XError(
                "X_STORAGE_KEY_INVALID",
                f"object key {key!r} cannot be written in {self.name}: a segment of it is "
                "already an object",
                fix="on disk a key cannot be both an object and a folder ('a' and 'a/b'); "
                "pick another key",
                meta={"key": key},
            ) from None

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        check_prefix(prefix)
        for key, st in await asyncio.to_thread(self._walk, prefix):
            yield self._info(key, st)

    def _walk(self, prefix: str) -> builtins.list[tuple[str, os.stat_result]]:
        root = os.path.realpath(self.root)
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = os.path.join(root, *base.split("/")) if base else root
        found: builtins.list[tuple[str, os.stat_result]] = []
        if not os.path.isdir(start) or not os.path.realpath(start).startswith(root):
            return found
        for folder, dirs, files in os.walk(start):  # never follows symlinked folders
            rel = os.path.relpath(folder, root)
            stem = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            dirs[:] = [d for d in dirs if _may_hold(stem + d + "/", prefix)]
            for name in files:
                key = stem + name
                if name.startswith(TEMP_MARK) or not key.startswith(prefix):
                    continue
                full = os.path.join(folder, name)
                if os.path.islink(full) and not os.path.realpath(full).startswith(root + os.sep):
                    continue  # a link out of the root is not an object of this store
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(full)
                    if os.path.isfile(full):
                        found.append((key, st))
        found.sort(key=lambda item: item[0])
        return found

    async def delete(self, key: str) -> None:
        path = self._path(key)
        await asyncio.to_thread(self._unlink, path)

    def _unlink(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
            if path.is_file():
                path.unlink()


def _may_hold(folder: str, prefix: str) -> bool:
    """Whether keys under ``folder`` (ending with '/') can start with ``prefix``."""
    return folder.startswith(prefix) or prefix.startswith(folder)


def _flush(f: object) -> None:
    f.flush()  # type: ignore[attr-defined]
    os.fsync(f.fileno())  # type: ignore[attr-defined]


def disk(root: str | os.PathLike[str] = "objects") -> DiskStore:
    """An ``ObjectStore`` over the folder ``root`` (relative to the working directory unless
    absolute); the folder is created on the first write."""
    return DiskStore(root)
