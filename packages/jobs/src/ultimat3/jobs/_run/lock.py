"""``with_lock()``: one holder fleet-wide, held as the lease slot ``lock:<key>``.

The lock is a slot of the job driver's ``LeaseStore`` (``x_job_leases`` on Postgres): no table of
its own. The grant is renewed every ``ttl / 3`` while ``fn`` runs; when no renewal lands within the
ttl, or one is refused, ``grant.signal`` aborts with ``X_LOCK_LOST`` and the call raises it even
if ``fn`` returned. ``grant.token`` is a fencing token greater than every token handed out before.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from ultimat3.core import (
    AbortController,
    Duration,
    Signal,
    XError,
    any_signal,
    installed_adapter,
    new_id,
    parse_duration,
)
from ultimat3.jobs.adapter import LeaseStore, driver_leases

T = TypeVar("T")

LOCK_SLOT_PREFIX = "lock:"


@dataclass(frozen=True, slots=True)
class LockGrant:
    """What ``fn`` receives: the lock's key, its fencing token, and a signal that aborts with
    ``X_LOCK_LOST`` when the lock can no longer be vouched for (or with the caller's reason)."""

    key: str
    token: int
    signal: Signal


def _resolve_store(store: LeaseStore | None) -> LeaseStore:
    if store is not None:
        return store
    from ultimat3.jobs.adapter import JOB_DRIVER

    driver = installed_adapter(JOB_DRIVER)
    leases = driver_leases(driver) if driver is not None else None
    if leases is None:
        raise XError(
            "X_LOCK_STORE_MISSING",
            "with_lock() found no lease store: "
            + (
                "no job driver is installed"
                if driver is None
                else f"the installed job driver {getattr(driver, 'name', driver)!r} has no leases"
            ),
            fix="install_job_driver(postgres_job_driver(DATABASE_URL)) (or memory_job_driver() "
            "in a test), or pass store=<a LeaseStore>",
        )
    return leases


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key.strip():
        raise XError(
            "X_INVARIANT",
            f"with_lock(): the key {key!r} is empty",
            fix="name what the lock guards, e.g. with_lock(f'digest:{org_id}', ...)",
        )


@contextlib.asynccontextmanager
async def hold_lock(
    key: str,
    *,
    ttl: Duration,
    wait: Duration | None = None,
    poll: Duration | None = None,
    store: LeaseStore | None = None,
    signal: Signal | None = None,
) -> AsyncIterator[LockGrant]:
    """``async with hold_lock('digest:42', ttl='2m') as grant:`` — the ``async with`` form of
    :func:`with_lock`. Leaving the block after the lock was lost raises ``X_LOCK_LOST``."""
    _check_key(key)
    ttl_ms = parse_duration(ttl, name="with_lock ttl")
    wait_ms = (
        ttl_ms if wait is None else parse_duration(wait, name="with_lock wait", allow_zero=True)
    )
    poll_ms = (
        max(10, min(1000, ttl_ms // 10)) if poll is None else parse_duration(poll, name="poll")
    )
    leases = _resolve_store(store)
    slot_key = LOCK_SLOT_PREFIX + key
    holder = new_id()

    deadline = time.monotonic() + wait_ms / 1000
    while True:
        if signal is not None:
            signal.throw_if_aborted()
        grant = await leases.acquire(slot_key, limit=1, holder=holder, ttl_ms=ttl_ms)
        if grant is not None:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            held = await leases.holders(slot_key)
            by = held[0].holder if held else "another holder"
            raise XError(
                "X_LOCK_NOT_ACQUIRED",
                f"lock {key!r} is held by {by}; waited {wait_ms} ms",
                fix="retry later, pass a longer wait=, or wait=0 to try once",
                meta={"key": key, "holder": by},
            )
        await asyncio.sleep(min(poll_ms / 1000, remaining))

    lost = AbortController()
    grant_signal = lost.signal if signal is None else any_signal(lost.signal, signal)

    async def renew() -> None:
        last_landed = time.monotonic()
        interval = ttl_ms / 3000
        while True:
            await asyncio.sleep(interval)
            try:
                landed = await leases.renew(slot_key, grant.slot, holder=holder, ttl_ms=ttl_ms)
            except XError:
                landed = False
                if time.monotonic() - last_landed < ttl_ms / 1000:
                    continue
            if not landed:
                lost.abort(
                    XError(
                        "X_LOCK_LOST",
                        f"lock {key!r} (token {grant.token}) was lost: a renewal was refused "
                        "or none landed within the ttl",
                        fix="keep fn shorter than the ttl or pass a longer ttl=; write the "
                        "fencing token beside what fn changes",
                    )
                )
                return
            last_landed = time.monotonic()

    renewer = asyncio.create_task(renew(), name=f"with_lock renew {key}")
    try:
        yield LockGrant(key=key, token=grant.token, signal=grant_signal)
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer
        with contextlib.suppress(XError):
            await leases.release(slot_key, grant.slot, holder=holder)
    if lost.signal.aborted and lost.signal.reason is not None:
        raise lost.signal.reason


@overload
async def with_lock(
    key: str,
    fn: Callable[[LockGrant], Awaitable[T]],
    *,
    ttl: Duration,
    wait: Duration | None = None,
    poll: Duration | None = None,
    store: LeaseStore | None = None,
    signal: Signal | None = None,
) -> T: ...


@overload
async def with_lock(
    key: str,
    fn: Callable[[LockGrant], T],
    *,
    ttl: Duration,
    wait: Duration | None = None,
    poll: Duration | None = None,
    store: LeaseStore | None = None,
    signal: Signal | None = None,
) -> T: ...


async def with_lock(
    key: str,
    fn: Callable[[LockGrant], Any],
    *,
    ttl: Duration,
    wait: Duration | None = None,
    poll: Duration | None = None,
    store: LeaseStore | None = None,
    signal: Signal | None = None,
) -> Any:
    """Run ``fn(grant)`` while holding ``key`` fleet-wide; answers what ``fn`` returned.

    ``ttl`` (required): how long a dead holder keeps the key, renewed at ttl/3. ``wait`` (default
    one ttl; ``0`` = one try), then ``X_LOCK_NOT_ACQUIRED`` naming the holder. A lost lock raises
    ``X_LOCK_LOST`` even when ``fn`` resolved. No store: ``X_LOCK_STORE_MISSING``.
    """
    async with hold_lock(key, ttl=ttl, wait=wait, poll=poll, store=store, signal=signal) as grant:
        result = fn(grant)
        if inspect.isawaitable(result):
            return await result
        return result
