"""Ports and installed adapters: one process-wide registry, swapped in tests."""

from __future__ import annotations

from types import TracebackType
from typing import Generic, TypeVar, cast

from ._errors import XError

T = TypeVar("T")


class Port(Generic[T]):
    """A named seam an adapter is installed into; ``fix`` says how to install one."""

    __slots__ = ("fix", "name")

    def __init__(self, name: str, *, fix: str) -> None:
        if not isinstance(name, str) or not name:
            raise XError("X_INVARIANT", f"a port needs a name, got {name!r}")
        self.name = name
        self.fix = fix

    def __repr__(self) -> str:
        return f"Port({self.name!r})"


_registry: dict[Port[object], object] = {}


def _key(port: Port[T]) -> Port[object]:
    if not isinstance(port, Port):
        raise XError("X_INVARIANT", f"{port!r} is not a Port", fix="declare Port('name', fix=...)")
    return cast("Port[object]", port)  # a string: no Port[object] built per call


def install_adapter(port: Port[T], impl: T) -> None:
    """Install ``impl`` as the adapter of ``port`` for the whole process."""
    _registry[_key(port)] = impl


def uninstall_adapter(port: Port[T]) -> None:
    """Remove the adapter of ``port``, if any."""
    _registry.pop(_key(port), None)


def installed_adapter(port: Port[T]) -> T | None:
    """The adapter of ``port``, or ``None``."""
    return cast("T | None", _registry.get(_key(port)))


def adapter(port: Port[T]) -> T:
    """The adapter of ``port``; ``X_ADAPTER_MISSING`` (with the port's fix) when none."""
    key = _key(port)
    if key not in _registry:
        raise XError(
            "X_ADAPTER_MISSING",
            f"no adapter is installed for the port {port.name!r}",
            fix=port.fix,
            meta={"port": port.name},
        )
    return cast(T, _registry[key])


_MISSING = object()


class swap_adapter(Generic[T]):  # a class named like the function it stands in for
    """Install ``impl`` for a ``with`` / ``async with`` block, then restore what was there."""

    __slots__ = ("_impl", "_port", "_previous")

    def __init__(self, port: Port[T], impl: T) -> None:
        self._port = port
        self._impl = impl
        self._previous: list[object] = []

    def __enter__(self) -> T:
        key = _key(self._port)
        self._previous.append(_registry.get(key, _MISSING))
        _registry[key] = self._impl
        return self._impl

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        key = _key(self._port)
        previous = self._previous.pop()
        if previous is _MISSING:
            _registry.pop(key, None)
        else:
            _registry[key] = previous

    async def __aenter__(self) -> T:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
