"""Declarations are checked once, at declaration: X_CONFIG_INVALID naming entity and column."""

from __future__ import annotations

import pytest

from ultimat3.core import XError
from ultimat3.entity import (
    Index,
    PartitionBy,
    entity,
    integer,
    jsonb,
    memory_database,
    text,
    timestamp,
    uuid,
)


def refused(fn: object, *named: str) -> XError:
    with pytest.raises(XError) as caught:
        fn()  # type: ignore[operator]
    assert caught.value.code == "X_CONFIG_INVALID", caught.value
    for n in named:
        assert n in caught.value.message, (n, caught.value.message)
    return caught.value


def test_an_empty_entity_name_is_refused() -> None:
    refused(lambda: entity("", columns={"id": uuid()}), "entity name")


def test_a_column_name_past_63_bytes_is_refused_naming_entity_and_column() -> None:
    long = "c" * 64
    refused(lambda: entity("orders", columns={long: text()}), "orders", long, "63")


def test_a_name_of_63_multibyte_characters_counts_bytes() -> None:
    refused(lambda: entity("orders", columns={"é" * 32: text()}), "orders")


def test_an_empty_column_name_is_refused() -> None:
    refused(lambda: entity("orders", columns={"": text()}), "orders")


def test_a_non_snake_case_name_is_refused() -> None:
    refused(lambda: entity("Orders", columns={"id": uuid()}), "Orders")
    refused(lambda: entity("orders", columns={"total-amount": integer()}), "total-amount")


def test_reserved_words_are_fine_names_because_identifiers_are_quoted() -> None:
    ent = entity("order", columns={"select": text(), "user": text(), "from": integer()})
    assert list(ent.columns) == ["select", "user", "from"]


def test_an_unknown_primary_key_or_index_column_is_refused() -> None:
    refused(lambda: entity("t", columns={"a": text()}, primary_key=["b"]), "['b']")
    refused(lambda: entity("t", columns={"a": text()}, indexes=[("a", "zz")]), "['zz']")


def test_a_primary_key_given_twice_differently_is_refused() -> None:
    refused(
        lambda: entity("t", columns={"a": text().primary_key(), "b": text()}, primary_key=["b"]),
        "disagrees",
    )


def test_two_tenant_columns_are_refused() -> None:
    refused(lambda: entity("t", columns={"a": uuid().tenant(), "b": uuid().tenant()}), "tenant")


def test_a_default_that_does_not_fit_its_column_is_refused_at_declaration() -> None:
    with pytest.raises(XError) as caught:
        entity("t", columns={"n": integer().default("seven")})
    assert caught.value.code == "X_ENTITY_VALUE_INVALID" and "t.n" in caught.value.message


def test_sealed_only_on_text_and_never_a_key() -> None:
    refused(lambda: jsonb().sealed(), "text()")
    refused(lambda: entity("t", columns={"s": text().sealed().unique()}), "sealed", "'s'")
    refused(lambda: entity("t", columns={"s": text().sealed().primary_key()}), "sealed")


def test_soft_delete_declares_deleted_at_itself_and_excludes_append_only() -> None:
    refused(
        lambda: entity("t", columns={"deleted_at": timestamp()}, soft_delete=True), "deleted_at"
    )
    refused(
        lambda: entity("t", columns={"a": text()}, soft_delete=True, append_only=True), "exclude"
    )


def test_a_partition_column_must_be_a_timestamp_inside_every_unique_key() -> None:
    refused(lambda: entity("t", columns={"a": text()}, partition_by=PartitionBy("a")), "'a'")
    refused(
        lambda: entity(
            "t",
            columns={"id": uuid().primary_key(), "at": timestamp()},
            partition_by=PartitionBy("at"),
        ),
        "partition column",
    )
    refused(
        lambda: entity(
            "t",
            columns={"id": uuid(), "at": timestamp()},
            primary_key=["id", "at"],
            partition_by=PartitionBy("at", retain="soon"),
        ),
        "retain",
    )
    ok = entity(
        "t",
        columns={"id": uuid(), "at": timestamp()},
        primary_key=["id", "at"],
        indexes=[Index(("at",))],
        partition_by=PartitionBy("at", unit="day", retain="30d"),
    )
    assert ok.partition_by is not None and ok.partition_by.retain_ms() == 30 * 86_400_000


def test_references_need_a_declared_target_with_one_key_column() -> None:
    users = entity("users", columns={"id": uuid().primary_key()})
    posts = entity(
        "posts",
        columns={
            "id": uuid().primary_key(),
            "author": uuid().references(users, on_delete="cascade"),
        },
    )
    refused(lambda: memory_database([posts]), "posts.author", "users")
    memory_database([users, posts])
    refused(lambda: uuid().references(users, on_delete="explode"), "explode")  # type: ignore[arg-type]


def test_sealed_columns_need_a_key_ring() -> None:
    t = entity("t", columns={"s": text().sealed()})
    refused(lambda: memory_database([t]), "key_ring")


def test_two_entities_of_one_name_are_refused() -> None:
    a = entity("t", columns={"a": text()})
    refused(lambda: memory_database([a, a]), "two entities")


def test_personal_data_needs_a_kind_and_is_listed() -> None:
    refused(lambda: text().personal_data(" "), "kind")
    t = entity("people", columns={"email": text().personal_data("email"), "n": integer()})
    assert t.personal_data_columns == {"email": "email"}
