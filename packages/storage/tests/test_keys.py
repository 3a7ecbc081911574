"""Keys: what every store accepts and refuses, as properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ultimat3.core import XError
from ultimat3.storage import check_key, check_prefix
from ultimat3.storage.testing import INVALID_KEYS

segment = st.text(
    st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
valid_keys = st.lists(segment, min_size=1, max_size=5).map("/".join)


@given(valid_keys)
def test_a_relative_path_of_plain_segments_is_a_key(key: str) -> None:
    assert check_key(key) == key
    assert check_prefix(key) == key
    assert check_prefix(key + "/") == key + "/"


@given(valid_keys, st.integers(0, 0x1F) | st.integers(0x7F, 0x9F), st.data())
def test_a_control_character_anywhere_is_refused_naming_the_key(
    key: str, point: int, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(key)))
    bad = key[:at] + chr(point) + key[at:]
    with pytest.raises(XError) as caught:
        check_key(bad)
    assert caught.value.code == "X_STORAGE_KEY_INVALID"
    assert f"U+{point:04X}" in caught.value.message


@given(valid_keys, st.sampled_from(["..", ".", ""]), st.data())
def test_a_dot_dot_dot_or_empty_segment_anywhere_is_refused(
    key: str, bad_segment: str, data: st.DataObject
) -> None:
    parts = key.split("/")
    parts.insert(data.draw(st.integers(0, len(parts))), bad_segment)
    with pytest.raises(XError) as caught:
        check_key("/".join(parts))
    assert caught.value.code == "X_STORAGE_KEY_INVALID"


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_each_listed_invalid_key_is_refused(key: str) -> None:
    with pytest.raises(XError) as caught:
        check_key(key)
    assert caught.value.code == "X_STORAGE_KEY_INVALID"
    assert caught.value.meta["key"] == key


def test_the_empty_prefix_lists_everything_but_the_empty_key_is_refused() -> None:
    assert check_prefix("") == ""
    with pytest.raises(XError):
        check_key("")
