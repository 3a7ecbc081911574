"""A contextvar binding usable as both ``with`` and ``async with``."""

from __future__ import annotations

from contextvars import ContextVar, Token
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


class Binding(Generic[T]):
    """Sets ``var`` to ``value`` for the block and restores the previous value after it."""

    __slots__ = ("_tokens", "_value", "_var")

    def __init__(self, var: ContextVar[T], value: T) -> None:
        self._var = var
        self._value = value
        self._tokens: list[Token[T]] = []

    def __enter__(self) -> T:
        self._tokens.append(self._var.set(self._value))
        return self._value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._var.reset(self._tokens.pop())

    async def __aenter__(self) -> T:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
