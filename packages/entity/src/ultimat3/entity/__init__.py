"""ultimat3.entity: the distribution exists; its capability lands with its own issue."""

__all__: list[str] = []
