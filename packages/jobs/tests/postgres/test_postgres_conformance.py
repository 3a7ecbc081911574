"""The Postgres driver against the whole driver contract, on a real server: a fresh migrated
schema per test, time passing for real (the suite sleeps; the database's clock decides)."""

from __future__ import annotations

import pytest

from ultimat3.jobs.adapter import JobDriver
from ultimat3.jobs.postgres import postgres_job_driver
from ultimat3.jobs.testing import JobDriverConformance


class TestPostgresDriver(JobDriverConformance):
    database_url: str
    schema: str

    @pytest.fixture(autouse=True)
    def _fresh_schema(self, database_url: str, pg_schema: str) -> None:
        self.database_url = database_url
        self.schema = pg_schema

    async def make_driver(self) -> JobDriver:
        return postgres_job_driver(self.database_url, schema=self.schema)
