"""A config schema the server cannot use is refused when Capabilities are loaded and at server
start-up, and Configure never answers INTERNAL for a schema problem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from grpclib import GRPCError, Status

from protocol_py.codec.structs import to_struct
from protocol_py.errors import ValidationError
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.rules.documents import validate_document
from protocol_py.rules.json_schema import validate_config_schema
from protocol_py.server import ModelServer, validate_config
from protocol_py.server.config_schema import SECRET_SCAN_CHARS, looks_secret, redact
from protocol_py_gen.model.v1 import Capabilities, ConfigureRequest

BAD_PATTERN = {
    "type": "object",
    "properties": {"a": {"type": "string", "pattern": "("}},
    "additionalProperties": False,
}


def test_config_schema_with_a_pattern_that_is_no_regex_is_a_violation() -> None:
    violations = validate_config_schema(BAD_PATTERN)
    assert [(v.path, v.rule) for v in violations] == [
        ("config_schema.properties.a.pattern", "capabilities.config_schema.invalid")
    ]
    assert "'(' is not a 'regex'" in violations[0].message


def test_config_schema_pattern_properties_key_must_be_a_regex() -> None:
    schema = {"type": "object", "patternProperties": {"[a-": {"type": "string"}}}
    violations = validate_config_schema(schema)
    assert [v.rule for v in violations] == ["capabilities.config_schema.invalid"]
    assert violations[0].path.startswith("config_schema.patternProperties")


def test_usable_config_schema_has_no_violation() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}},
        "additionalProperties": False,
    }
    assert validate_config_schema(schema) == []


def test_validate_document_reports_the_bad_pattern_in_a_capabilities_file() -> None:
    kind, violations = validate_document({"protocolVersion": "1.0", "configSchema": BAD_PATTERN})
    assert kind == "Capabilities"
    assert ("config_schema.properties.a.pattern", "capabilities.config_schema.invalid") in [
        (v.path, v.rule) for v in violations
    ]


class BadPatternInCapabilities(ReferenceProvider):
    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        caps.config_schema = to_struct(BAD_PATTERN)
        return caps


class BadPatternOwnSchema(ReferenceProvider):
    def config_schema(self) -> Mapping[str, Any]:
        return BAD_PATTERN


@pytest.mark.parametrize("provider_cls", [BadPatternInCapabilities, BadPatternOwnSchema])
async def test_server_refuses_to_start_with_an_unusable_config_schema(
    provider_cls: type[ReferenceProvider],
) -> None:
    server = ModelServer(provider_cls())
    with pytest.raises(ValidationError) as info:
        await server.start("127.0.0.1", 0)
    assert [(v.path, v.rule) for v in info.value.violations] == [
        ("config_schema.properties.a.pattern", "capabilities.config_schema.invalid")
    ]
    assert server.port is None


class UnresolvableRef(ReferenceProvider):
    def config_schema(self) -> Mapping[str, Any]:
        return {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}


def test_validate_config_reports_an_unusable_schema_as_value_error() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(ValueError, match="unusable config schema"):
        validate_config(schema, {"a": "x"})


async def test_configure_answers_failed_precondition_not_internal_for_a_schema_failure() -> None:
    server = ModelServer(UnresolvableRef())
    await server.prepare()  # the metaschema accepts a dangling $ref: it fails only when applied
    with pytest.raises(GRPCError) as info:
        await server.configure(ConfigureRequest(config=to_struct({"a": "x"})))
    assert info.value.status == Status.FAILED_PRECONDITION
    assert "config schema" in str(info.value.message)


# -- secret-looking key names ------------------------------------------------------------------


def test_looks_secret_matches_vendor_key_shapes_and_random_runs_not_ordinary_names() -> None:
    secret = [
        "sk-ant-api03-abcdefgh",
        "sk-proj-1234567890",
        "xai-abcdefghij",
        "gsk_abcdefghij",
        "AIzaSyA1234567890abcdef",
        "9b2e7deaec5f07e2759100dbccc0ab5c14aa33f2",
        "9LknrPCVFiNKindvjAzUCnssToRdWAzp",
        "prefix_Ab3dEf6hIj9kLm2n_suffix",
        "AKIAIOSFODNN7EXAMPLE",  # an AWS access key id
        "ASIAQWERTYUIOPASDFGH",
        "xoxb-1234567890-abcdef",  # Slack
        "ghp_abcdefghij1234",
        "github_pat_11ABCDEFG",
        "glpat-abcdefghij",
    ]
    ordinary = [
        "api_key",
        "base_url",
        "max_retry_after_s",
        "claude-sonnet-4-5-20250929",
        "gpt_4o_mini_2024_07_18",
        "thinkingBudgetTokens",
        "AKIA",
        "xoxb",
        "ghp_",
        "x" * 100_000,
        "",
    ]
    assert [n for n in secret if not looks_secret(n)] == []
    assert [n for n in ordinary if looks_secret(n)] == []


def test_looks_secret_reads_a_bounded_prefix() -> None:
    assert not looks_secret("a" * SECRET_SCAN_CHARS + "sk-ant-api03-abcdefgh")
    assert looks_secret("a_" + "sk-ant-api03-abcdefgh" + "b" * 10_000_000)


def test_validate_config_names_a_secret_looking_key_as_redacted() -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {"a": {}}}
    problems = validate_config(schema, {"sk-ant-api03-secretsecret": 1, "zzz": 2})
    assert problems == [
        "/<redacted>: unknown property (additionalProperties is false)",
        "/zzz: unknown property (additionalProperties is false)",
    ]


def test_redact_hides_secret_looking_key_names_with_their_values() -> None:
    shown = redact({"sk-ant-api03-secretsecret": 1, "sk-proj-abcdefghijk": 2, "api_key": "x"})
    assert shown == {"<redacted>": "***", "<redacted>#2": "***", "api_key": "***"}
