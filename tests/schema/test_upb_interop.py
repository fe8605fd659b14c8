"""Byte-level interop between the betterproto2 stubs and google's upb classes.

Each corpus entry builds the same message twice, independently: once with the betterproto2
classes and once with the upb classes compiled at test time from the same protos (the ``upb``
fixture). The wire bytes must be equal (maps: equal after parsing, since map entry order is
unspecified), each side must decode the other's bytes to an equal message, and betterproto2's
proto3 JSON must be accepted by ``google.protobuf.json_format`` with the same result.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import betterproto2
import pytest
from google.protobuf import json_format

from protocol_py.codec.structs import from_struct, to_struct
from protocol_py_gen.common.v1 import CallContext, HookPoint
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    Stability,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CacheBreakpoint,
    Capabilities,
    ErrorKind,
    GenerationParams,
    ModelError,
    ModelSpec,
    RateLimitKind,
    RateLimitSnapshot,
    SafetyKind,
    SafetyNotice,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamMetadata,
    ThinkingSignature,
    ToolChoice,
    ToolChoiceMode,
    ToolDeclaration,
    Usage,
)

if TYPE_CHECKING:
    from conftest import UpbClasses

SIGNATURE = b"\x80\xffsig\x00\xc3(EqbA=="  # not UTF-8: carried verbatim (docs/decisions.md#d6)
TOOL_INPUT = {"city": "Zürich", "days": 3, "units": "metric", "when": None, "z": [1.5, True]}
SCHEMA = {
    "properties": {"city": {"type": "string"}, "days": {"minimum": 1, "type": "integer"}},
    "required": ["city"],
    "type": "object",
}
RESETS_AT = datetime.datetime(2026, 11, 29, 15, 0, 0, 250000, tzinfo=datetime.UTC)
RETRY_AFTER = datetime.timedelta(seconds=2, microseconds=500000)


# --- the corpus: (betterproto2 builder, upb builder) per entry -------------------------------


def bp_stop_empty() -> StreamEvent:
    return StreamEvent(stop=Stop())


def pb_stop_empty(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.stop.SetInParent()
    return event


def bp_after_tools() -> CacheBreakpoint:
    return CacheBreakpoint(after_tools=Empty())


def pb_after_tools(u: UpbClasses) -> Any:
    marker = u.message("model.v1.CacheBreakpoint")()
    marker.after_tools.SetInParent()
    return marker


def bp_after_message_zero() -> CacheBreakpoint:
    return CacheBreakpoint(after_message_index=0)


def pb_after_message_zero(u: UpbClasses) -> Any:
    return u.message("model.v1.CacheBreakpoint")(after_message_index=0)


def bp_budget_zero() -> BudgetControl:
    return BudgetControl(default=0)


def pb_budget_zero(u: UpbClasses) -> Any:
    return u.message("model.v1.BudgetControl")(default=0)


def bp_usage_zero_optionals() -> StreamEvent:
    return StreamEvent(
        usage=Usage(
            input_tokens=0,
            output_tokens=12,
            cache_read_tokens=0,
            cache_write_tokens=0,
            reasoning_tokens=0,
            reasoning_already_counted=False,
        )
    )


def pb_usage_zero_optionals(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.usage.output_tokens = 12
    event.usage.cache_read_tokens = 0
    event.usage.cache_write_tokens = 0
    event.usage.reasoning_tokens = 0
    event.usage.reasoning_already_counted = False
    return event


def bp_stop_not_affirmed() -> StreamEvent:
    return StreamEvent(
        stop=Stop(reason=StopReason.END_TURN, model_affirmed=False, vendor_reason="pause_turn")
    )


def pb_stop_not_affirmed(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.stop.reason = u.modules["model.v1.types_pb2"].STOP_REASON_END_TURN
    event.stop.model_affirmed = False
    event.stop.vendor_reason = "pause_turn"
    return event


def bp_tool_use() -> ContentBlock:
    return ContentBlock(
        tool_use=ToolUseBlock(id="call_1", name="get_weather", input=to_struct(TOOL_INPUT))
    )


def pb_tool_use(u: UpbClasses) -> Any:
    block = u.message("content.v1.ContentBlock")()
    block.tool_use.id = "call_1"
    block.tool_use.name = "get_weather"
    block.tool_use.input.update(TOOL_INPUT)
    return block


def bp_thinking() -> ContentBlock:
    return ContentBlock(thinking=ThinkingBlock(text="Let me think.", signature=SIGNATURE))


def pb_thinking(u: UpbClasses) -> Any:
    block = u.message("content.v1.ContentBlock")()
    block.thinking.text = "Let me think."
    block.thinking.signature = SIGNATURE
    return block


def bp_signature_event() -> StreamEvent:
    return StreamEvent(thinking_signature=ThinkingSignature(signature=SIGNATURE))


def pb_signature_event(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.thinking_signature.signature = SIGNATURE
    return event


def bp_metadata_map() -> StreamEvent:
    return StreamEvent(
        metadata=StreamMetadata(
            actual_model="gpt-5-2026-08-07",
            rate_limits=[
                RateLimitSnapshot(
                    kind=RateLimitKind.TOKENS, limit=0, remaining=0, resets_at=RESETS_AT
                )
            ],
            attrs={"zeta": "last", "alpha": "first", "mid": ""},
        )
    )


def pb_metadata_map(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.metadata.actual_model = "gpt-5-2026-08-07"
    snapshot = event.metadata.rate_limits.add()
    snapshot.kind = u.modules["model.v1.types_pb2"].RATE_LIMIT_KIND_TOKENS
    snapshot.limit = 0
    snapshot.remaining = 0
    snapshot.resets_at.FromDatetime(RESETS_AT)
    for key, value in {"mid": "", "alpha": "first", "zeta": "last"}.items():
        event.metadata.attrs[key] = value
    return event


def bp_safety_map() -> StreamEvent:
    return StreamEvent(
        safety_notice=SafetyNotice(
            kind=SafetyKind.MODERATION, message="", attrs={"b": "2", "a": "1"}
        )
    )


def pb_safety_map(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.safety_notice.kind = u.modules["model.v1.types_pb2"].SAFETY_KIND_MODERATION
    event.safety_notice.message = ""
    event.safety_notice.attrs["a"] = "1"
    event.safety_notice.attrs["b"] = "2"
    return event


def bp_repeated_enums() -> Capabilities:
    return Capabilities(
        models=[
            ModelSpec(
                id="m",
                supported_tool_choice_modes=[
                    ToolChoiceMode.SPECIFIC,
                    ToolChoiceMode.AUTO,
                    ToolChoiceMode.NONE,
                ],
            )
        ],
        supported_hook_points=[HookPoint.POST_TOOL_CALL, HookPoint.SESSION_START],
        protocol_version="1.0",
    )


def pb_repeated_enums(u: UpbClasses) -> Any:
    model_pb = u.modules["model.v1.types_pb2"]
    common_pb = u.modules["common.v1.types_pb2"]
    caps = u.message("model.v1.Capabilities")(protocol_version="1.0")
    spec = caps.models.add(id="m")
    spec.supported_tool_choice_modes.extend(
        [
            model_pb.TOOL_CHOICE_MODE_SPECIFIC,
            model_pb.TOOL_CHOICE_MODE_AUTO,
            model_pb.TOOL_CHOICE_MODE_NONE,
        ]
    )
    caps.supported_hook_points.extend(
        [common_pb.HOOK_POINT_POST_TOOL_CALL, common_pb.HOOK_POINT_SESSION_START]
    )
    return caps


def bp_error() -> StreamEvent:
    return StreamEvent(
        error=ModelError(
            kind=ErrorKind.RATE_LIMITED,
            message="slow down",
            retryable=True,
            retry_after=RETRY_AFTER,
            http_status=429,
            vendor_code="rate_limit_exceeded",
        )
    )


def pb_error(u: UpbClasses) -> Any:
    event = u.message("model.v1.StreamEvent")()
    event.error.kind = u.modules["model.v1.types_pb2"].ERROR_KIND_RATE_LIMITED
    event.error.message = "slow down"
    event.error.retryable = True
    event.error.retry_after.FromTimedelta(RETRY_AFTER)
    event.error.http_status = 429
    event.error.vendor_code = "rate_limit_exceeded"
    return event


def bp_request() -> StreamCompletionRequest:
    """A full request: every StreamCompletionRequest field, every content block kind."""
    return StreamCompletionRequest(
        messages=[
            Message(
                role=Role.USER,
                id="01JDQ0000000000000000000U1",
                content=[
                    ContentBlock(text=TextBlock(text="What's the weather in Zürich?")),
                    ContentBlock(
                        image=ImageBlock(data=b"\x89PNG\r\n\x1a\n", media_type="image/png")
                    ),
                    ContentBlock(
                        document=DocumentBlock(
                            data=b"%PDF-1.7", media_type="application/pdf", filename=""
                        )
                    ),
                ],
            ),
            Message(
                role=Role.ASSISTANT,
                id="01JDQ0000000000000000000A1",
                produced_by_model_id="claude-opus-5",
                produced_by_provider="anthropic",
                content=[
                    ContentBlock(thinking=ThinkingBlock(text="Use the tool.", signature=SIGNATURE)),
                    ContentBlock(redacted_thinking=RedactedThinkingBlock(data=b"\x00\xfe")),
                    ContentBlock(
                        tool_use=ToolUseBlock(
                            id="toolu_1", name="get_weather", input=to_struct(TOOL_INPUT)
                        )
                    ),
                ],
            ),
            Message(
                role=Role.USER,
                id="01JDQ0000000000000000000U2",
                content=[
                    ContentBlock(
                        tool_result=ToolResultBlock(
                            tool_use_id="toolu_1",
                            content=[ContentBlock(text=TextBlock(text="12°C, rain"))],
                            is_error=False,
                        )
                    )
                ],
            ),
        ],
        model_id="claude-opus-5",
        tools=[
            ToolDeclaration(
                name="get_weather", description="Current weather.", input_schema=to_struct(SCHEMA)
            )
        ],
        params=GenerationParams(
            thinking_effort="high",
            thinking_budget_tokens=0,
            max_output_tokens=4096,
            temperature=0.0,
            stop_sequences=["\n\nHuman:"],
            tool_choice=ToolChoice(mode=ToolChoiceMode.SPECIFIC, tool_name="get_weather"),
            disable_thinking=False,
        ),
        assembled_context=[
            ContextSection(
                provider="memory",
                label="CLAUDE.md",
                content=[ContentBlock(text=TextBlock(text="Be brief."))],
                tokens=0,
                stability=Stability.STATIC,
            )
        ],
        call_context=CallContext(session_id="s1", turn_id="t1", working_directory="/w"),
        cache_breakpoints=[
            CacheBreakpoint(after_assembled_context=Empty()),
            CacheBreakpoint(after_tools=Empty()),
            CacheBreakpoint(after_message_index=0),
        ],
        provider_options=to_struct({"anthropic": {"beta": ["x"]}}),
    )


def pb_request(u: UpbClasses) -> Any:
    model_pb = u.modules["model.v1.types_pb2"]
    content_pb = u.modules["content.v1.types_pb2"]
    req = u.message("model.v1.StreamCompletionRequest")(model_id="claude-opus-5")

    user = req.messages.add(role=content_pb.ROLE_USER, id="01JDQ0000000000000000000U1")
    user.content.add().text.text = "What's the weather in Zürich?"
    image = user.content.add().image
    image.data = b"\x89PNG\r\n\x1a\n"
    image.media_type = "image/png"
    document = user.content.add().document
    document.data = b"%PDF-1.7"
    document.media_type = "application/pdf"
    document.filename = ""

    assistant = req.messages.add(role=content_pb.ROLE_ASSISTANT, id="01JDQ0000000000000000000A1")
    assistant.produced_by_model_id = "claude-opus-5"
    assistant.produced_by_provider = "anthropic"
    thinking = assistant.content.add().thinking
    thinking.text = "Use the tool."
    thinking.signature = SIGNATURE
    assistant.content.add().redacted_thinking.data = b"\x00\xfe"
    tool_use = assistant.content.add().tool_use
    tool_use.id = "toolu_1"
    tool_use.name = "get_weather"
    tool_use.input.update(TOOL_INPUT)

    result_msg = req.messages.add(role=content_pb.ROLE_USER, id="01JDQ0000000000000000000U2")
    result = result_msg.content.add().tool_result
    result.tool_use_id = "toolu_1"
    result.content.add().text.text = "12°C, rain"
    result.is_error = False

    tool = req.tools.add(name="get_weather", description="Current weather.")
    tool.input_schema.update(SCHEMA)

    req.params.thinking_effort = "high"
    req.params.thinking_budget_tokens = 0
    req.params.max_output_tokens = 4096
    req.params.temperature = 0.0
    req.params.stop_sequences.append("\n\nHuman:")
    req.params.tool_choice.mode = model_pb.TOOL_CHOICE_MODE_SPECIFIC
    req.params.tool_choice.tool_name = "get_weather"
    req.params.disable_thinking = False

    section = req.assembled_context.add(provider="memory", label="CLAUDE.md")
    section.content.add().text.text = "Be brief."
    section.tokens = 0
    section.stability = content_pb.STABILITY_STATIC

    req.call_context.session_id = "s1"
    req.call_context.turn_id = "t1"
    req.call_context.working_directory = "/w"

    req.cache_breakpoints.add().after_assembled_context.SetInParent()
    req.cache_breakpoints.add().after_tools.SetInParent()
    req.cache_breakpoints.add().after_message_index = 0

    req.provider_options.update({"anthropic": {"beta": ["x"]}})
    return req


Builder = tuple[Callable[[], betterproto2.Message], Callable[["UpbClasses"], Any], bool]

# name -> (betterproto2 builder, upb builder, holds a map whose entries are out of key order).
# Struct objects here list their keys in sorted order, so even they compare byte for byte.
CORPUS: dict[str, Builder] = {
    "stop_empty_oneof_member": (bp_stop_empty, pb_stop_empty, False),
    "after_tools_empty_marker": (bp_after_tools, pb_after_tools, False),
    "after_message_index_zero": (bp_after_message_zero, pb_after_message_zero, False),
    "budget_default_explicit_zero": (bp_budget_zero, pb_budget_zero, False),
    "usage_explicit_zero_optionals": (bp_usage_zero_optionals, pb_usage_zero_optionals, False),
    "stop_model_affirmed_false": (bp_stop_not_affirmed, pb_stop_not_affirmed, False),
    "tool_use_struct_input": (bp_tool_use, pb_tool_use, False),
    "thinking_bytes_signature": (bp_thinking, pb_thinking, False),
    "thinking_signature_event": (bp_signature_event, pb_signature_event, False),
    "metadata_attrs_map": (bp_metadata_map, pb_metadata_map, True),
    "safety_notice_attrs_map": (bp_safety_map, pb_safety_map, True),
    "repeated_enums": (bp_repeated_enums, pb_repeated_enums, False),
    "error_with_duration": (bp_error, pb_error, False),
    "full_stream_completion_request": (bp_request, pb_request, False),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bytes_equal_upb(upb: UpbClasses, name: str) -> None:
    bp_build, pb_build, unordered_map = CORPUS[name]
    ours, theirs = bp_build(), pb_build(upb)
    data, upb_data = bytes(ours), theirs.SerializeToString(deterministic=True)
    if unordered_map:
        # Map entries may come in any order: equal sizes, and equal after parsing both ways.
        assert len(data) == len(upb_data)
        assert type(theirs).FromString(data) == theirs
    else:
        assert data == upb_data
    assert type(ours).parse(upb_data) == ours


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_betterproto2_json_accepted_by_google(upb: UpbClasses, name: str) -> None:
    bp_build, pb_build, _ = CORPUS[name]
    ours, theirs = bp_build(), pb_build(upb)
    assert json_format.Parse(ours.to_json(), type(theirs)()) == theirs
    assert type(ours).from_dict(json_format.MessageToDict(theirs)) == ours


def test_exact_bytes_of_presence_cases() -> None:
    assert bytes(bp_stop_empty()).hex() == "6200"
    assert bytes(bp_after_tools()).hex() == "1200"
    assert bytes(bp_after_message_zero()).hex() == "1800"
    assert bytes(bp_budget_zero()).hex() == "1000"
    assert bytes(BudgetControl()).hex() == ""
    # Packed repeated enum: tag 0x5a (field 11, length-delimited), values 4, 1, 3.
    modes = [ToolChoiceMode.SPECIFIC, ToolChoiceMode.AUTO, ToolChoiceMode.NONE]
    assert bytes(ModelSpec(supported_tool_choice_modes=modes)).hex() == "5a03040103"


def test_enum_json_names_carry_the_prefix() -> None:
    as_dict = bp_stop_not_affirmed().to_dict()
    assert as_dict == {
        "stop": {
            "reason": "STOP_REASON_END_TURN",
            "modelAffirmed": False,
            "vendorReason": "pause_turn",
        }
    }
    assert bp_repeated_enums().to_dict()["supportedHookPoints"] == [
        "HOOK_POINT_POST_TOOL_CALL",
        "HOOK_POINT_SESSION_START",
    ]


def test_bytes_fields_are_standard_base64_in_json() -> None:
    assert bp_signature_event().to_dict() == {
        "thinkingSignature": {"signature": "gP9zaWcAwyhFcWJBPT0="}
    }
    assert StreamEvent.from_dict(bp_signature_event().to_dict()).thinking_signature == (
        ThinkingSignature(signature=SIGNATURE)
    )


def test_struct_tool_input_survives_both_decoders(upb: UpbClasses) -> None:
    data = bytes(bp_tool_use())
    ours = ContentBlock.parse(data)
    assert ours.tool_use is not None
    ours_json = from_struct(ours.tool_use.input)
    assert ours_json == TOOL_INPUT
    # integral numbers come back as integers (docs/decisions.md#d5)
    assert type(ours_json["days"]) is int
    theirs = upb.message("content.v1.ContentBlock").FromString(data)
    theirs_json = json_format.MessageToDict(theirs.tool_use.input)
    assert theirs_json == TOOL_INPUT
    assert type(theirs_json["days"]) is float  # google's decoder keeps the double
