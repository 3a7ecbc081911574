"""Hypothesis strategies for the jobs port: names, tenants, keys, JSON payloads, enqueue requests.

Small alphabets on purpose: two draws collide often, so a property or a state machine meets
deduplication, shared keys and shared tenants without having to ask for them.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from ultimat3.jobs.adapter import EnqueueRequest

__all__ = [
    "enqueue_batches",
    "enqueue_requests",
    "idempotency_keys",
    "job_ids",
    "job_names",
    "json_values",
    "queue_names",
    "tenant_ids",
]

_NAME_ALPHABET = "abcdefgh.-_"


def job_names() -> st.SearchStrategy[str]:
    """Durable job names: short, non-empty, dotted like ``billing.sync``."""
    return st.text(alphabet=_NAME_ALPHABET, min_size=1, max_size=8)


def queue_names() -> st.SearchStrategy[str]:
    return st.sampled_from(["default", "integrations", "mail", "bulk"])


def tenant_ids() -> st.SearchStrategy[str | None]:
    """``None`` (its own scope) or one of a few org ids."""
    return st.none() | st.sampled_from(
        [
            "00000000-0000-7000-8000-00000000000a",
            "00000000-0000-7000-8000-00000000000b",
            "00000000-0000-7000-8000-00000000000c",
        ]
    )


def idempotency_keys() -> st.SearchStrategy[str]:
    """Non-empty keys, including unicode and separators a key builder might produce."""
    return st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
        min_size=1,
        max_size=24,
    )


def job_ids() -> st.SearchStrategy[str]:
    """Lowercase uuids. They may repeat across draws: a repeated id is an outbox republish."""
    return st.uuids().map(str)


def json_values(*, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON documents as a database stores them: str keys, finite floats, nested lists/dicts."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**53), max_value=2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(alphabet=st.characters(codec="utf-8"), max_size=16)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


@st.composite
def enqueue_requests(
    draw: st.DrawFn,
    *,
    names: st.SearchStrategy[str] | None = None,
    queues: st.SearchStrategy[str] | None = None,
    tenants: st.SearchStrategy[str | None] | None = None,
    keys: st.SearchStrategy[str] | None = None,
    payloads: st.SearchStrategy[Any] | None = None,
    ids: st.SearchStrategy[str] | None = None,
    max_attempts: st.SearchStrategy[int] | None = None,
    delays: st.SearchStrategy[int | None] | None = None,
) -> EnqueueRequest:
    """One ``EnqueueRequest``; every field has a strategy you can narrow."""
    return EnqueueRequest(
        id=draw(ids if ids is not None else job_ids()),
        run_id=draw(job_ids()),
        name=draw(names if names is not None else job_names()),
        queue=draw(queues if queues is not None else queue_names()),
        payload=draw(payloads if payloads is not None else json_values()),
        idempotency_key=draw(keys if keys is not None else idempotency_keys()),
        max_attempts=draw(max_attempts if max_attempts is not None else st.integers(1, 5)),
        tenant_id=draw(tenants if tenants is not None else tenant_ids()),
        concurrency_key=draw(st.none() | st.text(alphabet="xyz", min_size=1, max_size=3)),
        delay_ms=draw(delays if delays is not None else st.none() | st.integers(0, 60_000)),
    )


def enqueue_batches(
    *, min_size: int = 0, max_size: int = 20, **fields: Any
) -> st.SearchStrategy[list[EnqueueRequest]]:
    """Lists of requests with distinct ids (keys may repeat: in-batch dedupe)."""
    return st.lists(
        enqueue_requests(**fields), min_size=min_size, max_size=max_size, unique_by=lambda r: r.id
    )
