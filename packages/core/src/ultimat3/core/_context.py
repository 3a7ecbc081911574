"""Ambient context: the actor, the tenant, the database connection, cross-tenant access."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from ._ambient import Binding
from ._errors import XError
from ._signal import current_signal

T = TypeVar("T")

CROSS_TENANT_PERMISSION = "tenancy:cross"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is acting: an id, their org, their permissions and a kind (``'user'``, ``'system'``)."""

    id: str
    org_id: str | None = None
    permissions: frozenset[str] = field(default_factory=frozenset)
    kind: str = "user"

    def has(self, permission: str) -> bool:
        """Whether the actor holds ``permission``."""
        return permission in self.permissions


SYSTEM_ACTOR = Actor(id="system", kind="system", permissions=frozenset({CROSS_TENANT_PERMISSION}))
"""The framework's own actor: no org, and allowed to cross tenants."""

_actor_var: ContextVar[Actor | None] = ContextVar("ultimat3_actor", default=None)
_tenant_var: ContextVar[str | None] = ContextVar("ultimat3_tenant", default=None)
_connection_var: ContextVar[object | None] = ContextVar("ultimat3_connection", default=None)
_cross_var: ContextVar[str | None] = ContextVar("ultimat3_cross_tenant", default=None)


def current_actor() -> Actor | None:
    """The ambient actor, or ``None``."""
    return _actor_var.get()


def use_actor(actor: Actor | None) -> Binding[Actor | None]:
    """Make ``actor`` ambient for a ``with`` / ``async with`` block."""
    return Binding(_actor_var, actor)


def current_tenant() -> str | None:
    """The ambient tenant id, or ``None``."""
    return _tenant_var.get()


def use_tenant(tenant_id: str | None) -> Binding[str | None]:
    """Make ``tenant_id`` ambient for a ``with`` / ``async with`` block."""
    return Binding(_tenant_var, tenant_id)


def current_connection() -> object | None:
    """The ambient database connection (already inside its transaction), or ``None``."""
    return _connection_var.get()


class _ConnectionBinding(Binding[object | None]):
    """``use_connection``'s binding: entered inside a run whose signal is aborted (its timeout, a
    drain, a lost lease), it rethrows the signal's reason instead of making the connection
    ambient — the run must stop writing, and nothing in the block runs."""

    __slots__ = ()

    def __enter__(self) -> object | None:
        if self._value is not None:
            signal = current_signal()
            if signal is not None and signal.aborted and signal.reason is not None:
                raise signal.reason
        return super().__enter__()


def use_connection(conn: object | None) -> Binding[object | None]:
    """Make ``conn`` ambient for a ``with`` or ``async with`` block. Inside a run whose signal is
    aborted it rethrows the signal's reason instead (``use_connection(None)`` still unbinds)."""
    return _ConnectionBinding(_connection_var, conn)


def cross_tenant_reason() -> str | None:
    """Inside :func:`cross_tenant`, its reason; otherwise ``None``."""
    return _cross_var.get()


@overload
async def cross_tenant(reason: str, fn: Callable[[], Awaitable[T]]) -> T: ...
@overload
async def cross_tenant(reason: str, fn: Callable[[], T]) -> T: ...
async def cross_tenant(reason: str, fn: Any) -> Any:
    """Run ``fn`` with the ambient tenant check lifted; needs an actor holding tenancy:cross."""
    if not isinstance(reason, str) or not reason.strip():
        raise XError(
            "X_INVARIANT",
            f"cross_tenant needs a reason, got {reason!r}",
            fix="cross_tenant('nightly billing rollup', fn)",
        )
    actor = current_actor()
    if actor is None or not actor.has(CROSS_TENANT_PERMISSION):
        who = f"actor {actor.id!r}" if actor is not None else "no actor"
        raise XError(
            "X_FORBIDDEN",
            f"cross_tenant: {who} lacks the permission {CROSS_TENANT_PERMISSION!r}",
            fix=f"grant {CROSS_TENANT_PERMISSION!r} to the actor, or run as SYSTEM_ACTOR",
            meta={"permission": CROSS_TENANT_PERMISSION, "actor": actor.id if actor else None},
        )
    with Binding(_cross_var, reason):
        result: Any = fn()
        if inspect.isawaitable(result):
            result = await result
        return result
