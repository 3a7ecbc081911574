import ultimat3.entity as entity_pkg


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(entity_pkg).items()
        if not name.startswith("_") and getattr(value, "__module__", "") != "builtins"
    }
    modules = {n for n in public if type(vars(entity_pkg)[n]).__name__ == "module"}
    assert set(entity_pkg.__all__) == public - modules
    assert len(entity_pkg.__all__) == len(set(entity_pkg.__all__))


def test_every_exported_name_resolves() -> None:
    for name in entity_pkg.__all__:
        assert hasattr(entity_pkg, name), name


def test_entity_imports_nothing_from_jobs() -> None:
    import pathlib
    import re

    src = pathlib.Path(entity_pkg.__file__).parent
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import)\s+ultimat3\.jobs", text, re.M), path
