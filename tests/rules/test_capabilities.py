"""ModelSpec and Capabilities rules (``validate_model_spec``, ``validate_capabilities``): thinking
controls, protocol version compatibility, config schemas that cannot be JSON, and None or missing
fields read as their proto3 defaults."""

from __future__ import annotations

import math

import pytest

from protocol_py.errors import errors_only
from protocol_py.rules.capabilities import validate_capabilities, validate_model_spec
from protocol_py.rules.request import validate_request
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CachingSpec,
    Capabilities,
    EffortControl,
    ModelSpec,
    Pricing,
    ThinkingDisable,
    ThinkingSpec,
    TokenRange,
)

from .test_validation import make_request, make_spec, rules


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
