"""Moved: the memory driver is ``ultimat3.jobs.memory``. This old path re-exports it lazily."""

from __future__ import annotations

import importlib


def __getattr__(name: str) -> object:
    return getattr(importlib.import_module("ultimat3.jobs.memory"), name)
