"""ultimat3.storage's public surface is exactly __all__."""

from __future__ import annotations

import ultimat3.storage as storage


def test_all_names_every_public_member_and_each_resolves() -> None:
    public = {name for name in vars(storage) if not name.startswith("_")}
    public -= {"annotations", "TYPE_CHECKING", "Any", "testing"}  # a submodule, once imported
    assert public <= set(storage.__all__), sorted(public - set(storage.__all__))
    for name in storage.__all__:
        assert getattr(storage, name) is not None, name
    assert sorted(storage.__all__) == sorted(set(storage.__all__))
