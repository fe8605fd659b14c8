"""Request and capability rules added after the fresh-user review: Structs that cannot be JSON
(NaN in a tool_use input), the model-independent request shape, temperature, duplicate message
ids, and None/missing fields read as their proto3 defaults."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from protocol_py.codec import protojson
from protocol_py.codec.structs import to_struct
from protocol_py.errors import errors_only
from protocol_py.rules.validation import (
    validate_capabilities,
    validate_model_spec,
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
    CachingSpec,
    Capabilities,
    GenerationParams,
    ModelSpec,
    Pricing,
    StreamCompletionRequest,
    ThinkingSpec,
    ToolDeclaration,
)

from .test_validation import make_request, make_spec, rules, text_message

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


# --- Structs handed on to the provider must be JSON --------------------------------------------


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


def test_non_finite_number_in_config_schema_is_a_violation() -> None:
    caps = Capabilities(
        protocol_version="1.0",
        models=[make_spec()],
        config_schema=Struct(fields={"maximum": Value(number_value=math.nan)}),
    )
    assert rules(validate_capabilities(caps)) == [
        ("config_schema.maximum", "capabilities.config_schema.invalid")
    ]


def test_int_number_value_in_config_schema_does_not_crash() -> None:
    schema = Struct(
        fields={"type": Value(string_value="object"), "maxProperties": Value(number_value=5)}
    )
    caps = Capabilities(protocol_version="1.0", models=[make_spec()], config_schema=schema)
    assert validate_capabilities(caps) == []


# --- validate_request_shape: the checks that need no ModelSpec ---------------------------------


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


# --- temperature and message ids ---------------------------------------------------------------


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


# --- None and missing fields -------------------------------------------------------------------


def test_model_id_none_is_empty() -> None:
    spec = ModelSpec(
        id=None,  # type: ignore[arg-type]
        context_window=1,
        max_output_tokens=1,
        thinking=ThinkingSpec(),
        caching=CachingSpec(),
        pricing=Pricing(currency="USD", free=True),
    )
    assert rules(validate_model_spec(spec)) == [("id", "model.id.empty")]


def test_none_in_scalar_and_repeated_fields_reads_as_the_default() -> None:
    spec = make_spec(context_window=None, supported_tool_choice_modes=None)
    assert rules(validate_model_spec(spec)) == [
        ("context_window", "model.context_window.not_positive")
    ]
    request = make_request(messages=None, tools=None, model_id=None)
    assert rules(validate_request(request, make_spec())) == [
        ("model_id", "request.model_id.empty"),
        ("messages", "request.messages.empty"),
    ]


def test_capabilities_without_models_is_a_violation() -> None:
    assert rules(validate_capabilities(Capabilities(protocol_version="1.0"))) == [
        ("models", "capabilities.models.empty")
    ]
    assert rules(validate_capabilities(Capabilities(protocol_version="1.0", models=None))) == [  # type: ignore[arg-type]
        ("models", "capabilities.models.empty")
    ]


@pytest.mark.parametrize("version", [None, ""])
def test_capabilities_without_protocol_version_is_a_violation(version: str | None) -> None:
    caps = Capabilities(protocol_version=version, models=[make_spec()])  # type: ignore[arg-type]
    assert rules(validate_capabilities(caps)) == [
        ("protocol_version", "capabilities.protocol_version.missing")
    ]


def test_valid_capabilities_have_no_violations() -> None:
    assert validate_capabilities(Capabilities(protocol_version="1.0", models=[make_spec()])) == []


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
    "request.params.temperature.",
    "request.params.max_output_tokens.not_positive",
    "request.params.stop_sequences.",
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
