"""Shared test helpers of the ultimat3 workspace (unpublished): ``engine_drivers`` (the engine
fixture over memory and Postgres), ``faults`` and ``fault_app`` (the fault tests' helpers and the
worker processes they start), ``pytest_plugin`` (the fixtures, loaded through ``pytest11``)."""
