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
