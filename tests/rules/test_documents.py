"""Strict proto3-JSON decoding (protojson.decode; documents.decode_json is its alias),
document kind detection (validate_document) and files (load_document, the
``protocol-py validate FILE`` backend)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from protocol_py.codec import protojson
from protocol_py.errors import InvalidValueError, ValidationError, errors_only
from protocol_py.rules import documents
from protocol_py.rules.documents import detect_kind, load_document, validate_document
from protocol_py_gen.content.v1 import ContentBlock, Role
from protocol_py_gen.model.v1 import (
    ModelSpec,
    Pricing,
    PricingTier,
    StreamCompletionRequest,
    ThinkingDisable,
    ToolChoiceMode,
    Usage,
)

SPEC_JSON: dict[str, Any] = {
    "id": "claude-opus-5",
    "contextWindow": "200000",
    "maxOutputTokens": 64000,
    "supportsToolUse": True,
    "thinking": {
        "supported": True,
        "effort": {"levels": ["low", "high"], "default": "high"},
        "disable": "THINKING_DISABLE_ALWAYS",
    },
    "caching": {"supported": True, "explicitMarkers": True},
    "pricing": {
        "currency": "USD",
        "tiers": [
            {
                "inputPerMtok": 5,
                "outputPerMtok": 25,
                "cacheWritePerMtok": 6.25,
                "cacheReadPerMtok": 0.5,
                "cacheWrite1hPerMtok": 10,
            }
        ],
    },
    "supportedToolChoiceModes": ["TOOL_CHOICE_MODE_AUTO", 4],
}


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


# --- protojson.decode -----------------------------------------------------------------------


def test_validation_decode_json_is_the_protojson_alias() -> None:
    assert documents.decode_json is protojson.decode
    assert documents.decode_json_or_raise is protojson.decode_or_raise


def test_decode_builds_typed_message() -> None:
    spec, violations = protojson.decode(ModelSpec, SPEC_JSON)
    assert violations == []
    assert spec is not None
    assert spec.context_window == 200_000
    assert spec.max_output_tokens == 64_000
    assert spec.thinking is not None and spec.thinking.disable == ThinkingDisable.ALWAYS
    assert spec.supported_tool_choice_modes == [ToolChoiceMode.AUTO, ToolChoiceMode.SPECIFIC]
    assert spec.pricing is not None
    tier = spec.pricing.tiers[0]
    assert (tier.cache_write_per_mtok, tier.cache_read_per_mtok) == (6.25, 0.5)
    assert spec.supports_vision is False and spec.supports_parallel_tool_calls is None


def test_one_hour_rate_decodes_under_every_accepted_spelling() -> None:
    # protoc's JSON name, the proto name, and betterproto2's own to_dict spelling
    # (betterproto2's from_dict cannot read any of them: a toolchain sharp edge).
    for key in ("cacheWrite1hPerMtok", "cache_write_1h_per_mtok", "cacheWrite1HPerMtok"):
        tier, violations = protojson.decode(PricingTier, {key: 10})
        assert violations == []
        assert tier is not None and tier.cache_write_1h_per_mtok == 10.0
    round_trip, violations = protojson.decode(
        PricingTier, PricingTier(cache_write_1h_per_mtok=2.5, input_per_mtok=1.0).to_dict()
    )
    assert violations == [] and round_trip == PricingTier(
        cache_write_1h_per_mtok=2.5, input_per_mtok=1.0
    )


def test_decode_request_bytes_struct_oneof_and_float_words() -> None:
    data = {
        "modelId": "m",
        "messages": [
            {
                "id": "1",
                "role": "ROLE_USER",
                "content": [
                    {"image": {"data": "aGk=", "mediaType": "image/png"}},
                    {"toolUse": {"id": "t", "name": "f", "input": {"n": 3, "xs": [1.5, None]}}},
                ],
            }
        ],
        "params": {"temperature": "Infinity", "maxOutputTokens": 3.0},
        "cacheBreakpoints": [{"afterTools": {}}, {"afterMessageIndex": "0"}],
    }
    request, violations = protojson.decode(StreamCompletionRequest, data)
    assert violations == [] and request is not None
    blocks: list[ContentBlock] = request.messages[0].content
    assert request.messages[0].role == Role.USER
    assert blocks[0].image is not None and blocks[0].image.data == b"hi"
    assert blocks[1].tool_use is not None and blocks[1].tool_use.input is not None
    assert blocks[1].tool_use.input.fields["n"].number_value == 3.0
    assert request.params is not None and math.isinf(request.params.temperature or 0.0)
    assert request.params.max_output_tokens == 3
    assert request.cache_breakpoints[0].after_tools is not None
    assert request.cache_breakpoints[0].after_message_index is None
    assert request.cache_breakpoints[1].after_message_index == 0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"cacheBreakpoints": [{"afterTools": {}, "afterMessageIndex": 1}]},
            [("cache_breakpoints[0].after_message_index", "json.oneof_multiple")],
        ),
        (
            {"cacheBreakpoints": [{"afterTools": {"x": 1}}]},
            [("cache_breakpoints[0].after_tools", "json.invalid")],
        ),
        (
            {"messages": [{"content": [{"image": {"data": "not base64!"}}]}]},
            [("messages[0].content[0].image.data", "json.invalid")],
        ),
        ({"messages": [{"role": "USER"}]}, [("messages[0].role", "json.unknown_enum")]),
        ({"messages": {"id": "1"}}, [("messages", "json.invalid")]),
        (
            {"params": {"maxOutputTokens": 2.5, "temperature": True, "stopSequences": [1]}},
            [
                ("params.max_output_tokens", "json.invalid"),
                ("params.stop_sequences[0]", "json.invalid"),
                ("params.temperature", "json.invalid"),
            ],
        ),
        (
            {"tools": [{"name": "f", "inputSchema": ["type"]}]},
            [("tools[0].input_schema", "json.invalid")],
        ),
        ({"model_id": "a", "modelId": "b"}, [("model_id", "json.duplicate_field")]),
        ({"modelID": "a"}, [("modelID", "json.unknown_field")]),
    ],
)
def test_decode_reports_json_problems(
    data: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    message, violations = protojson.decode(StreamCompletionRequest, data)
    assert message is None
    assert sorted((v.path, v.rule) for v in violations) == sorted(expected)


def test_decode_or_raise_and_bad_message_type() -> None:
    with pytest.raises(ValidationError) as info:
        protojson.decode_or_raise(Pricing, {"currency": 3, "tiers": {}})
    assert [(v.path, v.rule) for v in info.value.violations] == [
        ("currency", "json.invalid"),
        ("tiers", "json.invalid"),
    ]
    assert protojson.decode_or_raise(Pricing, {"currency": "USD"}) == Pricing(currency="USD")
    with pytest.raises(InvalidValueError):
        protojson.decode(dict, {})  # type: ignore[type-var]


def test_nan_rate_decodes_and_is_reported_by_pricing_rules() -> None:
    kind, violations = validate_document(
        {"currency": "USD", "tiers": [{"inputPerMtok": "NaN", "outputPerMtok": "-Infinity"}]}
    )
    assert kind == "Pricing"
    assert sorted((v.path, v.rule) for v in violations) == [
        ("tiers[0].input_per_mtok", "pricing.tiers.rate_not_finite"),
        ("tiers[0].output_per_mtok", "pricing.tiers.rate_not_finite"),
    ]


def test_detect_kind() -> None:
    assert detect_kind({"models": []}) == "Capabilities"
    assert detect_kind({"supported_hook_points": []}) == "Capabilities"
    assert detect_kind({"contextWindow": 1}) == "ModelSpec"
    assert detect_kind({"tiers": []}) == "Pricing"
    assert detect_kind({"free": True, "id": "x", "pricing": {}}) == "ModelSpec"
    assert detect_kind({}) is None
    assert detect_kind({"hello": 1}) is None


# --- load_document -------------------------------------------------------------------------


def test_load_valid_model_spec(tmp_path: Path) -> None:
    assert load_document(write(tmp_path, "spec.json", json.dumps(SPEC_JSON))) == ("ModelSpec", [])


def test_load_invalid_model_spec_reports_every_violation(tmp_path: Path) -> None:
    bad = dict(SPEC_JSON, contextWindow=0, caching={"supported": True})
    kind, violations = load_document(write(tmp_path, "bad.json", json.dumps(bad)))
    assert kind == "ModelSpec"
    assert sorted((v.path, v.rule) for v in violations) == [
        ("caching", "caching.supported_without_mechanism"),
        ("context_window", "model.context_window.not_positive"),
    ]
    assert [str(v) for v in sorted(violations, key=lambda v: v.path)] == [
        "caching: caching.supported_without_mechanism: caching.supported=true needs "
        "explicit_markers or implicit_automatic (or both)",
        "context_window: model.context_window.not_positive: context_window 0 MUST be > 0 tokens",
    ]


def test_load_pricing_and_capabilities(tmp_path: Path) -> None:
    pricing = {"currency": "USD", "tiers": [{"inputPerMtok": 3, "outputPerMtok": 15}]}
    assert load_document(write(tmp_path, "p.json", json.dumps(pricing))) == ("Pricing", [])
    kind, violations = load_document(
        write(tmp_path, "p2.json", '{"currency": "EUR", "free": true}')
    )
    assert (kind, [(v.path, v.rule) for v in violations]) == (
        "Pricing",
        [("currency", "pricing.currency_not_usd")],
    )
    caps = {"models": [SPEC_JSON, SPEC_JSON], "protocolVersion": "1.0"}
    kind, violations = load_document(write(tmp_path, "c.json", json.dumps(caps)))
    assert (kind, [(v.path, v.rule) for v in violations]) == (
        "Capabilities",
        [("models[1].id", "capabilities.models.duplicate_id")],
    )


def test_load_json_level_problems_are_violations(tmp_path: Path) -> None:
    kind, violations = load_document(write(tmp_path, "u.json", '{"id": "x", "colour": 1}'))
    assert kind == "ModelSpec"
    # the unknown field is reported, and the rules still run on the rest of the document
    assert [(v.path, v.rule) for v in violations] == [
        ("colour", "json.unknown_field"),
        ("context_window", "model.context_window.not_positive"),
        ("max_output_tokens", "model.max_output_tokens.not_positive"),
        ("thinking", "model.thinking.missing"),
        ("caching", "model.caching.missing"),
        ("pricing", "model.pricing.missing"),
    ]


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        ("{not json", "file.not_json"),
        ("", "file.not_json"),
        ('{"currency": NaN}', "file.not_json"),
        (b"\xff\xfe{}", "file.not_json"),
        ("[1, 2]", "document.not_object"),
        ('"USD"', "document.not_object"),
        ('{"name": "x"}', "document.unknown_kind"),
    ],
)
def test_load_bad_files_give_one_violation(tmp_path: Path, content: str | bytes, rule: str) -> None:
    path = write(tmp_path, "x.json", content)
    kind, violations = load_document(path)
    assert kind == "unknown"
    assert [v.rule for v in violations] == [rule]
    assert errors_only(violations) == violations


def test_load_missing_file_and_directory(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    kind, violations = load_document(missing)
    assert (kind, [(v.path, v.rule) for v in violations]) == (
        "unknown",
        [(missing, "file.unreadable")],
    )
    assert "No such file" in violations[0].message
    kind, violations = load_document(str(tmp_path))
    assert (kind, [v.rule for v in violations]) == ("unknown", ["file.unreadable"])


def test_load_accepts_utf8_bom(tmp_path: Path) -> None:
    path = write(tmp_path, "bom.json", "\ufeff" + json.dumps({"currency": "USD", "free": True}))
    assert load_document(path) == ("Pricing", [])


def test_non_json_python_values_are_violations_not_exceptions() -> None:
    kind, violations = validate_document(
        {
            "id": {1, 2},
            "contextWindow": float("nan"),
            "maxOutputTokens": 1e300,
            "thinking": {"effort": {"levels": [b"x"]}},
            3: "three",  # type: ignore[dict-item]
        }
    )
    assert kind == "ModelSpec"
    assert sorted((v.path, v.rule) for v in violations) == [
        ("3", "json.unknown_field"),
        ("caching", "model.caching.missing"),
        ("context_window", "json.invalid"),
        ("id", "json.invalid"),
        ("max_output_tokens", "json.invalid"),
        ("pricing", "model.pricing.missing"),
        # levels did not decode, so it reads as absent; the default is missing too
        ("thinking.effort.default", "thinking.effort.default_not_a_level"),
        ("thinking.effort.levels[0]", "json.invalid"),
    ]
    by_path = {v.path: v.message for v in violations}
    assert "{1, 2}" in by_path["id"]
    assert "int64 range" in by_path["max_output_tokens"]


@pytest.mark.parametrize(
    ("rate", "ok"),
    [
        (1.5, True),
        ("2.5", True),
        ("1e-3", True),
        ("NaN", True),  # valid proto3 JSON; the pricing rules then reject it
        ("nan", False),
        ("inf", False),
        (" 1", False),
        ("1e999", False),
        (float("inf"), False),
        ("0x10", False),
    ],
)
def test_double_spellings(rate: object, ok: bool) -> None:
    tier, violations = protojson.decode(PricingTier, {"inputPerMtok": rate})
    assert (tier is not None) == ok
    assert [(v.path, v.rule) for v in violations] == (
        [] if ok else [("input_per_mtok", "json.invalid")]
    )


def test_timestamp_and_duration_fields_decode_to_python_values() -> None:
    data = {
        "inputTokens": 412,
        "outputTokens": "28",
        "cacheWrite1hTokens": 5,
        "rateLimits": [
            {"resetsAt": "2026-01-01T00:00:00Z", "resetsAfter": "1.5s", "usedPercent": 50}
        ],
    }
    usage, violations = protojson.decode(Usage, data)
    assert violations == [] and usage is not None
    assert usage.cache_write_1h_tokens == 5
    snapshot = usage.rate_limits[0]
    assert snapshot.resets_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert snapshot.resets_after == timedelta(seconds=1.5)
    bad = {"rateLimits": [{"resetsAt": "yesterday", "resetsAfter": 5}]}
    usage, violations = protojson.decode(Usage, bad)
    assert usage is None
    assert [(v.path, v.rule) for v in violations] == [
        ("rate_limits[0].resets_at", "json.invalid"),
        ("rate_limits[0].resets_after", "json.invalid"),
    ]
    assert "duration string" in violations[1].message


# --- JSON problems never hide rule violations ---------------------------------------------


def test_json_errors_do_not_hide_rule_violations_in_pricing() -> None:
    kind, violations = validate_document(
        {"currency": "EUR", "tiers": [{"inputPerMtok": 1, "outputPerMtok": -1, "bogus": 1}]}
    )
    assert kind == "Pricing"
    assert [(v.path, v.rule) for v in violations] == [
        ("tiers[0].bogus", "json.unknown_field"),
        ("currency", "pricing.currency_not_usd"),
        ("tiers[0].output_per_mtok", "pricing.tiers.rate_negative"),
    ]


def test_undecodable_field_is_absent_for_the_rules_but_others_are_checked() -> None:
    kind, violations = validate_document(
        {
            "protocolVersion": "1.0",
            "models": [{"id": "", "contextWindow": "0", "maxOutputTokens": "x"}],
        }
    )
    assert kind == "Capabilities"
    got = [(v.path, v.rule) for v in violations]
    assert got == [
        ("models[0].max_output_tokens", "json.invalid"),
        ("models[0].id", "model.id.empty"),
        ("models[0].context_window", "model.context_window.not_positive"),
        ("models[0].thinking", "model.thinking.missing"),
        ("models[0].caching", "model.caching.missing"),
        ("models[0].pricing", "model.pricing.missing"),
    ]
    # no misleading rule violation for the field that did not decode
    assert ("models[0].max_output_tokens", "model.max_output_tokens.not_positive") not in got


def test_nan_rate_reported_next_to_an_undecodable_rate() -> None:
    kind, violations = validate_document(
        {
            "currency": "USD",
            "tiers": [
                {
                    "inputPerMtok": 1,
                    "outputPerMtok": 1,
                    "cacheWrite1hPerMtok": "NaN",
                    "batchInputPerMtok": 1e400,
                }
            ],
        }
    )
    assert kind == "Pricing"
    got = [(v.path, v.rule) for v in violations]
    assert got[0] == ("tiers[0].batch_input_per_mtok", "json.invalid")
    assert ("tiers[0].cache_write_1h_per_mtok", "pricing.tiers.rate_not_finite") in got


def test_rules_at_a_message_holding_an_undecodable_field_are_not_reported() -> None:
    # caching.supported does not decode: "supported without mechanism" at caching would be an
    # artefact of the missing value, so only the json violation is given for caching
    kind, violations = validate_document(
        {"id": "m", "contextWindow": 1, "maxOutputTokens": 1, "caching": {"supported": "yes"}}
    )
    assert kind == "ModelSpec"
    assert [(v.path, v.rule) for v in violations if v.path.startswith("caching")] == [
        ("caching.supported", "json.invalid")
    ]
