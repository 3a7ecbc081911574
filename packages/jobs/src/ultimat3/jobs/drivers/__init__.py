"""Job drivers, one module each (the Postgres one is ``ultimat3.jobs.postgres``)."""
