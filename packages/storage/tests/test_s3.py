"""s3(): its configuration refusals and what it says it is."""

from __future__ import annotations

import pytest

from ultimat3.core import XError
from ultimat3.storage import s3


def test_a_bucket_name_shorter_than_three_characters_is_refused() -> None:
    with pytest.raises(XError) as caught:
        s3("ab", endpoint="http://127.0.0.1:9")
    assert caught.value.code == "X_CONFIG_INVALID"
    assert "'ab'" in caught.value.message


def test_an_invalid_prefix_is_refused() -> None:
    with pytest.raises(XError) as caught:
        s3("bucket", prefix="../up", endpoint="http://127.0.0.1:9")
    assert caught.value.code == "X_STORAGE_KEY_INVALID"


async def test_the_store_names_its_bucket_and_prefix(s3_endpoint: str, s3_bucket: str) -> None:
    store = s3(
        s3_bucket,
        prefix="p/q",
        endpoint=s3_endpoint,
        region="us-east-1",
        access_key_id="test",
        secret_access_key="test",
    )
    assert s3_bucket in store.name and "p/q" in store.name
    await store.put("k", b"v")
    plain = s3(
        s3_bucket,
        endpoint=s3_endpoint,
        region="us-east-1",
        access_key_id="test",
        secret_access_key="test",
    )
    assert [i.key async for i in plain.list()] == ["p/q/k"]
