"""StreamCompletionRequest rules (``validate_request``, ``validate_request_shape``): thinking
disabled with a budget, tool use and tool result roles, messages without content, Structs that
cannot be JSON (NaN in a tool_use input), the model-independent request shape, temperature and
duplicate message ids."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from protocol_py.codec import protojson
from protocol_py.codec.structs import to_struct
from protocol_py.errors import errors_only
from protocol_py.rules.request import (
    MAX_TOOL_SCHEMA_VALUES,
    tool_schemas_exceed,
    validate_request,
    validate_request_shape,
)
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import ListValue, Struct, Value
from protocol_py_gen.model.v1 import (
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingSpec,
    ToolDeclaration,
)

from .test_validation import make_request, make_spec, rules, text_message


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


CONFORMANCE = Path(__file__).resolve().parents[2] / "testdata" / "conformance"


def tool_use_request(struct: Struct) -> StreamCompletionRequest:
    return make_request(
        tools=[ToolDeclaration(name="x", input_schema=to_struct({"type": "object"}))],
        messages=[
            text_message("01A"),
            Message(
                id="01B",
                role=Role.ASSISTANT,
                content=[ContentBlock(tool_use=ToolUseBlock(id="c1", name="x", input=struct))],
            ),
            Message(
                id="01C",
                role=Role.USER,
                content=[
                    ContentBlock(
                        tool_result=ToolResultBlock(
                            tool_use_id="c1", content=[ContentBlock(text=TextBlock(text="ok"))]
                        )
                    )
                ],
            ),
        ],
    )


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_number_in_tool_use_input_is_a_violation(number: float) -> None:
    struct = Struct(fields={"n": Value(number_value=number)})
    got = rules(validate_request(tool_use_request(struct), make_spec()))
    assert got == [
        ("messages[1].content[0].tool_use.input.n", "request.content.tool_use_input_invalid")
    ]
    (v,) = validate_request(tool_use_request(struct), make_spec())
    assert "json.not_finite" in v.message


def test_tool_use_input_problems_name_the_nested_path() -> None:
    inner = Value(
        list_value=ListValue(values=[Value(number_value=1), Value(number_value=math.nan)])
    )
    struct = Struct(fields={"a": Value(struct_value=Struct(fields={"b": inner}))})
    got = rules(validate_request(tool_use_request(struct), make_spec()))
    assert got == [
        ("messages[1].content[0].tool_use.input.a.b[1]", "request.content.tool_use_input_invalid")
    ]
    several = Struct(fields={"k": Value(number_value=1.0, string_value="x")})
    got = rules(validate_request(tool_use_request(several), make_spec()))
    assert got == [
        ("messages[1].content[0].tool_use.input.k", "request.content.tool_use_input_invalid")
    ]


def test_int_number_value_in_tool_use_input_is_valid() -> None:
    struct = Struct(fields={"n": Value(number_value=5)})
    assert validate_request(tool_use_request(struct), make_spec()) == []


def test_non_finite_provider_options_is_a_violation() -> None:
    options = Struct(fields={"seed": Value(number_value=math.inf)})
    got = rules(validate_request(make_request(provider_options=options), make_spec()))
    assert got == [("provider_options.seed", "request.provider_options_invalid")]
    assert rules(validate_request_shape(make_request(provider_options=options))) == got


def test_non_finite_tool_input_schema_is_a_violation() -> None:
    schema = Struct(
        fields={"type": Value(string_value="object"), "max": Value(number_value=math.nan)}
    )
    request = make_request(tools=[ToolDeclaration(name="x", input_schema=schema)])
    got = errors_only(validate_request(request, make_spec()))
    assert [(v.path, v.rule) for v in got] == [
        ("tools[0].input_schema.max", "request.tools.input_schema.invalid")
    ]


def test_request_shape_reports_every_model_independent_violation() -> None:
    assert rules(validate_request_shape(StreamCompletionRequest())) == [
        ("model_id", "request.model_id.empty"),
        ("messages", "request.messages.empty"),
        ("call_context", "request.call_context.missing"),
    ]


def test_request_shape_skips_the_model_dependent_rules() -> None:
    request = make_request(
        model_id="no-such-model",
        messages=[
            Message(id="01A", role=Role.USER, content=[ContentBlock()]),
            Message(
                id="01A",
                role=Role.USER,
                content=[
                    ContentBlock(image=ImageBlock(media_type="image/png", data=b"x")),
                    ContentBlock(
                        tool_result=ToolResultBlock(
                            tool_use_id="nope", content=[ContentBlock(text=TextBlock(text="r"))]
                        )
                    ),
                ],
            ),
        ],
        params=GenerationParams(temperature=-1.0, thinking_effort="ultra", max_output_tokens=10**9),
    )
    shape = rules(validate_request_shape(request))
    assert shape == [
        ("messages[0].content[0]", "request.content.block_unset"),
        ("messages[1].id", "request.message.id_duplicate"),
        (
            "messages[1].content[1].tool_result.tool_use_id",
            "request.content.tool_result_unknown_id",
        ),
        ("params.temperature", "request.params.temperature.negative"),
    ]
    # validate_request reports the same problems plus the ones that need the model.
    full = rules(validate_request(request, make_spec(supports_vision=False)))
    assert set(shape) < set(full)
    assert ("messages[1].content[0].image", "request.content.image_unsupported") in full
    assert ("params.thinking_effort", "request.params.thinking_effort.unknown_level") in full
    assert ("model_id", "request.model_id.mismatch") in full


def test_request_shape_of_a_valid_request_is_empty() -> None:
    assert validate_request_shape(make_request()) == []


@pytest.mark.parametrize(
    ("temperature", "rule"),
    [
        (math.nan, "request.params.temperature.not_finite"),
        (math.inf, "request.params.temperature.not_finite"),
        (-math.inf, "request.params.temperature.not_finite"),
        (-5.0, "request.params.temperature.negative"),
        (-1e-9, "request.params.temperature.negative"),
    ],
)
def test_temperature_must_be_finite_and_non_negative(temperature: float, rule: str) -> None:
    request = make_request(params=GenerationParams(temperature=temperature))
    assert rules(validate_request(request, make_spec())) == [("params.temperature", rule)]


@pytest.mark.parametrize("temperature", [0.0, 0.7, 2.0, 5.0])
def test_temperature_range_is_otherwise_the_vendors(temperature: float) -> None:
    request = make_request(params=GenerationParams(temperature=temperature))
    assert validate_request(request, make_spec()) == []


def test_duplicate_message_ids_are_a_violation() -> None:
    request = make_request(
        messages=[text_message("01A"), text_message("01B", Role.ASSISTANT), text_message("01A")]
    )
    got = validate_request(request, make_spec())
    assert rules(got) == [("messages[2].id", "request.message.id_duplicate")]
    assert "messages[0]" in got[0].message


def test_thinking_block_to_a_model_without_thinking_stays_a_warning() -> None:
    request = make_request(
        messages=[
            text_message("01A"),
            Message(
                id="01B",
                role=Role.ASSISTANT,
                content=[ContentBlock(thinking=ThinkingBlock(text="t", signature=b"s"))],
            ),
            text_message("01C"),
        ]
    )
    spec = make_spec(thinking=ThinkingSpec(supported=False))
    (v,) = validate_request(request, spec)
    assert (v.rule, v.severity) == ("request.content.thinking_unsupported", "warning")


MODEL_INDEPENDENT_PREFIXES = (
    "request.model_id.empty",
    "request.messages.",
    "request.message.",
    "request.content.block_",
    "request.content.tool_result_content_kind",
    "request.content.media_type_empty",
    "request.content.tool_use_id_",
    "request.content.tool_use_name_empty",
    "request.content.tool_use_input_invalid",
    "request.content.tool_use.vendor_data.",
    "request.content.tool_result_unknown_id",
    "request.content.tool_use_in_user_message",
    "request.content.tool_result_in_assistant_message",
    "request.params.disable_thinking.with_budget",
    "request.context.",
    "request.call_context.",
    "request.tools.name_",
    "request.tools.input_schema.",
    "request.params.temperature.not_finite",
    "request.params.temperature.negative",
    "request.params.max_output_tokens.not_positive",
    "request.params.stop_sequences.empty",
    "request.content.vendor_block",
    "request.content.text.vendor_data.",
    "request.kernel_protocol_version.",
    "request.params.tool_choice.mode_unspecified",
    "request.params.tool_choice.tool_name_",
    "request.params.tool_choice.unknown_tool",
    "request.provider_options_invalid",
    "request.too_deep",
    "enum.unknown_value",
)


def test_request_shape_is_the_model_independent_part_of_every_request_vector() -> None:
    data = json.loads((CONFORMANCE / "requests.json").read_text(encoding="utf-8"))
    for vector in data["vectors"]:
        spec = protojson.decode_or_raise(ModelSpec, vector["spec"])
        request = protojson.decode_or_raise(StreamCompletionRequest, vector["request"])
        full = validate_request(request, spec)
        shape = validate_request_shape(request)
        assert set(shape) <= set(full), vector["name"]
        for v in full:
            independent = v.rule.startswith(MODEL_INDEPENDENT_PREFIXES)
            assert (v in shape) == independent, (vector["name"], v)


def _tools_of_values(*counts: int) -> list[ToolDeclaration]:
    """One tool per count, its schema ``{"type": "object", "properties": {p0: {...}, ...}}``
    holding exactly that many JSON values (a count of at least 2; each property is two)."""
    tools = []
    for t, count in enumerate(counts):
        properties = {f"p{i}": {"type": "string"} for i in range((count - 2) // 2)}
        schema: dict[str, object] = {"type": "object", "properties": properties}
        if count % 2:
            schema["description"] = "odd"
        tools.append(ToolDeclaration(name=f"t{t}", input_schema=to_struct(schema)))
    return tools


@pytest.mark.parametrize(
    ("counts", "over"),
    [
        ((MAX_TOOL_SCHEMA_VALUES,), False),
        ((MAX_TOOL_SCHEMA_VALUES + 1,), True),
        ((MAX_TOOL_SCHEMA_VALUES // 2, MAX_TOOL_SCHEMA_VALUES // 2), False),
        ((MAX_TOOL_SCHEMA_VALUES // 2, MAX_TOOL_SCHEMA_VALUES // 2 + 1), True),
    ],
)
def test_the_tools_schemas_are_bounded_in_values_counted_across_tools(
    counts: tuple[int, ...], over: bool
) -> None:
    """At MAX_TOOL_SCHEMA_VALUES values in all (across tools, at any depth) the schemas are
    checked; one more is one error at ``tools`` naming the bound, and none is checked (the
    metaschema check costs about 0.3 ms a value); the tools' names are still checked."""
    tools = _tools_of_values(*counts)
    tools[0].name = "bad name"
    found = validate_request_shape(make_request(tools=tools))
    assert tool_schemas_exceed(tools, MAX_TOOL_SCHEMA_VALUES) is over
    assert ("tools[0].name", "request.tools.name_invalid") in rules(found)
    too_large = [v for v in found if v.rule == "request.tools.input_schema.too_large"]
    if over:
        assert [(v.path, v.severity) for v in too_large] == [("tools", "error")]
        assert "more than 10000 JSON values" in too_large[0].message
        assert "MAX_TOOL_SCHEMA_VALUES" in too_large[0].message
        assert not any("input_schema" in v.path for v in found)
    else:
        assert too_large == []
