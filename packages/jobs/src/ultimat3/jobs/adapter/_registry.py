"""The ambient installation: the three ports a job runtime resolves, and ``install_job_driver``
(``swap_adapter(JOB_DRIVER, d)`` in a test)."""

from __future__ import annotations

from ultimat3.core import Port, adapter, install_adapter, installed_adapter

from ._driver import JobDriver
from ._stores import EventBus, OutboxStore

JOB_DRIVER: Port[JobDriver] = Port(
    "jobs",
    fix="install_job_driver(memory_job_driver()) in a test, or "
    "install_job_driver(postgres_job_driver(DATABASE_URL)) at the app's edge",
)
EVENT_BUS: Port[EventBus] = Port(
    "jobs.event_bus",
    fix="install_adapter(EVENT_BUS, memory_event_bus(driver)) or the Postgres bus",
)
OUTBOX_STORE: Port[OutboxStore] = Port(
    "jobs.outbox",
    fix="install_adapter(OUTBOX_STORE, ...) with a store for the ambient connection's database",
)


def install_job_driver(driver: JobDriver) -> None:
    """Make ``driver`` the one every ``enqueue`` and worker resolves."""
    install_adapter(JOB_DRIVER, driver)


def job_driver() -> JobDriver:
    """The installed driver (``X_ADAPTER_MISSING`` with the fix when none is)."""
    return adapter(JOB_DRIVER)


def installed_job_driver() -> JobDriver | None:
    return installed_adapter(JOB_DRIVER)
