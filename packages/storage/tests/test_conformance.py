"""Every store of ultimat3.storage against the whole ObjectStore contract."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from ultimat3.storage import ObjectStore, disk, memory_store, s3
from ultimat3.storage.testing import MIB, ObjectStoreConformance


class TestMemoryStore(ObjectStoreConformance):
    large_object_bytes: ClassVar[int] = 64 * MIB
    max_rss_growth_bytes: ClassVar[int | None] = None  # it holds the object in this process

    async def make_store(self) -> ObjectStore:
        return memory_store()


class TestDiskStore(ObjectStoreConformance):
    @pytest.fixture(autouse=True)
    def _root(self, tmp_path: Path) -> None:
        self.root = tmp_path / "objects"

    async def make_store(self) -> ObjectStore:
        return disk(self.root)


class TestS3Store(ObjectStoreConformance):
    @pytest.fixture(autouse=True)
    def _bucket(self, s3_endpoint: str, s3_bucket: str) -> None:
        self.endpoint = s3_endpoint
        self.bucket = s3_bucket

    async def make_store(self) -> ObjectStore:
        return s3(
            self.bucket,
            endpoint=self.endpoint,
            region="us-east-1",
            access_key_id="test",
            secret_access_key="test",
        )


class TestS3StoreUnderAPrefix(TestS3Store):
    large_object_bytes: ClassVar[int] = 16 * MIB

    async def make_store(self) -> ObjectStore:
        return s3(
            self.bucket,
            prefix="tenant/a",
            endpoint=self.endpoint,
            region="us-east-1",
            access_key_id="test",
            secret_access_key="test",
        )
