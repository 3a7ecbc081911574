"""The entity factories' one door to ``ultimat3.entity``: imported when a factory is declared,
never when ``ultimat3.jobs`` is, so ultimat3-jobs installs and imports without it."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

from ultimat3.core import XError

ENTITY_EXTRA = 'pip install "ultimat3-jobs[entity]"'


def need_entity(factory: str) -> ModuleType:
    """The ``ultimat3.entity`` module, or ``X_CONFIG_INVALID`` naming the extra to install."""
    try:
        return importlib.import_module("ultimat3.entity")
    except ImportError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            f"{factory}() needs ultimat3-entity, which is not installed",
            fix=ENTITY_EXTRA,
        ) from exc


async def answer(value: Any) -> Any:
    """``value``, awaited when a callback answered an awaitable (every callback may be sync)."""
    return await value if inspect.isawaitable(value) else value


__all__ = ["ENTITY_EXTRA", "answer", "need_entity"]
