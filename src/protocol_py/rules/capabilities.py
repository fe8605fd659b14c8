"""Capabilities and ModelSpec validation (spec: "ModelSpec", "ThinkingSpec", "CachingSpec",
"Pricing"; docs/decisions.md#d4, docs/decisions.md#d13, docs/decisions.md#d14).

What a kernel checks when it loads a provider's Capabilities, and a server checks at start-up.
Every validator returns a list of :class:`~protocol_py.errors.Violation` values: each names a
field path (``models[0].thinking.effort.default``), a stable rule id
(``thinking.effort.default_not_a_level``) and a message naming the offending value. Every broken
rule is reported, never only the first. Rule ids are part of the contract; the conformance vectors
in ``testdata/conformance/`` (documented in ``testdata/conformance/validation.md``) pin them.

Pricing rules are delegated to :func:`protocol_py.rules.pricing.validate_pricing`, the config
schema to :func:`protocol_py.rules.json_schema.validate_config_schema`.

Bad input types (a ``str`` where a ``ModelSpec`` is expected, a field holding a value of the wrong
Python type) raise :class:`~protocol_py.errors.InvalidValueError`; unknown enum numbers kept by
the decoder (betterproto2 keeps them as pseudo-members) are ``enum.unknown_value`` violations.
"""

from __future__ import annotations

import re

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError, Violation
from protocol_py.rules._checks import _enum_label, _join, _require, _struct_violation, _walk
from protocol_py.rules.constraints import declaration_violations
from protocol_py.rules.json_schema import validate_config_schema
from protocol_py.rules.pricing import validate_pricing
from protocol_py.version import PROTOCOL_MAJOR, PROTOCOL_VERSION
from protocol_py_gen.common.v1 import HookPoint
from protocol_py_gen.model.v1 import (
    CachingSpec,
    Capabilities,
    ModelSpec,
    Pricing,
    ThinkingDisable,
    ThinkingSpec,
    ToolChoiceMode,
)

__all__ = ["validate_capabilities", "validate_model_spec"]

_PROTOCOL_VERSION_RE = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_OUR_MINOR = int(PROTOCOL_VERSION.split(".")[1])


def _validate_thinking(thinking: ThinkingSpec, path: str, out: list[Violation]) -> None:
    disable = thinking.disable
    disable_name = _enum_label(disable, ThinkingDisable)
    levels: list[str] = list(thinking.effort.levels) if thinking.effort is not None else []
    if not thinking.supported:
        if thinking.effort is not None:
            out.append(
                Violation(
                    _join(path, "effort"),
                    "thinking.unsupported.effort_present",
                    "a model with supported=false MUST NOT declare an effort control",
                )
            )
        if thinking.budget is not None:
            out.append(
                Violation(
                    _join(path, "budget"),
                    "thinking.unsupported.budget_present",
                    "a model with supported=false MUST NOT declare a budget control",
                )
            )
        if thinking.adaptive_by_default:
            out.append(
                Violation(
                    _join(path, "adaptive_by_default"),
                    "thinking.unsupported.adaptive_by_default",
                    "a model with supported=false MUST have adaptive_by_default=false",
                )
            )
        if disable in (ThinkingDisable.ALWAYS, ThinkingDisable.CONDITIONAL):
            out.append(
                Violation(
                    _join(path, "disable"),
                    "thinking.unsupported.disable",
                    f"a model with supported=false MUST NOT claim reasoning can be turned off "
                    f"(disable is {disable_name}; use UNSPECIFIED or NEVER)",
                )
            )
    elif disable == ThinkingDisable.UNSPECIFIED:
        out.append(
            Violation(
                _join(path, "disable"),
                "thinking.disable.unspecified",
                "a model with supported=true MUST set disable (NEVER, ALWAYS or CONDITIONAL)",
            )
        )

    if thinking.effort is not None:
        epath = _join(path, "effort")
        if not levels:
            out.append(
                Violation(
                    _join(epath, "levels"),
                    "thinking.effort.levels_empty",
                    "effort.levels MUST be non-empty",
                )
            )
        seen: set[str] = set()
        for i, level in enumerate(levels):
            if level == "":
                out.append(
                    Violation(
                        f"{epath}.levels[{i}]",
                        "thinking.effort.level_empty",
                        "an effort level MUST be a non-empty string",
                    )
                )
            elif level in seen:
                out.append(
                    Violation(
                        f"{epath}.levels[{i}]",
                        "thinking.effort.level_duplicate",
                        f"effort level {level!r} is listed more than once",
                    )
                )
            seen.add(level)
        default = thinking.effort.default
        if default not in levels:
            out.append(
                Violation(
                    _join(epath, "default"),
                    "thinking.effort.default_not_a_level",
                    f"effort.default {default!r} is not one of the levels {levels!r}",
                )
            )

    if thinking.budget is not None:
        bpath = _join(path, "budget")
        rng = thinking.budget.range
        if rng is None:
            out.append(
                Violation(
                    _join(bpath, "range"),
                    "thinking.budget.range_missing",
                    "budget.range MUST be present",
                )
            )
        else:
            if rng.min < 0:
                out.append(
                    Violation(
                        _join(bpath, "range.min"),
                        "thinking.budget.range_negative",
                        f"budget.range.min {rng.min} MUST be >= 0",
                    )
                )
            if rng.min > rng.max:
                out.append(
                    Violation(
                        _join(bpath, "range"),
                        "thinking.budget.range_inverted",
                        f"budget.range.min {rng.min} is above budget.range.max {rng.max}",
                    )
                )
            default_budget = thinking.budget.default
            if default_budget is not None and not rng.min <= default_budget <= rng.max:
                out.append(
                    Violation(
                        _join(bpath, "default"),
                        "thinking.budget.default_out_of_range",
                        f"budget.default {default_budget} is outside the range "
                        f"[{rng.min}, {rng.max}]",
                    )
                )

    allowed = list(thinking.disable_allowed_efforts)
    apath = _join(path, "disable_allowed_efforts")
    if disable == ThinkingDisable.CONDITIONAL:
        if thinking.effort is None:
            out.append(
                Violation(
                    _join(path, "disable"),
                    "thinking.disable.conditional_without_effort",
                    "disable CONDITIONAL needs an effort control: the levels at which disabling "
                    "is accepted are effort levels",
                )
            )
        if not allowed:
            out.append(
                Violation(
                    apath,
                    "thinking.disable_allowed_efforts.missing",
                    "disable is THINKING_DISABLE_CONDITIONAL, so disable_allowed_efforts MUST "
                    "list the effort levels at which disabling is accepted",
                )
            )
    elif allowed:
        out.append(
            Violation(
                apath,
                "thinking.disable_allowed_efforts.unexpected",
                f"disable_allowed_efforts {allowed!r} is only allowed with disable "
                f"THINKING_DISABLE_CONDITIONAL (disable is {disable_name})",
            )
        )
    seen_allowed: set[str] = set()
    for i, level in enumerate(allowed):
        if level not in levels:
            out.append(
                Violation(
                    f"{apath}[{i}]",
                    "thinking.disable_allowed_efforts.not_a_level",
                    f"{level!r} is not one of the effort levels {levels!r}",
                )
            )
        elif level in seen_allowed:
            out.append(
                Violation(
                    f"{apath}[{i}]",
                    "thinking.disable_allowed_efforts.duplicate",
                    f"effort level {level!r} is listed more than once",
                )
            )
        seen_allowed.add(level)


def _validate_caching(caching: CachingSpec, path: str, out: list[Violation]) -> None:
    if not caching.supported:
        for name in ("explicit_markers", "implicit_automatic"):
            if getattr(caching, name):
                out.append(
                    Violation(
                        _join(path, name),
                        "caching.unsupported_with_mechanism",
                        f"a model with caching.supported=false MUST have {name}=false",
                    )
                )
    elif not (caching.explicit_markers or caching.implicit_automatic):
        out.append(
            Violation(
                path,
                "caching.supported_without_mechanism",
                "caching.supported=true needs explicit_markers or implicit_automatic (or both)",
            )
        )


def _pricing_violations(
    pricing: Pricing, *, caching_supported: bool | None, path: str
) -> list[Violation]:
    # Unknown enum numbers (a window's day) are reported once, by the generic check (_walk).
    return [
        v
        for v in validate_pricing(pricing, caching_supported=caching_supported, path=path)
        if v.rule != "enum.unknown_value"
    ]


def _validate_spec_rules(spec: ModelSpec, path: str, out: list[Violation]) -> None:
    if spec.id == "":
        out.append(Violation(_join(path, "id"), "model.id.empty", "id MUST be non-empty"))
    if spec.context_window <= 0:
        out.append(
            Violation(
                _join(path, "context_window"),
                "model.context_window.not_positive",
                f"context_window {spec.context_window} MUST be > 0 tokens",
            )
        )
    if spec.max_output_tokens <= 0:
        out.append(
            Violation(
                _join(path, "max_output_tokens"),
                "model.max_output_tokens.not_positive",
                f"max_output_tokens {spec.max_output_tokens} MUST be > 0 tokens",
            )
        )
    seen_modes: set[int] = set()
    for i, mode in enumerate(spec.supported_tool_choice_modes):
        where = f"{_join(path, 'supported_tool_choice_modes')}[{i}]"
        if mode == ToolChoiceMode.UNSPECIFIED:
            out.append(
                Violation(
                    where,
                    "model.tool_choice_modes.unspecified",
                    "TOOL_CHOICE_MODE_UNSPECIFIED MUST NOT be declared",
                )
            )
        elif int(mode) in seen_modes:
            out.append(
                Violation(
                    where,
                    "model.tool_choice_modes.duplicate",
                    f"{_enum_label(mode, ToolChoiceMode)} is declared more than once",
                )
            )
        seen_modes.add(int(mode))
    if spec.thinking is None:
        out.append(
            Violation(
                _join(path, "thinking"),
                "model.thinking.missing",
                "thinking MUST be present ({supported: false} for a model that does not reason)",
            )
        )
    else:
        _validate_thinking(spec.thinking, _join(path, "thinking"), out)
    if spec.caching is None:
        out.append(
            Violation(
                _join(path, "caching"),
                "model.caching.missing",
                "caching MUST be present ({supported: false} for a model that does not cache)",
            )
        )
    else:
        _validate_caching(spec.caching, _join(path, "caching"), out)
    if spec.pricing is None:
        out.append(
            Violation(
                _join(path, "pricing"),
                "model.pricing.missing",
                "pricing MUST be present, even for a free model",
            )
        )
    else:
        caching_supported = spec.caching.supported if spec.caching is not None else None
        out.extend(
            _pricing_violations(
                spec.pricing, caching_supported=caching_supported, path=_join(path, "pricing")
            )
        )
    out.extend(declaration_violations(spec, path=path))


def validate_model_spec(spec: ModelSpec, *, path: str = "") -> list[Violation]:
    """Validate one ModelSpec (spec: "ModelSpec", "ThinkingSpec", "CachingSpec", "Pricing").

    Args:
        spec: The declaration to check.
        path: Field path of ``spec`` inside its container, prefixed to every violation's path
            (``"models[2]"`` when called for a Capabilities entry; empty at top level).

    Returns:
        Every violation, in field order (empty when valid). Pricing violations come from
        :func:`protocol_py.rules.pricing.validate_pricing` at ``<path>.pricing``.

    Raises:
        InvalidValueError: ``spec`` is not a ModelSpec, or a field holds a value of the wrong
            Python type (rule ``value.wrong_type``).
    """
    _require(spec, ModelSpec, "spec")
    out: list[Violation] = []
    spec = _walk(spec, path, out)
    _validate_spec_rules(spec, path, out)
    return out


def validate_capabilities(caps: Capabilities) -> list[Violation]:
    """Validate a provider's Capabilities: ``protocol_version`` present
    (``capabilities.protocol_version.missing``) and shaped ``MAJOR.MINOR``
    (``capabilities.protocol_version.malformed``), at least one model
    (``capabilities.models.empty``: a model provider serving no model is useless), each model
    (see :func:`validate_model_spec`, paths ``models[i]...``), unique non-empty model ids, hook
    points (no HOOK_POINT_UNSPECIFIED, no duplicates), and ``config_schema`` a valid JSON Schema
    (draft 2020-12, formats checked: see
    :func:`~protocol_py.rules.json_schema.validate_config_schema`) when present
    (docs/decisions.md#d14). ``None`` in a field without proto3 presence reads as its default
    (``protocol_version=None`` is the empty string).

    The version's MAJOR must equal :data:`protocol_py.version.PROTOCOL_MAJOR`
    (``capabilities.protocol_version.incompatible``); a newer MINOR of the same major is the
    *warning* ``capabilities.protocol_version.newer_minor`` (compatible; fields added since may
    be ignored).

    Raises:
        InvalidValueError: ``caps`` is not a Capabilities or holds a wrongly typed field.
    """
    _require(caps, Capabilities, "caps")
    out: list[Violation] = []
    caps = _walk(caps, "", out)
    if caps.protocol_version == "":
        out.append(
            Violation(
                "protocol_version",
                "capabilities.protocol_version.missing",
                "protocol_version MUST name the protocol version the provider speaks "
                "(MAJOR.MINOR, e.g. '1.0')",
            )
        )
    if not caps.models:
        out.append(
            Violation(
                "models",
                "capabilities.models.empty",
                "a model provider MUST serve at least one model",
            )
        )
    first_index: dict[str, int] = {}
    for i, spec in enumerate(caps.models):
        _validate_spec_rules(spec, f"models[{i}]", out)
        if spec.id == "":
            continue
        if spec.id in first_index:
            out.append(
                Violation(
                    f"models[{i}].id",
                    "capabilities.models.duplicate_id",
                    f"model id {spec.id!r} is already declared by models[{first_index[spec.id]}]",
                )
            )
        else:
            first_index[spec.id] = i
    seen_points: set[int] = set()
    for i, point in enumerate(caps.supported_hook_points):
        where = f"supported_hook_points[{i}]"
        if point == HookPoint.UNSPECIFIED:
            out.append(
                Violation(
                    where,
                    "capabilities.hook_points.unspecified",
                    "HOOK_POINT_UNSPECIFIED MUST NOT be listed",
                )
            )
        elif int(point) in seen_points:
            out.append(
                Violation(
                    where,
                    "capabilities.hook_points.duplicate",
                    f"{_enum_label(point, HookPoint)} is listed more than once",
                )
            )
        seen_points.add(int(point))
    version_match = _PROTOCOL_VERSION_RE.match(caps.protocol_version)
    if caps.protocol_version and not version_match:
        out.append(
            Violation(
                "protocol_version",
                "capabilities.protocol_version.malformed",
                f"protocol_version {caps.protocol_version!r} is not MAJOR.MINOR (e.g. '1.0')",
            )
        )
    elif version_match:
        major, minor = int(version_match.group(1)), int(version_match.group(2))
        if major != PROTOCOL_MAJOR:
            out.append(
                Violation(
                    "protocol_version",
                    "capabilities.protocol_version.incompatible",
                    f"protocol_version {caps.protocol_version!r} has major version {major}; this "
                    f"package speaks {PROTOCOL_VERSION} (major {PROTOCOL_MAJOR}), and a change "
                    "of major version is incompatible",
                )
            )
        elif minor > _OUR_MINOR:
            out.append(
                Violation(
                    "protocol_version",
                    "capabilities.protocol_version.newer_minor",
                    f"protocol_version {caps.protocol_version!r} is newer than this package's "
                    f"{PROTOCOL_VERSION}: compatible, but fields added since may be ignored",
                    "warning",
                )
            )
    if caps.config_schema is not None:
        try:
            schema = from_struct(caps.config_schema, path="config_schema")
        except InvalidValueError as exc:
            out.append(
                _struct_violation(exc, "config_schema", "capabilities.config_schema.invalid")
            )
        else:
            out.extend(validate_config_schema(schema))
    return out
