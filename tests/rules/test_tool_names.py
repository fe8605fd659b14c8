"""Tool names: the vendors' shared rule (1-64 characters of A-Z a-z 0-9 _ -, first a letter or
_), checked in O(1) for a name of any size, with a violation whose message stays bounded."""

from __future__ import annotations

import pytest

from protocol_py.bounded_text import MAX_ERROR_MESSAGE_BYTES
from protocol_py.rules.request import (
    MAX_TOOL_NAME_CHARS,
    valid_tool_name,
    validate_request,
    validate_request_shape,
)
from protocol_py_gen.model.v1 import ToolDeclaration

from .test_validation import make_request, make_spec, rules


@pytest.mark.parametrize("name", ["get_weather", "a", "A-b_9", "_x", "x" * MAX_TOOL_NAME_CHARS])
def test_names_the_vendors_accept_are_valid(name: str) -> None:
    assert valid_tool_name(name)
    assert validate_request(make_request(tools=[ToolDeclaration(name=name)]), make_spec()) == []


@pytest.mark.parametrize(
    "name",
    [
        "x" * (MAX_TOOL_NAME_CHARS + 1),
        "get weather",
        "get.weather",
        "caf\u00e9",
        "a\nb",
        "1x",
        "-x",
    ],
)
def test_names_the_vendors_refuse_are_a_violation(name: str) -> None:
    request = make_request(tools=[ToolDeclaration(name=name)])
    expected = [("tools[0].name", "request.tools.name_invalid")]
    assert rules(validate_request(request, make_spec())) == expected
    assert rules(validate_request_shape(request)) == expected


def test_a_huge_name_is_refused_with_a_bounded_message() -> None:
    name = "!" * (16 << 20)
    request = make_request(tools=[ToolDeclaration(name=name)])
    (violation,) = validate_request_shape(request)
    assert violation.rule == "request.tools.name_invalid"
    assert f"({len(name)} chars, cut) must be 1-64 characters" in violation.message  # once
    assert violation.message.count(str(len(name))) == 1
    assert len(violation.message.encode()) < MAX_ERROR_MESSAGE_BYTES
    (short,) = validate_request_shape(make_request(tools=[ToolDeclaration(name="a b")]))
    assert short.message.startswith("tool name 'a b' (3 characters) must be 1-64 characters")
