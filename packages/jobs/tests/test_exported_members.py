"""The public surface of ultimat3.jobs cannot drift: __all__ is exactly its public names."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import ultimat3.jobs
import ultimat3.jobs.testing


def _public(module: object) -> set[str]:
    """Names a user can import: no underscore, no submodule, not the __future__ feature."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in {"annotations", "TYPE_CHECKING"}
    }


def test_all_is_exactly_the_public_names_of_ultimat3_jobs() -> None:
    # a factory reached once (``from ultimat3.jobs import backfill``) is cached in the module:
    # the lazy names are the factory map's, not __all__'s
    lazy = set(ultimat3.jobs._FACTORIES)
    assert set(ultimat3.jobs.__all__) == _public(ultimat3.jobs) - lazy
    assert not lazy & set(ultimat3.jobs.__all__)
    assert len(ultimat3.jobs.__all__) == len(set(ultimat3.jobs.__all__))


def test_the_testing_module_exports_the_harness() -> None:
    for name in ("JobHarness", "JobTrace", "job_harness"):
        assert name in ultimat3.jobs.testing.__all__


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_factory"):
        ultimat3.jobs.no_such_factory  # noqa: B018


def test_importing_ultimat3_jobs_loads_no_factory_and_no_optional_distribution() -> None:
    code = (
        "import sys, ultimat3.jobs; "
        "bad = [m for m in sys.modules if m.startswith(('ultimat3.jobs.factories', "
        "'ultimat3.http', 'ultimat3.storage', 'ultimat3.entity', 'ultimat3.jobs.testing'))]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("module_name", ["ultimat3.jobs.adapter", "ultimat3.jobs.memory"])
def test_the_spi_and_the_memory_driver_export_exactly_their_public_names(module_name: str) -> None:
    import importlib

    module = importlib.import_module(module_name)
    lazy = {"MemoryJobDriver", "memory_job_driver"} if module_name.endswith("adapter") else set()
    assert set(module.__all__) == _public(module) | lazy
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:  # every listed name resolves, the lazy ones included
        assert getattr(module, name) is not None
