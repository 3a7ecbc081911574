"""ultimat3.jobs."""

__all__: list[str] = []
