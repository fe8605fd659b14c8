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


def test_wide_and_deep_siblings_are_measured_exactly() -> None:
    at_bound = "[" + ",".join(["[" * 127 + "]" * 127] * 50) + "]"
    assert not json_depth_exceeds(at_bound)
    over = "[" + ",".join(["[" * 127 + "]" * 127] * 49 + ["[" * 128 + "]" * 128]) + "]"
    assert json_depth_exceeds(over)


def test_truncated_deep_text_counts_its_unclosed_levels() -> None:
    assert json_depth_exceeds("[" * (MAX_VENDOR_JSON_DEPTH + 1))
    assert not json_depth_exceeds('{"a": [' + "1," * 1000)


def test_bytes_and_escaped_backslashes_are_measured_like_text() -> None:
    deep = '["\\\\"' + "," + "[" * 200 + "]" * 200 + "]"  # the string holds one backslash
    assert json_depth_exceeds(deep) and json_depth_exceeds(deep.encode())
    with pytest.raises(VendorJSONDepthError):
        loads(deep.encode())


@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='[]{}"\\ab'),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=40,
    ),
    st.integers(min_value=1, max_value=12),
)
def test_scan_agrees_with_the_depth_of_any_document(value: object, limit: int) -> None:
    def depth(v: object) -> int:
        if isinstance(v, list):
            return 1 + max((depth(i) for i in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(i) for i in v.values()), default=0)
        return 0

    text = json.dumps(value)
    assert json_depth_exceeds(text, limit) == (depth(value) > limit)
