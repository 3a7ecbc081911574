"""Moved: the memory driver is ``ultimat3.jobs.memory`` and the Postgres one
``ultimat3.jobs.postgres``. ``ultimat3.jobs.drivers.memory`` / ``.memory_outbox`` still answer,
re-exporting ``ultimat3.jobs.memory`` lazily."""
