"""Validation rules added for tester 3 finding #8 (rule ids: see validation.md)."""

from __future__ import annotations

import pytest

from protocol_py.errors import errors_only
from protocol_py.rules.validation import (
    validate_capabilities,
    validate_model_spec,
    validate_request,
    validate_request_shape,
)
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import (
    BudgetControl,
    Capabilities,
    EffortControl,
    GenerationParams,
    ThinkingDisable,
    ThinkingSpec,
    TokenRange,
)

from .test_validation import make_request, make_spec, rules, text_message


def conditional_spec(allowed: list[str]) -> ThinkingSpec:
    return ThinkingSpec(
        supported=True,
        effort=EffortControl(levels=["low", "medium", "high"], default="medium"),
        budget=BudgetControl(range=TokenRange(min=1024, max=8192)),
        disable=ThinkingDisable.CONDITIONAL,
        disable_allowed_efforts=allowed,
    )


def test_duplicate_disable_allowed_effort_is_a_violation() -> None:
    spec = make_spec(thinking=conditional_spec(["low", "medium", "low", "low"]))
    assert rules(validate_model_spec(spec)) == [
        ("thinking.disable_allowed_efforts[2]", "thinking.disable_allowed_efforts.duplicate"),
        ("thinking.disable_allowed_efforts[3]", "thinking.disable_allowed_efforts.duplicate"),
    ]


@pytest.mark.parametrize("version", ["2.0", "0.9", "10.0"])
def test_other_major_protocol_version_is_incompatible(version: str) -> None:
    caps = Capabilities(protocol_version=version, models=[make_spec()])
    violations = validate_capabilities(caps)
    assert rules(violations) == [("protocol_version", "capabilities.protocol_version.incompatible")]
    assert violations[0].severity == "error"
    assert f"{version!r}" in violations[0].message and PROTOCOL_VERSION in violations[0].message


def test_newer_minor_protocol_version_is_only_a_warning() -> None:
    caps = Capabilities(protocol_version="1.3", models=[make_spec()])
    violations = validate_capabilities(caps)
    assert rules(violations) == [("protocol_version", "capabilities.protocol_version.newer_minor")]
    assert violations[0].severity == "warning"
    assert errors_only(violations) == []


def test_our_own_protocol_version_has_no_violation() -> None:
    assert validate_capabilities(Capabilities(protocol_version="1.0", models=[make_spec()])) == []


def test_disable_thinking_with_a_budget_is_rejected_even_without_a_model() -> None:
    request = make_request(
        params=GenerationParams(
            disable_thinking=True, thinking_effort="low", thinking_budget_tokens=2000
        )
    )
    expected = [("params.disable_thinking", "request.params.disable_thinking.with_budget")]
    assert rules(validate_request(request, make_spec())) == expected
    assert rules(validate_request_shape(request)) == expected


def test_disable_thinking_with_an_allowed_effort_stays_valid() -> None:
    request = make_request(params=GenerationParams(disable_thinking=True, thinking_effort="low"))
    assert validate_request(request, make_spec()) == []


def test_budget_without_disable_thinking_stays_valid() -> None:
    request = make_request(
        params=GenerationParams(disable_thinking=False, thinking_budget_tokens=2000)
    )
    assert validate_request(request, make_spec()) == []


def tool_use(call_id: str = "c1") -> ContentBlock:
    return ContentBlock(tool_use=ToolUseBlock(id=call_id, name="x"))


def tool_result(call_id: str = "c1") -> ContentBlock:
    return ContentBlock(
        tool_result=ToolResultBlock(
            tool_use_id=call_id, content=[ContentBlock(text=TextBlock(text="ok"))]
        )
    )


def test_tool_use_in_a_user_message_is_a_violation() -> None:
    request = make_request(
        messages=[text_message("01A"), Message(id="01B", role=Role.USER, content=[tool_use()])]
    )
    assert rules(validate_request(request, make_spec())) == [
        ("messages[1].content[0].tool_use", "request.content.tool_use_in_user_message")
    ]


def test_tool_result_in_an_assistant_message_is_a_violation() -> None:
    request = make_request(
        messages=[
            text_message("01A"),
            Message(id="01B", role=Role.ASSISTANT, content=[tool_use()]),
            Message(id="01C", role=Role.ASSISTANT, content=[tool_result()]),
        ]
    )
    assert rules(validate_request_shape(request)) == [
        ("messages[2].content[0].tool_result", "request.content.tool_result_in_assistant_message")
    ]


def test_tool_use_by_assistant_answered_by_user_is_valid() -> None:
    request = make_request(
        messages=[
            text_message("01A"),
            Message(id="01B", role=Role.ASSISTANT, content=[tool_use()]),
            Message(id="01C", role=Role.USER, content=[tool_result()]),
        ]
    )
    assert validate_request(request, make_spec()) == []


def test_message_without_content_is_a_violation() -> None:
    request = make_request(
        messages=[text_message("01A"), Message(id="01B", role=Role.ASSISTANT, content=[])]
    )
    assert rules(validate_request_shape(request)) == [
        ("messages[1].content", "request.message.content_empty")
    ]
