"""Typing examples for ultimat3.core (checked by mypy --strict in CI)."""

import ultimat3.core

_ = ultimat3.core
