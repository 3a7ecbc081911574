"""``s3(bucket, ...)``: an ``ObjectStore`` over S3 or any S3-compatible server, through obstore.

obstore (the Rust ``object_store`` crate behind a Python API) signs the requests, retries the
transient failures, and streams multipart uploads; this module maps the port onto it: keys are
checked first, a missing object is ``X_STORAGE_NOT_FOUND``, a range past the end is clamped,
and ``list(prefix)`` is a plain string prefix (obstore's own prefix is whole path segments).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ultimat3.core import XError

from ._chunks import CHUNK_BYTES, chunks_of
from ._keys import check_key, check_prefix, not_found
from ._port import ByteRange, ObjectInfo, PutData, check_range

if TYPE_CHECKING:
    from obstore.store import S3Store

MULTIPART_CHUNK_BYTES = 8 * 1_048_576
"""Part size of a streamed (multipart) upload."""


def _obstore() -> Any:
    try:
        import obstore
        import obstore.store
    except ImportError:  # pragma: no cover - exercised by the isolation check
        raise XError(
            "X_CONFIG_INVALID",
            "s3() needs obstore, which is not installed",
            fix='pip install "ultimat3-storage[s3]"',
        ) from None
    return obstore


class S3ObjectStore:
    """An ``ObjectStore`` over one bucket (and optional key prefix)."""

    def __init__(self, store: S3Store, *, bucket: str, prefix: str) -> None:
        self._store = store
        self._ob = _obstore()
        self.bucket = bucket
        self.prefix = prefix
        self.name = f"s3({bucket!r}" + (f", prefix={prefix!r}" if prefix else "") + ")"

    def _info(self, meta: Mapping[str, Any]) -> ObjectInfo:
        modified = meta.get("last_modified")
        if not isinstance(modified, datetime):
            modified = datetime.now(UTC)
        return ObjectInfo(
            str(meta["path"]), int(meta["size"]), str(meta.get("e_tag") or ""), modified
        )

    async def stat(self, key: str) -> ObjectInfo:
        check_key(key)
        try:
            meta = await self._ob.head_async(self._store, key)
        except FileNotFoundError:
            raise not_found(key, self.name) from None
        return self._info(meta)

    async def get(self, key: str, *, range: ByteRange | None = None) -> bytes:
        check_key(key)
        span = check_range(range, key)
        if span is not None and span[0] == span[1]:
            await self.stat(key)  # an empty range of a missing object is still not found
            return b""
        try:
            result = await self._ob.get_async(
                self._store, key, options={"range": span} if span is not None else None
            )
            return bytes(await result.bytes_async())
        except FileNotFoundError:
            raise not_found(key, self.name) from None
        except Exception:
            if span is None:
                raise
            info = await self.stat(key)
            if span[0] >= info.size:  # S3 answers 416 for a start at or past the end
                return b""
            raise

    async def stream(self, key: str, *, range: ByteRange | None = None) -> AsyncIterator[bytes]:
        check_key(key)
        span = check_range(range, key)
        if span is not None:
            info = await self.stat(key)
            if span[0] >= min(span[1], info.size):
                return
        try:
            result = await self._ob.get_async(
                self._store, key, options={"range": span} if span is not None else None
            )
        except FileNotFoundError:
            raise not_found(key, self.name) from None
        async for chunk in result.stream(min_chunk_size=CHUNK_BYTES):
            yield bytes(chunk)

    async def put(self, key: str, data: PutData, *, content_type: str | None = None) -> ObjectInfo:
        check_key(key)
        attributes = {"Content-Type": content_type} if content_type else None
        if isinstance(data, bytes | bytearray | memoryview):
            await self._ob.put_async(self._store, key, bytes(data), attributes=attributes)
        else:
            # a multipart upload: S3 shows the object only once it completes, and obstore
            # aborts the upload when the data raises, so the old object stays
            await self._ob.put_async(
                self._store,
                key,
                chunks_of(data),
                attributes=attributes,
                chunk_size=MULTIPART_CHUNK_BYTES,
                max_concurrency=4,
            )
        return await self.stat(key)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        check_prefix(prefix)
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        async for batch in self._ob.list(self._store, prefix=folder or None):
            for meta in batch:
                if str(meta["path"]).startswith(prefix):
                    yield self._info(meta)

    async def delete(self, key: str) -> None:
        check_key(key)
        try:
            await self._ob.delete_async(self._store, key)
        except FileNotFoundError:
            return


def s3(
    bucket: str,
    *,
    prefix: str = "",
    endpoint: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    allow_http: bool | None = None,
    **config: Any,
) -> S3ObjectStore:
    """An ``ObjectStore`` over the S3 bucket ``bucket`` (keys under ``prefix`` when given).

    ``endpoint`` points it at an S3-compatible server (MinIO, R2, a local moto); an
    ``http://`` endpoint allows plain HTTP unless ``allow_http=False``. Credentials not passed
    are read by obstore from the environment (``AWS_ACCESS_KEY_ID`` ...); any other obstore
    ``S3Store`` option passes through ``config``. Needs ``pip install "ultimat3-storage[s3]"``.
    """
    if not isinstance(bucket, str) or len(bucket) < 3:
        raise XError(
            "X_CONFIG_INVALID",
            f"s3(): bucket {bucket!r} is not a bucket name (3 characters at least)",
            fix="s3('my-bucket', region='eu-west-1')",
        )
    if prefix:
        check_prefix(prefix)
    ob = _obstore()
    options: dict[str, Any] = dict(config.pop("client_options", None) or {})
    if allow_http is None:
        allow_http = bool(endpoint and endpoint.startswith("http://"))
    if allow_http:
        options["allow_http"] = True
    given = {
        "endpoint": endpoint,
        "region": region,
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
        "session_token": session_token,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    store = ob.store.S3Store(
        bucket,
        prefix=prefix.rstrip("/") or None,
        client_options=options or None,
        **kwargs,
        **config,
    )
    return S3ObjectStore(store, bucket=bucket, prefix=prefix)
