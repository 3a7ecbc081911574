"""job_cursor / parse_job_cursor: opaque, url-safe keyset positions refusing what no page made."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError
from ultimat3.jobs.adapter import JobRow, job_cursor, parse_job_cursor

T0 = datetime(2026, 3, 4, 5, 6, 7, 891234, tzinfo=UTC)


def row(created_at: datetime = T0, job_id: str = "01900000-0000-7000-8000-000000000001") -> JobRow:
    return JobRow(
        id=job_id,
        run_id=job_id,
        name="j",
        queue="q",
        state="ready",
        attempts=0,
        max_attempts=1,
        run_at=created_at,
        created_at=created_at,
        updated_at=created_at,
        idempotency_key="k",
    )


def test_a_cursor_round_trips_created_at_to_the_microsecond_and_the_id() -> None:
    cursor = job_cursor(row())
    assert parse_job_cursor(cursor) == (T0, "01900000-0000-7000-8000-000000000001")


def test_a_cursor_is_url_safe_and_names_nothing_in_clear() -> None:
    cursor = job_cursor(row())
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    assert "01900000" not in cursor


def test_an_offset_created_at_is_the_same_instant() -> None:
    shifted = T0.astimezone(timezone(timedelta(hours=5)))
    assert parse_job_cursor(job_cursor(row(shifted)))[0] == T0


def test_a_naive_created_at_is_refused_naming_the_job() -> None:
    with pytest.raises(XError) as info:
        job_cursor(row(T0.replace(tzinfo=None), job_id="job-naive"))
    assert info.value.code == "X_INVARIANT"
    assert "job-naive" in info.value.message


@pytest.mark.parametrize(
    "cursor",
    ["", "garbage", "!!!!", "a" * 600, "MTo1OjE", "MToxMjM6am9iOjAwMDAwMDAw"],
)
def test_a_cursor_no_page_produced_is_x_job_page_invalid(cursor: str) -> None:
    with pytest.raises(XError) as info:
        parse_job_cursor(cursor)
    assert info.value.code == "X_JOB_PAGE_INVALID"
    assert cursor[:20] in info.value.message


def test_an_edited_cursor_fails_its_checksum() -> None:
    good = job_cursor(row())
    refused = 0
    for i in range(len(good) - 1):  # the last char may carry padding bits only
        edited = good[:i] + ("A" if good[i] != "A" else "B") + good[i + 1 :]
        with pytest.raises(XError) as info:
            parse_job_cursor(edited)
        assert info.value.code == "X_JOB_PAGE_INVALID"
        refused += 1
    assert refused == len(good) - 1


def test_a_non_string_cursor_is_refused() -> None:
    with pytest.raises(XError) as info:
        parse_job_cursor(42)  # type: ignore[arg-type]
    assert info.value.code == "X_JOB_PAGE_INVALID"


@given(
    created=st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    job_id=st.text(min_size=1, max_size=40),
)
def test_every_row_position_round_trips(created: datetime, job_id: str) -> None:
    assert parse_job_cursor(job_cursor(row(created, job_id))) == (created, job_id)
