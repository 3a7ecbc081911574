"""ultimat3.storage: the ``ObjectStore`` port and its stores.

``disk(root)`` (a folder; atomic writes through a temp file and ``os.replace``),
``memory_store()`` (tests, development) and ``s3(bucket, ...)`` (S3 or any S3-compatible server,
over obstore: ``pip install "ultimat3-storage[s3]"``). Keys are ``/``-separated relative paths,
checked before anything is touched (``X_STORAGE_KEY_INVALID``); a missing object is
``X_STORAGE_NOT_FOUND``. ``ultimat3.storage.testing.ObjectStoreConformance`` is the contract every
store passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._chunks import CHUNK_BYTES
from ._disk import DiskStore, disk
from ._keys import MAX_KEY_BYTES, check_key, check_prefix
from ._memory import MemoryStore, memory_store
from ._port import OBJECT_STORE, ByteRange, ObjectInfo, ObjectStore, PutData

if TYPE_CHECKING:
    from ._s3 import S3ObjectStore, s3


def __getattr__(name: str) -> Any:
    """``s3`` and ``S3ObjectStore`` load on first use (obstore is the ``[s3]`` extra)."""
    if name in ("s3", "S3ObjectStore"):
        from . import _s3

        value = getattr(_s3, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHUNK_BYTES",
    "MAX_KEY_BYTES",
    "OBJECT_STORE",
    "ByteRange",
    "DiskStore",
    "MemoryStore",
    "ObjectInfo",
    "ObjectStore",
    "PutData",
    "S3ObjectStore",
    "check_key",
    "check_prefix",
    "disk",
    "memory_store",
    "s3",
]
