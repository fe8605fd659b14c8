"""Unit tests of the validators (protocol_py.rules.capabilities and .request) on Python messages:
rules reported together, typed errors for bad input types, unknown enum numbers, oneof misuse
only reachable from Python, paths and messages."""

from __future__ import annotations

import pytest

from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError, Violation, errors_only
from protocol_py.rules.capabilities import validate_capabilities, validate_model_spec
from protocol_py.rules.json_schema import PORTABLE_SCHEMA_KEYWORDS
from protocol_py.rules.request import validate_request
from protocol_py_gen.common.v1 import CallContext, HookPoint
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CacheBreakpoint,
    CachingSpec,
    Capabilities,
    EffortControl,
    GenerationParams,
    ModelSpec,
    Pricing,
    PricingTier,
    StreamCompletionRequest,
    ThinkingDisable,
    ThinkingSpec,
    TokenRange,
    ToolChoice,
    ToolChoiceMode,
    ToolDeclaration,
)


def make_spec(**overrides: object) -> ModelSpec:
    fields: dict[str, object] = {
        "id": "m1",
        "context_window": 100_000,
        "max_output_tokens": 4096,
        "supports_tool_use": True,
        "supports_vision": False,
        "supports_documents": False,
        "thinking": ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=["low", "medium", "high"], default="medium"),
            budget=BudgetControl(range=TokenRange(min=1024, max=8192)),
            disable=ThinkingDisable.CONDITIONAL,
            disable_allowed_efforts=["low"],
        ),
        "caching": CachingSpec(supported=True, explicit_markers=True),
        "pricing": Pricing(
            currency="USD",
            tiers=[
                PricingTier(
                    input_per_mtok=3.0,
                    output_per_mtok=15.0,
                    cache_write_per_mtok=3.75,
                    cache_read_per_mtok=0.3,
                )
            ],
        ),
        "supported_tool_choice_modes": [ToolChoiceMode.AUTO, ToolChoiceMode.SPECIFIC],
    }
    fields.update(overrides)
    return ModelSpec(**fields)  # type: ignore[arg-type]


def text_message(msg_id: str = "01A", role: Role = Role.USER, text: str = "hi") -> Message:
    return Message(id=msg_id, role=role, content=[ContentBlock(text=TextBlock(text=text))])


def make_request(**overrides: object) -> StreamCompletionRequest:
    fields: dict[str, object] = {
        "model_id": "m1",
        "messages": [text_message()],
        "call_context": CallContext(session_id="s", turn_id="t"),
    }
    fields.update(overrides)
    return StreamCompletionRequest(**fields)  # type: ignore[arg-type]


def rules(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.path, v.rule) for v in violations]


# --- ModelSpec / Capabilities ------------------------------------------------------------


def test_valid_spec_has_no_violations() -> None:
    assert validate_model_spec(make_spec()) == []


def test_all_spec_violations_reported_together_with_paths() -> None:
    spec = make_spec(
        id="",
        context_window=0,
        max_output_tokens=-5,
        thinking=ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=["low", "low"], default="ultra"),
            disable=ThinkingDisable.UNSPECIFIED,
            disable_allowed_efforts=["max"],
        ),
        caching=CachingSpec(supported=False, implicit_automatic=True),
    )
    got = sorted(rules(validate_model_spec(spec, path="models[3]")))
    assert got == sorted(
        [
            ("models[3].id", "model.id.empty"),
            ("models[3].context_window", "model.context_window.not_positive"),
            ("models[3].max_output_tokens", "model.max_output_tokens.not_positive"),
            ("models[3].thinking.disable", "thinking.disable.unspecified"),
            ("models[3].thinking.effort.levels[1]", "thinking.effort.level_duplicate"),
            ("models[3].thinking.effort.default", "thinking.effort.default_not_a_level"),
            (
                "models[3].thinking.disable_allowed_efforts",
                "thinking.disable_allowed_efforts.unexpected",
            ),
            (
                "models[3].thinking.disable_allowed_efforts[0]",
                "thinking.disable_allowed_efforts.not_a_level",
            ),
            ("models[3].caching.implicit_automatic", "caching.unsupported_with_mechanism"),
            # pricing still carries cache rates although caching.supported is now false
            (
                "models[3].pricing.tiers[0].cache_write_per_mtok",
                "pricing.tiers.cache_rate_unexpected",
            ),
            (
                "models[3].pricing.tiers[0].cache_read_per_mtok",
                "pricing.tiers.cache_rate_unexpected",
            ),
        ]
    )


def test_messages_name_the_offending_value() -> None:
    spec = make_spec(
        thinking=ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=["low"], default="turbo"),
            disable=ThinkingDisable.NEVER,
        ),
        context_window=-7,
    )
    by_rule = {v.rule: v for v in validate_model_spec(spec)}
    assert "'turbo'" in by_rule["thinking.effort.default_not_a_level"].message
    assert "-7" in by_rule["model.context_window.not_positive"].message
    line = str(by_rule["thinking.effort.default_not_a_level"])
    assert line.startswith("thinking.effort.default: thinking.effort.default_not_a_level: ")


def test_unknown_enum_numbers_are_violations_not_exceptions() -> None:
    spec = make_spec(
        supported_tool_choice_modes=[ToolChoiceMode.AUTO, 9, ToolChoiceMode(12)],
        thinking=ThinkingSpec(supported=False, disable=ThinkingDisable(5)),
    )
    got = rules(validate_model_spec(spec))
    assert ("supported_tool_choice_modes[1]", "enum.unknown_value") in got
    assert ("supported_tool_choice_modes[2]", "enum.unknown_value") in got
    assert ("thinking.disable", "enum.unknown_value") in got
    # An unknown disable value is not a positive claim that reasoning can be turned off.
    assert ("thinking.disable", "thinking.unsupported.disable") not in got


def test_missing_submessages_detected() -> None:
    spec = ModelSpec(id="x", context_window=1, max_output_tokens=1)
    assert sorted(rules(validate_model_spec(spec))) == [
        ("caching", "model.caching.missing"),
        ("pricing", "model.pricing.missing"),
        ("thinking", "model.thinking.missing"),
    ]


def test_pricing_without_caching_spec_is_checked_without_cache_context() -> None:
    # caching missing -> validate_pricing gets caching_supported=None: no cache-rate rule.
    spec = make_spec(caching=None)
    assert rules(validate_model_spec(spec)) == [("caching", "model.caching.missing")]


def test_capabilities_duplicates_and_hook_points() -> None:
    caps = Capabilities(
        models=[make_spec(), make_spec(id="m2"), make_spec()],
        supported_hook_points=[HookPoint.TURN_END, HookPoint.TURN_END, HookPoint.UNSPECIFIED],
        protocol_version="1.0.0",
    )
    assert sorted(rules(validate_capabilities(caps))) == [
        ("models[2].id", "capabilities.models.duplicate_id"),
        ("protocol_version", "capabilities.protocol_version.malformed"),
        ("supported_hook_points[1]", "capabilities.hook_points.duplicate"),
        ("supported_hook_points[2]", "capabilities.hook_points.unspecified"),
    ]
    dup = next(v for v in validate_capabilities(caps) if v.rule.endswith("duplicate_id"))
    assert "models[0]" in dup.message and "'m1'" in dup.message


def test_capabilities_config_schema_checked_against_draft_2020_12() -> None:
    caps = Capabilities(
        protocol_version="1.0",
        models=[make_spec()],
        config_schema=to_struct({"type": "object", "properties": {"a": 3}}),
    )
    assert rules(validate_capabilities(caps)) == [
        ("config_schema.properties.a", "capabilities.config_schema.invalid")
    ]
    ok = Capabilities(
        protocol_version="1.0",
        models=[make_spec()],
        config_schema=to_struct({"type": "object", "additionalProperties": False}),
    )
    assert validate_capabilities(ok) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda: validate_model_spec("not a spec"),  # type: ignore[arg-type]
        lambda: validate_model_spec(Capabilities()),  # type: ignore[arg-type]
        lambda: validate_capabilities(make_spec()),  # type: ignore[arg-type]
        lambda: validate_request(make_request(), None),  # type: ignore[arg-type]
        lambda: validate_request({"model_id": "m1"}, make_spec()),  # type: ignore[arg-type]
    ],
)
def test_wrong_argument_types_raise_typed_error(call: object) -> None:
    with pytest.raises(InvalidValueError) as info:
        call()  # type: ignore[operator]
    assert info.value.rule == "value.wrong_type"


def test_wrongly_typed_field_raises_naming_the_field() -> None:
    spec = make_spec(context_window="100")
    with pytest.raises(InvalidValueError) as info:
        validate_model_spec(spec)
    assert info.value.path == "context_window"
    assert info.value.rule == "value.wrong_type"
    thinking = ThinkingSpec(supported=True, effort=EffortControl(levels=["a", 3], default="a"))  # type: ignore[list-item]
    with pytest.raises(InvalidValueError) as info:
        validate_model_spec(make_spec(thinking=thinking))
    assert info.value.path == "thinking.effort.levels[1]"
    request = make_request(messages=[Message(id="1", role=Role.USER, content=[TextBlock()])])  # type: ignore[list-item]
    with pytest.raises(InvalidValueError) as info:
        validate_request(request, make_spec())
    assert info.value.path == "messages[0].content[0]"


# --- requests ------------------------------------------------------------------------------


def test_valid_request_has_no_violations() -> None:
    assert validate_request(make_request(), make_spec()) == []


def test_request_violations_reported_together() -> None:
    request = make_request(
        model_id="other",
        messages=[
            text_message(msg_id=""),
            Message(id="2", role=Role.USER, content=[ContentBlock(image=ImageBlock(data=b"x"))]),
        ],
        params=GenerationParams(
            thinking_effort="high",
            thinking_budget_tokens=10,
            disable_thinking=True,
            max_output_tokens=5000,
            stop_sequences=[""],
            tool_choice=ToolChoice(mode=ToolChoiceMode.ANY, tool_name="x"),
        ),
    )
    assert sorted(rules(validate_request(request, make_spec()))) == sorted(
        [
            ("model_id", "request.model_id.mismatch"),
            ("messages[0].id", "request.message.id_missing"),
            ("messages[1].content[0].image", "request.content.image_unsupported"),
            ("messages[1].content[0].image.media_type", "request.content.media_type_empty"),
            ("params.thinking_budget_tokens", "request.params.thinking_budget_tokens.out_of_range"),
            ("params.disable_thinking", "request.params.disable_thinking.effort_not_allowed"),
            ("params.disable_thinking", "request.params.disable_thinking.with_budget"),
            ("params.max_output_tokens", "request.params.max_output_tokens.above_model_max"),
            ("params.stop_sequences[0]", "request.params.stop_sequences.empty"),
            ("params.tool_choice.mode", "request.params.tool_choice.mode_unsupported"),
            ("params.tool_choice.tool_name", "request.params.tool_choice.tool_name_unexpected"),
        ]
    )


def test_disable_message_names_requested_or_default_effort() -> None:
    spec = make_spec()
    requested = make_request(params=GenerationParams(disable_thinking=True, thinking_effort="high"))
    (v,) = validate_request(requested, spec)
    assert "requested effort is 'high'" in v.message and "['low']" in v.message
    default = make_request(params=GenerationParams(disable_thinking=True))
    (v,) = validate_request(default, spec)
    assert "default effort is 'medium'" in v.message
    allowed = make_request(params=GenerationParams(disable_thinking=True, thinking_effort="low"))
    assert validate_request(allowed, spec) == []


def test_content_block_with_two_members_is_rejected() -> None:
    # Only reachable from Python: betterproto2 does not clear the first member on assignment.
    block = ContentBlock(text=TextBlock(text="a"))
    block.image = ImageBlock(data=b"x", media_type="image/png")
    request = make_request(messages=[Message(id="1", role=Role.USER, content=[block])])
    assert rules(validate_request(request, make_spec())) == [
        ("messages[0].content[0]", "request.content.block_multiple")
    ]
    (violation,) = validate_request(request, make_spec())
    assert "found text, image" in violation.message


def test_cache_breakpoint_with_two_positions_is_rejected() -> None:
    bp = CacheBreakpoint(after_tools=Empty())
    bp.after_message_index = 0
    request = make_request(cache_breakpoints=[bp, CacheBreakpoint(after_message_index=0)])
    assert rules(validate_request(request, make_spec())) == [
        ("cache_breakpoints[0]", "request.cache_breakpoints.position_multiple")
    ]


def test_tool_result_must_answer_an_earlier_message() -> None:
    use = ContentBlock(tool_use=ToolUseBlock(id="call_1", name="f", input=to_struct({})))
    result = ContentBlock(tool_result=ToolResultBlock(tool_use_id="call_1"))
    ok = make_request(
        messages=[
            Message(id="1", role=Role.ASSISTANT, content=[use]),
            Message(id="2", role=Role.USER, content=[result]),
        ]
    )
    assert validate_request(ok, make_spec()) == []
    reversed_order = make_request(
        messages=[
            Message(id="1", role=Role.USER, content=[result]),
            Message(id="2", role=Role.ASSISTANT, content=[use]),
        ]
    )
    assert rules(validate_request(reversed_order, make_spec())) == [
        ("messages[0].content[0].tool_result.tool_use_id", "request.content.tool_result_unknown_id")
    ]


def test_schema_warnings_do_not_invalidate_and_errors_only_filters_them() -> None:
    schema = {
        "type": "object",
        "properties": {
            "enum": {"type": "string", "enum": ["a"], "default": "a"},
            "items": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        },
        "required": ["enum"],
        "additionalProperties": False,
    }
    request = make_request(tools=[ToolDeclaration(name="f", input_schema=to_struct(schema))])
    violations = validate_request(request, make_spec())
    assert sorted((v.path, v.severity) for v in violations) == [
        ("tools[0].input_schema.additionalProperties", "warning"),
        ("tools[0].input_schema.properties.enum.default", "warning"),
        ("tools[0].input_schema.properties.items.items.maxLength", "warning"),
    ]
    assert {v.rule for v in violations} == {"request.tools.input_schema.non_portable"}
    assert errors_only(violations) == []
    assert {
        "type",
        "properties",
        "required",
        "enum",
        "items",
        "description",
    } == PORTABLE_SCHEMA_KEYWORDS


def test_breakpoints_ignored_when_model_has_no_explicit_markers() -> None:
    bad = [CacheBreakpoint(after_message_index=99), CacheBreakpoint()]
    spec = make_spec(caching=CachingSpec(supported=True, implicit_automatic=True))
    assert validate_request(make_request(cache_breakpoints=bad), spec) == []
    assert sorted(rules(validate_request(make_request(cache_breakpoints=bad), make_spec()))) == [
        (
            "cache_breakpoints[0].after_message_index",
            "request.cache_breakpoints.index_out_of_range",
        ),
        ("cache_breakpoints[1]", "request.cache_breakpoints.position_unset"),
    ]


def test_request_against_spec_missing_thinking_treats_it_as_unsupported() -> None:
    spec = make_spec(thinking=None)
    request = make_request(params=GenerationParams(thinking_effort="low"))
    assert rules(validate_request(request, spec)) == [
        ("params.thinking_effort", "request.params.thinking_effort.unsupported")
    ]


def test_integer_outside_its_proto_range_raises() -> None:
    with pytest.raises(InvalidValueError) as info:
        validate_model_spec(make_spec(max_output_tokens=2**63))
    assert (info.value.path, info.value.rule) == ("max_output_tokens", "value.out_of_range")
    request = make_request(params=GenerationParams(thinking_budget_tokens=-(2**63) - 1))
    with pytest.raises(InvalidValueError) as info:
        validate_request(request, make_spec())
    assert info.value.path == "params.thinking_budget_tokens"
