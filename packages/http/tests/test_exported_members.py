"""The public surface of ultimat3.http cannot drift: __all__ is exactly its public names, and it
imports nothing from ultimat3.jobs."""

from __future__ import annotations

import subprocess
import sys
import types

import ultimat3.http


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(ultimat3.http).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(ultimat3.http.__all__) == public
    assert len(ultimat3.http.__all__) == len(set(ultimat3.http.__all__))


def test_importing_http_loads_no_jobs_module_nor_a_database_driver() -> None:
    code = (
        "import sys, ultimat3.http, ultimat3.http.testing; "
        "bad = [m for m in sys.modules if m.startswith(('ultimat3.jobs', 'psycopg', 'redis'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
