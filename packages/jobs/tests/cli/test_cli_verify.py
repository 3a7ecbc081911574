"""``x verify`` and ``x exercise`` through the command line: apps written to a temporary folder,
the real Postgres for the exercise's scratch schema (dropped after), exit 1 on findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ultimat3.jobs.cli import main

URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"

HEAD = """
import os
from pydantic import BaseModel
from ultimat3.entity import database, entity, integer, text, timestamp, uuid, View
from ultimat3.jobs import (
    Anonymize, Bucket, Retain, define_subject, job, refresh_view, rollup, subject_erase,
)

URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
members = entity("members", columns={
    "id": uuid().primary_key(), "email": text().personal_data("email"),
})
comments = entity("comments", columns={
    "id": uuid().primary_key(), "member_id": uuid().references(members), "body": text(),
})


class Erase(BaseModel):
    member_id: str
"""

CLEAN = """
db = database(URL, [members, comments], schema="{declared}")
member = define_subject(members, database=db, key=lambda i: i.member_id,
                        tables={{"members": Anonymize({{"email": "x"}}), "comments": "delete"}})
erase = subject_erase(name="members.erase", input=Erase, subject=member)


async def onboard(i, step, ctx):
    if i.member_id:
        await step.run("welcome", lambda s: None)
    else:
        await step.run("welcome", lambda s: None)   # the other branch: not a duplicate
    if not i.member_id:
        return None
    await step.run("nudge", lambda s: None)
    for n in range(3):
        await step.run(f"sync:{{n}}", lambda s: None)   # computed names: left to the run
    await step.run("nudge-later", lambda s: None)


onboarding = job(name="onboard", input=Erase, idempotency_key=lambda i: i.member_id, run=onboard)
JOBS = [erase, onboarding]
"""

PROBLEMS = """
likes = entity("likes", columns={{
    "id": uuid().primary_key(), "comment_id": uuid().references(comments),
}})
newsletter = entity("newsletter", columns={{
    "id": uuid().primary_key(), "email": text().personal_data("email"),
}})
db = database(URL, [members, comments, likes, newsletter], schema="{declared}")
# likes is reached through the deleted comments and has no treatment
member = define_subject(members, database=db, key=lambda i: i.member_id,
                        tables={{"members": Anonymize({{"email": "x"}}), "comments": "delete"}})
erase = subject_erase(name="members.erase", input=Erase, subject=member)


async def sync(i, step, ctx):
    await step.run("fetch", lambda s: None)
    await step.run("store", lambda s: None)
    await step.run("fetch", lambda s: None)
    for row in range(2):
        await step.run("each", lambda s: None)


sync_job = job(name="sync", input=Erase, idempotency_key=lambda i: i.member_id, run=sync)
JOBS = [erase, sync_job]
"""

LEAKY = """
notes = entity("notes", columns={{
    "id": uuid().primary_key(), "member_id": uuid().references(members),
    "title": text().personal_data("text"), "body": text(),
}})
db = database(URL, [members, notes], schema="{declared}")
# notes are kept and anonymized, but their body (no .personal_data() mark) is left
member = define_subject(members, database=db, key=lambda i: i.member_id,
                        tables={{"members": Anonymize({{"email": "x"}}),
                                 "notes": Anonymize({{"title": ""}})}})
JOBS = [member]
"""

ROLLUP = """
totals = entity("totals", columns={{"day": timestamp().primary_key(), "n": integer()}})
db = database(URL, [totals], schema="{declared}")
per_day = rollup(name="totals.rollup", into=totals, table=lambda: db.totals, key=["day"],
                 lookback=None, bucket=Bucket(unit="day"), tenant="none",
                 source=lambda w: [], map=lambda p, w: {{}})
JOBS = [per_day]
"""

VIEW = """
db = database(URL, [members], schema="{declared}")
refresh = refresh_view(name="members.refresh", view=members, database=db)
JOBS = [refresh]
"""


@pytest.fixture
def write_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """``write_app(body)``: a module of HEAD + body in a folder on sys.path (the cwd, as the
    command is run from the app's root); answers its ``module:JOBS``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def write(body: str, **fmt: str) -> str:
        name = f"app_{uuid.uuid4().hex[:10]}"
        source = HEAD + textwrap.dedent(body).format(declared=f"x_verify_{name}", **fmt)
        (tmp_path / f"{name}.py").write_text(source)
        made.append(name)
        return f"{name}:JOBS"

    yield write
    for name in made:
        sys.modules.pop(name, None)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv), env={"DATABASE_URL": URL})
    out, err = capsys.readouterr()
    data = json.loads(out) if "--json" in argv and out.strip() else out
    return code, data, err


def _schemas(prefix: str) -> set[str]:
    with psycopg.connect(URL, autocommit=True) as conn:
        rows = conn.execute(
            "select nspname from pg_namespace where nspname like %s", (prefix + "%",)
        ).fetchall()
    return {r[0] for r in rows}


# --- x verify ----------------------------------------------------------------------------------


def test_verify_a_clean_app_exits_0(capsys: pytest.CaptureFixture[str], write_app: Any) -> None:
    app = write_app(CLEAN)
    code, data, _ = _run(capsys, "verify", "--app", app, "--json")
    assert code == 0
    assert data["findings"] == []
    assert data["jobs"] == ["members.erase", "onboard"]
    assert data["subjects"] == ["members"]
    code, text, _ = _run(capsys, "verify", "--app", app)
    assert code == 0 and "2 job(s), 1 subject(s)" in text and "no findings" in text


def test_verify_reports_duplicate_steps_and_the_subjects_problems(
    capsys: pytest.CaptureFixture[str], write_app: Any
) -> None:
    app = write_app(PROBLEMS)
    code, data, _ = _run(capsys, "verify", "--app", app, "--json")
    assert code == 1
    found = [(f["code"], f["meta"].get("step") or f["meta"].get("table")) for f in data["findings"]]
    assert sorted(found) == [
        ("X_PERSONAL_DATA_UNREACHED", "members"),  # the refused plan reaches nothing
        ("X_PERSONAL_DATA_UNREACHED", "newsletter"),
        ("X_STEP_DUPLICATE", "each"),
        ("X_STEP_DUPLICATE", "fetch"),
        ("X_SUBJECT_TABLE_UNDECLARED", "likes"),
    ]
    dup = next(f for f in data["findings"] if f["meta"].get("step") == "fetch")
    assert "named twice (lines" in dup["message"] and dup["fix"]
    code, text, _ = _run(capsys, "verify", "--app", app)
    assert code == 1
    assert "5 finding(s)" in text and "X_SUBJECT_TABLE_UNDECLARED" in text


@pytest.mark.parametrize(("body", "code"), [(ROLLUP, "X_JOB_ROLLUP_INVALID"),
                                            (VIEW, "X_JOB_REFRESH_VIEW_INVALID")])  # fmt: skip
def test_verify_reports_a_refused_rollup_or_view_as_a_finding(
    capsys: pytest.CaptureFixture[str], write_app: Any, body: str, code: str
) -> None:
    exit_code, data, err = _run(capsys, "verify", "--app", write_app(body), "--json")
    assert exit_code == 1, err
    assert [f["code"] for f in data["findings"]] == [code]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no_such_module_here:JOBS", "there is no module named 'no_such_module_here'"),
        ("just_a_module", "is not module:attribute"),
    ],
)
def test_verify_refuses_a_bad_app(
    capsys: pytest.CaptureFixture[str], write_app: Any, spec: str, needle: str
) -> None:
    code, _, err = _run(capsys, "verify", "--app", spec)
    assert code == 1
    assert err.startswith("X_CONFIG_INVALID") and needle in err
    assert "fix:" in err and "Traceback" not in err


def test_verify_refuses_a_missing_attribute_a_wrong_value_and_a_module_that_raises(
    capsys: pytest.CaptureFixture[str], write_app: Any
) -> None:
    app = write_app(CLEAN)
    code, _, err = _run(capsys, "verify", "--app", app.replace(":JOBS", ":NOPE"))
    assert code == 1 and "has no attribute 'NOPE'" in err
    code, _, err = _run(capsys, "verify", "--app", app.replace(":JOBS", ":URL"))
    assert code == 1 and "neither a job nor a define_subject()" in err
    broken = write_app("\nJOBS = [1 / 0]\n")
    code, _, err = _run(capsys, "verify", "--app", broken, "--json")
    assert code == 1
    error = json.loads(err)["error"]
    assert error["code"] == "X_CONFIG_INVALID"
    assert "raised ZeroDivisionError" in error["message"] and "python -c" in error["fix"]


def test_verify_runs_as_a_process_and_exits_1_on_findings(write_app: Any) -> None:
    app = write_app(PROBLEMS)
    env = {**os.environ, "DATABASE_URL": URL}
    done = subprocess.run(
        [sys.executable, "-m", "ultimat3.jobs.cli", "verify", "--app", app, "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert len(json.loads(done.stdout)["findings"]) == 5


# --- x exercise --------------------------------------------------------------------------------


def test_exercise_proves_a_clean_subject_on_a_scratch_schema_and_drops_it(
    capsys: pytest.CaptureFixture[str], write_app: Any
) -> None:
    app = write_app(CLEAN)
    code, data, err = _run(capsys, "exercise", "--app", app, "--json")
    assert code == 0, err
    assert data["findings"] == []
    assert data["proved"] == [{"subject": "members", "findings": 0}]
    [line] = [ln for ln in err.splitlines() if "proving 'members'" in ln]
    scratch = line.rsplit(" ", 1)[-1]
    assert scratch.startswith("x_exercise_")
    assert _schemas(scratch) == set()  # dropped
    assert _schemas("x_verify_" + app.split(":")[0]) == set()  # the app's schema: never made


def test_exercise_reports_a_value_the_erase_leaves(
    capsys: pytest.CaptureFixture[str], write_app: Any
) -> None:
    app = write_app(LEAKY)
    code, data, err = _run(capsys, "exercise", "--app", app, "--json")
    assert code == 1, err
    assert [(f["code"], f["meta"]["table"], f["meta"]["column"]) for f in data["findings"]] == [
        ("X_SUBJECT_ERASE_INCOMPLETE", "notes", "body")
    ]
    code, text, _ = _run(capsys, "exercise", "--app", app)
    assert code == 1 and "notes.body still holds the person's value" in text


def test_exercise_lists_the_personal_data_findings_and_proves_no_refused_plan(
    capsys: pytest.CaptureFixture[str], write_app: Any
) -> None:
    code, data, _ = _run(capsys, "exercise", "--app", write_app(PROBLEMS), "--json")
    assert code == 1
    codes = sorted(f["code"] for f in data["findings"])
    assert codes == ["X_PERSONAL_DATA_UNREACHED"] * 2 + ["X_SUBJECT_TABLE_UNDECLARED"]
    assert data["proved"] == []


def test_exercise_without_a_database_says_how_to_give_one(
    capsys: pytest.CaptureFixture[str], write_app: Any
) -> None:
    app = write_app(CLEAN)
    code = main(["exercise", "--app", app], env={})
    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith("X_CONFIG_INVALID") and "DATABASE_URL" in err
