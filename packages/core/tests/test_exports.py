import ultimat3.core as core


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(core).items()
        if not name.startswith("_") and getattr(value, "__module__", "") != "builtins"
    }
    modules = {n for n in public if type(vars(core)[n]).__name__ == "module"}
    assert set(core.__all__) == public - modules
    assert len(core.__all__) == len(set(core.__all__))


def test_every_exported_name_resolves() -> None:
    for name in core.__all__:
        assert hasattr(core, name), name
