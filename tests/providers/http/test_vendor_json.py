"""The nesting bound of the vendor JSON parser (``providers/http/vendor_json.py``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol_py.providers.http.vendor_json import (
    MAX_VENDOR_JSON_DEPTH,
    VendorJSONDepthError,
    json_depth_exceeds,
    loads,
    malformed_event_message,
)


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_json_at_the_bound_parses_and_one_level_more_is_refused() -> None:
    assert loads(_nested(MAX_VENDOR_JSON_DEPTH))["a"] is not None
    with pytest.raises(VendorJSONDepthError, match="nested deeper than 128 levels"):
        loads(_nested(MAX_VENDOR_JSON_DEPTH + 1))


def test_depth_error_is_a_value_error_and_never_a_recursion_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError) as info:
        loads(deep.encode())
    assert isinstance(info.value, VendorJSONDepthError)
    assert malformed_event_message(info.value).endswith("(JSON nested deeper than 128 levels)")


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"text": "[" * 10_000 + '\\"{' * 1000, "list": [[["x"]]]})
    assert not json_depth_exceeds(text)
    assert loads(text)["list"] == [[["x"]]]


def test_escaped_quote_does_not_end_a_string() -> None:
    text = '["\\"' + "[" * 500 + '"]'
    assert not json_depth_exceeds(text)
    assert loads(text) == ['"' + "[" * 500]


def test_unterminated_string_is_left_to_json_loads() -> None:
    text = '["' + "[" * 500
    assert not json_depth_exceeds(text)
    with pytest.raises(json.JSONDecodeError):
        loads(text)


def test_many_shallow_siblings_are_not_deep() -> None:
    text = "[" + ",".join(["[1]"] * 10_000) + "]"
    assert not json_depth_exceeds(text)
    assert len(loads(text)) == 10_000


def test_malformed_message_names_no_bound_for_other_errors() -> None:
    with pytest.raises(ValueError) as info:
        loads("{nope")
    assert malformed_event_message(info.value) == "malformed JSON in an SSE data line"


@given(st.integers(min_value=0, max_value=400), st.sampled_from(["[", '{"k":']))
def test_scan_agrees_with_the_real_depth(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    text = opener * depth + "0" + closer * depth
    assert json_depth_exceeds(text) == (depth > MAX_VENDOR_JSON_DEPTH)
