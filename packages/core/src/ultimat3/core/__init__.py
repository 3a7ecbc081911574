"""ultimat3.core."""

__all__: list[str] = []
