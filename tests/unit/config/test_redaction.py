"""Masking registered secret values in text and in JSON-ready data: no value survives, whatever surrounds it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from berth.config import redaction
from berth.config.redaction import MASK, holds_secret, redact, redact_value
from berth.testing.secrets import only_registered

SECRETS = st.text(min_size=4, max_size=24)


def strings_of(value: Any) -> Iterator[str]:
    """Every string of a JSON-ready value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_of(key)
            yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)


@given(secret=SECRETS, before=st.text(max_size=12), after=st.text(max_size=12), times=st.integers(1, 3))
def test_no_registered_value_survives_in_text(secret: str, before: str, after: str, times: int) -> None:
    with only_registered(secret):
        masked = redact(before + (secret + after) * times)
        assert secret not in masked
        assert MASK in masked


def test_a_value_masking_makes_anew_is_masked_too() -> None:
    with only_registered("x***"):
        assert redact("xx***") == MASK


@given(secret=SECRETS, data=st.data())
def test_no_string_of_json_data_keeps_a_registered_value(secret: str, data: st.DataObject) -> None:
    holding = st.text(max_size=6).map(lambda around: around + secret + around)
    texts = st.one_of(st.text(max_size=8), holding)
    value = data.draw(
        st.recursive(
            st.none() | st.booleans() | st.integers() | texts,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
            max_leaves=10,
        )
    )
    with only_registered(secret):
        assert not any(secret in text for text in strings_of(redact_value(value)))


def test_objects_go_through_str_and_numbers_stay() -> None:
    class Holder:
        def __str__(self) -> str:
            return "holder of s3cr3t-value"

    with only_registered("s3cr3t-value"):
        masked = redact_value({"h": Holder(), "n": 7, "t": ("a s3cr3t-value",)})
    assert masked == {"h": "holder of ***", "n": 7, "t": ["a ***"]}


def test_a_value_is_found_in_json_text_as_json_escapes_it() -> None:
    with only_registered('pa"ss\\word\n'):
        assert holds_secret('{"k":"pa\\"ss\\\\word\\n"}')
        assert not holds_secret('{"k":"password"}')


def test_nothing_is_masked_and_nothing_searched_while_no_value_is_registered() -> None:
    with only_registered():
        assert redaction.secret_needles() == ()
        assert not holds_secret("anything at all")
        value = {"a": ["b"]}
        assert redact_value(value) is value


def test_values_shorter_than_four_characters_are_not_registered() -> None:
    with only_registered("abc"):
        assert redact("abc abc") == "abc abc"
