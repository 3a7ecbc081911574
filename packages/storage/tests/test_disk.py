"""disk(): what only a folder can get wrong — symlinks out of the root, temp files, folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ultimat3.core import XError
from ultimat3.storage import disk


def _refused(exc: pytest.ExceptionInfo[XError], key: str) -> None:
    assert exc.value.code == "X_STORAGE_KEY_INVALID"
    assert key in exc.value.message


async def test_a_symlink_out_of_the_root_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "file-link").symlink_to(outside / "secret.txt")
    store = disk(root)
    for key in ("link/secret.txt", "link/new.txt", "file-link"):
        for call in (
            lambda k=key: store.stat(k),
            lambda k=key: store.get(k),
            lambda k=key: store.put(k, b"overwritten"),
            lambda k=key: store.delete(k),
        ):
            with pytest.raises(XError) as caught:
                await call()
            _refused(caught, key)
        with pytest.raises(XError) as streamed:
            async for _ in store.stream(key):
                pass
        _refused(streamed, key)
    assert (outside / "secret.txt").read_bytes() == b"secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert [info.key async for info in store.list()] == []


async def test_a_symlink_inside_the_root_is_followed(tmp_path: Path) -> None:
    store = disk(tmp_path)
    await store.put("real/a.txt", b"a")
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert await store.get("alias/a.txt") == b"a"


async def test_a_put_leaves_no_temp_file_and_the_temp_mark_is_not_a_key(tmp_path: Path) -> None:
    store = disk(tmp_path)
    await store.put("a/b.txt", b"1")
    await store.put("a/b.txt", b"2")
    assert sorted(os.listdir(tmp_path / "a")) == ["b.txt"]
    with pytest.raises(XError) as caught:
        await store.put("a/.~put-x", b"1")
    _refused(caught, "a/.~put-x")
    (tmp_path / "a" / ".~put-b.txt-stale").write_bytes(b"half")  # a crashed put's leftover
    assert [info.key async for info in store.list()] == ["a/b.txt"]


async def test_a_key_under_an_existing_object_is_refused_naming_it(tmp_path: Path) -> None:
    store = disk(tmp_path)
    await store.put("a", b"object")
    with pytest.raises(XError) as caught:
        await store.put("a/b", b"x")
    _refused(caught, "a/b")
    assert await store.get("a") == b"object"


async def test_a_folder_is_not_an_object(tmp_path: Path) -> None:
    store = disk(tmp_path)
    await store.put("folder/x", b"x")
    with pytest.raises(XError) as caught:
        await store.get("folder")
    assert caught.value.code == "X_STORAGE_NOT_FOUND"
    await store.delete("folder")  # not an error, and the folder's objects stay
    assert await store.get("folder/x") == b"x"


async def test_the_root_is_created_on_the_first_write(tmp_path: Path) -> None:
    store = disk(tmp_path / "new" / "root")
    assert [info.key async for info in store.list()] == []
    await store.put("x", b"1")
    assert (tmp_path / "new" / "root" / "x").read_bytes() == b"1"
    assert "new" in store.name
