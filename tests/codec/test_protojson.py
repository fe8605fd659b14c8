"""protocol_py.codec.protojson: protoc's JSON names at every depth, strict decoding, and
agreement with google's json_format for every message type (enumerated as in
tests/schema/test_messages.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import betterproto2
import pytest
from google.protobuf import json_format

from protocol_py.codec import protojson
from protocol_py.codec.structs import from_struct, to_struct
from protocol_py.errors import InvalidValueError, ValidationError
from protocol_py_gen.content.v1 import ContentBlock, ToolUseBlock
from protocol_py_gen.model.v1 import (
    Capabilities,
    ModelSpec,
    Pricing,
    PricingTier,
    SafetyNotice,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    Usage,
)

from ..schema.test_messages import (
    CASES,
    descriptor_fields,
    full_name,
    has_map,
    json_keys,
    message_classes,
    populate,
)

if TYPE_CHECKING:
    from conftest import UpbClasses


def test_json_name_is_protocs_for_every_field() -> None:
    fields = descriptor_fields()
    assert len(fields) > 100
    for name, field in fields.items():
        assert protojson.json_name(field.name) == field.json_name, name
    assert protojson.json_name("cache_write_1h_tokens") == "cacheWrite1hTokens"
    assert protojson.json_name("from_") == "from"


def test_encoded_keys_are_json_names_at_every_depth() -> None:
    """Every key encode() writes for a populated message is a json_name of our descriptors
    (Struct contents and map keys aside), so none of betterproto2's misspellings survive."""
    names = {field.json_name for field in descriptor_fields().values()}
    struct_keys = json_keys(populate(ToolUseBlock, 0).to_dict()["input"])
    for cls in message_classes():
        # The populator's string map keys all end in "✓"; Struct keys are data too.
        keys = {
            k for k in json_keys(protojson.encode(populate(cls, 0))) - struct_keys if "✓" not in k
        }
        assert keys <= names, (full_name(cls), keys - names)
    assert "cacheWrite1HTokens" not in protojson.dumps(populate(Usage, 0))


@pytest.mark.parametrize(("cls", "variant"), CASES)
def test_upb_parses_encode_to_the_same_message(
    upb: UpbClasses, cls: type[betterproto2.Message], variant: int
) -> None:
    msg = populate(cls, variant)
    upb_cls = upb.message(full_name(cls))
    from_dict = json_format.ParseDict(protojson.encode(msg), upb_cls())
    from_text = json_format.Parse(protojson.dumps(msg, indent=2), upb_cls())
    assert from_text == from_dict
    data = from_dict.SerializeToString(deterministic=True)
    if has_map(cls):
        # upb sorts map entries on the wire; betterproto2 keeps insertion order.
        assert upb_cls.FromString(data) == upb_cls.FromString(bytes(msg))
        assert len(data) == len(bytes(msg))
    else:
        assert data == bytes(msg)
    # And google's own JSON of the same message decodes strictly to it.
    assert protojson.decode(cls, json_format.MessageToDict(from_dict)) == (msg, [])


@pytest.mark.parametrize(("cls", "variant"), CASES)
def test_decode_encode_round_trip(cls: type[betterproto2.Message], variant: int) -> None:
    msg = populate(cls, variant)
    assert protojson.decode(cls, protojson.encode(msg)) == (msg, [])
    assert protojson.decode_or_raise(cls, json.loads(protojson.dumps(msg))) == msg
    # betterproto2's own to_dict spelling is read too.
    assert protojson.decode(cls, msg.to_dict()) == (msg, [])


def test_every_spelling_of_the_1h_fields_is_read() -> None:
    for key in ("cacheWrite1hPerMtok", "cache_write_1h_per_mtok", "cacheWrite1HPerMtok"):
        pricing = protojson.decode_or_raise(
            Pricing,
            {
                "currency": "USD",
                "tiers": [{"inputPerMtok": 1, "cacheWritePerMtok": "2", key: "4.5"}],
            },
        )
        assert pricing.tiers[0].cache_write_1h_per_mtok == 4.5
        assert pricing.tiers[0].cache_write_per_mtok == 2.0
        assert protojson.encode(pricing)["tiers"][0] == {
            "inputPerMtok": 1.0,
            "cacheWritePerMtok": 2.0,
            "cacheWrite1hPerMtok": 4.5,
        }
    for key in ("cacheWrite1hTokens", "cache_write_1h_tokens", "cacheWrite1HTokens"):
        usage = protojson.decode_or_raise(
            Usage, {"inputTokens": "3", "cacheWriteTokens": 9, key: "4"}
        )
        assert (usage.input_tokens, usage.cache_write_1h_tokens) == (3, 4)
        assert protojson.encode(usage) == {
            "inputTokens": "3",
            "cacheWriteTokens": "9",
            "cacheWrite1hTokens": "4",
        }
    keys = protojson.field_keys(Usage)
    assert keys["cacheWrite1hTokens"] == keys["cacheWrite1HTokens"] == "cache_write_1h_tokens"


def test_encode_nested_and_repeated_use_json_names() -> None:
    caps = Capabilities(
        models=[
            ModelSpec(
                id="a",
                pricing=Pricing(currency="USD", tiers=[PricingTier(cache_write_1h_per_mtok=6)]),
            ),
            ModelSpec(
                id="b",
                pricing=Pricing(
                    tiers=[PricingTier(input_per_mtok=1), PricingTier(cache_write_1h_per_mtok=0.5)]
                ),
            ),
        ]
    )
    out = protojson.encode(caps)
    assert out["models"][0]["pricing"]["tiers"] == [{"cacheWrite1hPerMtok": 6.0}]
    assert out["models"][1]["pricing"]["tiers"] == [
        {"inputPerMtok": 1.0},
        {"cacheWrite1hPerMtok": 0.5},
    ]
    assert protojson.decode(Capabilities, out) == (caps, [])
    event = StreamEvent(usage=Usage(cache_write_tokens=2, cache_write_1h_tokens=1))
    assert protojson.encode(event) == {
        "usage": {"cacheWriteTokens": "2", "cacheWrite1hTokens": "1"}
    }


def test_struct_contents_are_not_renamed() -> None:
    args = {"cacheWrite1HTokens": 1, "cache_write_1h_tokens": [2, {"fooBar": None}]}
    block = ContentBlock(tool_use=ToolUseBlock(id="t", name="n", input=to_struct(args)))
    out = protojson.encode(block)
    assert out == {"toolUse": {"id": "t", "name": "n", "input": args}}
    back = protojson.decode_or_raise(ContentBlock, out)
    assert back.tool_use is not None
    assert from_struct(back.tool_use.input) == args


def test_map_fields() -> None:
    notice = protojson.decode_or_raise(SafetyNotice, {"kind": 1, "attrs": {"b": "2", "a": "1"}})
    assert notice.attrs == {"b": "2", "a": "1"}
    assert protojson.encode(notice)["attrs"] == {"b": "2", "a": "1"}
    _, violations = protojson.decode(SafetyNotice, {"attrs": {"a": 1}})
    assert [(v.path, v.rule) for v in violations] == [("attrs.a", "json.invalid")]


@pytest.mark.parametrize(
    ("cls", "data", "expected"),
    [
        (Pricing, [], [("", "json.invalid")]),
        (Pricing, {"tiers": {}}, [("tiers", "json.invalid")]),
        (Pricing, {"tiers": [1]}, [("tiers[0]", "json.invalid")]),
        (
            Pricing,
            {"currency": "USD", "tiers": [{"nope": 1}]},
            [("tiers[0].nope", "json.unknown_field")],
        ),
        (
            Pricing,
            {"tiers": [{"inputPerMtok": "abc", "cacheWrite1hPerMtok": "abc"}]},
            [
                ("tiers[0].input_per_mtok", "json.invalid"),
                ("tiers[0].cache_write_1h_per_mtok", "json.invalid"),
            ],
        ),
        (Usage, "x", [("", "json.invalid")]),
        (Usage, {"inputTokens": "x"}, [("input_tokens", "json.invalid")]),
        (Usage, {"cacheWrite1hTokens": "1.5"}, [("cache_write_1h_tokens", "json.invalid")]),
        (
            Usage,
            {"cacheWrite1hTokens": 1, "cacheWrite1HTokens": 1},
            [("cache_write_1h_tokens", "json.duplicate_field")],
        ),
        (StreamEvent, {"bogus": {}}, [("bogus", "json.unknown_field")]),
        (StreamEvent, {"usage": {}, "textDelta": {}}, [("text_delta", "json.oneof_multiple")]),
        (StreamEvent, {"stop": {"reason": "X"}}, [("stop.reason", "json.unknown_enum")]),
    ],
)
def test_bad_json_is_reported_by_field_and_rule(
    cls: type[betterproto2.Message], data: Any, expected: list[tuple[str, str]]
) -> None:
    message, violations = protojson.decode(cls, data)
    assert message is None
    assert [(v.path, v.rule) for v in violations] == expected
    with pytest.raises(ValidationError) as info:
        protojson.decode_or_raise(cls, data)
    assert [(v.path, v.rule) for v in info.value.violations] == expected


def test_decode_path_prefix_and_stream_events() -> None:
    _, violations = protojson.decode(Usage, {"inputTokens": True}, path="event.usage")
    assert [(v.path, v.rule) for v in violations] == [("event.usage.input_tokens", "json.invalid")]
    assert protojson.decode_or_raise(StreamEvent, {"textDelta": {"text": "x"}}) == StreamEvent(
        text_delta=TextDelta(text="x")
    )
    stop = protojson.decode_or_raise(StreamEvent, {"stop": {"reason": "STOP_REASON_END_TURN"}})
    assert stop == StreamEvent(stop=Stop(reason=StopReason.END_TURN))
    assert protojson.encode(stop) == {"stop": {"reason": "STOP_REASON_END_TURN"}}


def test_wrong_python_types_are_typed_errors() -> None:
    with pytest.raises(InvalidValueError) as info:
        protojson.decode(dict, {})  # type: ignore[type-var]
    assert info.value.rule == "value.wrong_type"
    with pytest.raises(InvalidValueError):
        protojson.decode_or_raise(int, {})  # type: ignore[type-var]
    with pytest.raises(InvalidValueError):
        protojson.encode({"a": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError):
        protojson.field_keys(str)  # type: ignore[arg-type]


def test_decode_reports_messages_nested_beyond_the_recursion_limit() -> None:
    block: dict[str, Any] = {"text": {"text": "x"}}
    for _ in range(3000):
        block = {"toolResult": {"toolUseId": "c", "content": [block]}}
    data = {"messages": [{"id": "1", "role": "ROLE_USER", "content": [block]}]}
    message, violations = protojson.decode(StreamCompletionRequest, data)
    assert message is None
    assert [v.rule for v in violations] == ["json.too_deep"]
    assert violations[0].path.startswith("messages[0].content[0].tool_result.content[0]")


# --- decode_lenient ---------------------------------------------------------------------------


def test_decode_lenient_keeps_what_decodes_and_lists_the_absent_fields() -> None:
    data = {
        "protocolVersion": "1.0",
        "bogus": 1,
        "models": [{"id": "m", "contextWindow": "x", "caching": {"supported": "yes"}}],
    }
    message, violations, pruned = protojson.decode_lenient(Capabilities, data)
    assert violations == protojson.decode(Capabilities, data)[1]  # the strict violations, unchanged
    assert [(v.path, v.rule) for v in violations] == [
        ("bogus", "json.unknown_field"),
        ("models[0].context_window", "json.invalid"),
        ("models[0].caching.supported", "json.invalid"),
    ]
    assert pruned == ["models[0].context_window", "models[0].caching.supported"]
    assert message is not None
    assert message.protocol_version == "1.0"
    assert message.models[0].id == "m" and message.models[0].context_window == 0
    assert message.models[0].caching is not None and message.models[0].caching.supported is False


def test_decode_lenient_drops_a_list_with_an_item_that_is_no_object() -> None:
    message, violations, pruned = protojson.decode_lenient(
        Capabilities, {"protocolVersion": "1.0", "models": [1, {"id": "a"}]}
    )
    assert [(v.path, v.rule) for v in violations] == [("models[0]", "json.invalid")]
    assert pruned == ["models[0]", "models"]
    assert message is not None and message.models == []


def test_decode_lenient_equals_decode_for_a_clean_document() -> None:
    data = {"currency": "USD", "free": True}
    message, violations, pruned = protojson.decode_lenient(Pricing, data)
    assert (message, violations, pruned) == (protojson.decode(Pricing, data)[0], [], [])
