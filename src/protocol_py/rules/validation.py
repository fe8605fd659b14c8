"""Capability and request validation (issue 3 parts 1, 2 and 7; DESIGN D4, D5, D13).

Every validator returns a list of :class:`~protocol_py.errors.Violation` values: each names a
field path (``models[0].thinking.effort.default``), a stable rule id
(``thinking.effort.default_not_a_level``) and a message naming the offending value. Every broken
rule is reported, never only the first. Rule ids are part of the contract; the conformance vectors
in ``testdata/conformance/`` (documented in ``testdata/conformance/validation.md``) pin them.

Public functions:

* :func:`validate_capabilities` and :func:`validate_model_spec`: what a kernel checks when it loads
  a provider's Capabilities and a server checks at start-up (spec: "ModelSpec", "ThinkingSpec",
  "CachingSpec", "Pricing"). Pricing rules are delegated to
  :func:`protocol_py.rules.pricing.validate_pricing`.
* :func:`validate_request`: a StreamCompletionRequest against the resolved ModelSpec (spec:
  "StreamCompletionRequest", "GenerationParams", "Canonical message & content-block schema",
  "Tool schema"). Its result mixes errors and warnings; warnings (``severity="warning"``) never
  make a request invalid. Use :func:`~protocol_py.errors.errors_only` to keep the errors.
* :func:`validate_request_shape`: the request rules that need no ModelSpec (what a server still
  reports when ``model_id`` names no served model).
* :func:`validate_document` and :func:`load_document`: strict proto3 JSON decoding
  (:func:`protocol_py.codec.protojson.decode`; ``decode_json`` and ``decode_json_or_raise`` here are
  aliases kept for existing callers) of a Capabilities, ModelSpec or Pricing document (the
  ``protocol-py validate`` command). JSON problems become ``json.*`` violations, never
  exceptions, and the rules still run on every field that decodes
  (:func:`protocol_py.codec.protojson.decode_lenient`).

Bad input types (a ``str`` where a ``ModelSpec`` is expected, a field holding a value of the wrong
Python type) raise :class:`~protocol_py.errors.InvalidValueError`; unknown enum numbers kept by
the decoder (betterproto2 keeps them as pseudo-members) are ``enum.unknown_value`` violations.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar, cast

import betterproto2
from jsonschema import Draft202012Validator

from protocol_py.codec import protojson, wire
from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError, Violation, describe_json_error
from protocol_py.rules.pricing import validate_pricing
from protocol_py.rules.request_memo import (
    PREFIXES,
    VALIDATED,
    CleanMessage,
    ValidState,
    clean_message,
    settings_of,
    take_request_images,
)
from protocol_py.rules.vendor_data import vendor_data_problems
from protocol_py.version import PROTOCOL_MAJOR, PROTOCOL_VERSION
from protocol_py_gen.common.v1 import HookPoint
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    Message,
    Role,
)
from protocol_py_gen.google import protobuf as wkt
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    CachingSpec,
    Capabilities,
    GenerationParams,
    ModelSpec,
    Pricing,
    StreamCompletionRequest,
    ThinkingDisable,
    ThinkingSpec,
    ToolChoiceMode,
    ToolDeclaration,
)

__all__ = [
    "PORTABLE_SCHEMA_KEYWORDS",
    "decode_json",
    "decode_json_or_raise",
    "detect_kind",
    "load_document",
    "validate_capabilities",
    "validate_config_schema",
    "validate_document",
    "validate_model_spec",
    "validate_request",
    "validate_request_shape",
    "violations_capped",
]

M = TypeVar("M", bound=betterproto2.Message)

PORTABLE_SCHEMA_KEYWORDS = frozenset(
    {"type", "properties", "required", "enum", "items", "description"}
)
"""The JSON Schema keywords every adapter MUST support (spec: "Tool schema")."""

_PROTOCOL_VERSION_RE = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_OUR_MINOR = int(PROTOCOL_VERSION.split(".")[1])


def _meta(cls: type[betterproto2.Message]) -> Any:
    """betterproto2's per-class field metadata (typed loosely: its classproperty defeats mypy)."""
    return getattr(cls, "_betterproto")  # noqa: B009


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---------------------------------------------------------------------------------------------
# Generic checks of an already-built message: Python types and unknown enum numbers
# ---------------------------------------------------------------------------------------------


def _walk(message: M, path: str, out: list[Violation]) -> M:
    """:func:`protocol_py.codec.protojson.check_message`: the message with proto3 defaults for
    ``None`` (``ModelSpec(id=None)`` is the empty id), Python types checked (raising), unknown
    enum numbers appended to ``out``."""
    fixed, found = protojson.check_message(message, path=path)
    out.extend(found)
    return fixed


def _require(value: Any, cls: type[M], what: str) -> M:
    if not isinstance(value, cls):
        raise InvalidValueError(
            f"{what}: expected a {cls.__module__.rsplit('.', 2)[-2]}.{cls.__name__}, "
            f"got {type(value).__name__}",
            path="",
            rule="value.wrong_type",
        )
    return value


def _struct_violation(exc: InvalidValueError, path: str, rule: str) -> Violation:
    """A Struct that cannot be JSON (NaN, Infinity, a Value with several kinds, a wrongly typed
    field) as a violation at the offending value's path, naming the ``json.*`` rule."""
    detail = str(exc)
    if exc.path and detail.startswith(exc.path + ": "):
        detail = detail[len(exc.path) + 2 :]
    return Violation(exc.path or path, rule, f"{detail} ({exc.rule or 'json.invalid'})")


_METASCHEMA = Draft202012Validator(Draft202012Validator.META_SCHEMA)
# With the metaschema's formats checked (a ``pattern`` must compile as a regular expression):
# what jsonschema's own ``check_schema`` does before a config is validated against the schema.
_METASCHEMA_FORMATS = Draft202012Validator(
    Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
)


SCHEMA_MEMO_ENTRIES: Final = 1024
"""Most JSON Schemas whose metaschema check is memoised (entries, LRU)."""

SCHEMA_MEMO_MAX_CHARS: Final = 16 * 1024
"""Longest schema JSON text whose metaschema check is memoised (characters): a longer one is
checked every time, so the memo holds at most :data:`SCHEMA_MEMO_ENTRIES` x 16 Ki characters
(16 Mi) of keys."""


def _metaschema_errors(schema_json: str, formats: bool = False) -> tuple[tuple[str, str], ...]:
    """(relative path, message) per offending location of one schema, memoised on its JSON text
    up to :data:`SCHEMA_MEMO_MAX_CHARS` characters: the same tool declarations arrive with
    every request of a session."""
    if len(schema_json) > SCHEMA_MEMO_MAX_CHARS:
        return _metaschema_check(schema_json, formats)
    return _memoised_metaschema_check(schema_json, formats)


def _metaschema_check(schema_json: str, formats: bool) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    checker = _METASCHEMA_FORMATS if formats else _METASCHEMA
    for err in checker.iter_errors(json.loads(schema_json)):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        # the metaschema's dynamic references repeat the same error several times
        found.setdefault(where, err.message)
    return tuple(found.items())


_memoised_metaschema_check = functools.lru_cache(maxsize=SCHEMA_MEMO_ENTRIES)(_metaschema_check)


def _schema_violations(
    schema: Any, path: str, rule: str, *, formats: bool = False
) -> list[Violation]:
    """Check a JSON Schema against the draft 2020-12 metaschema: one violation per offending
    location. ``formats`` also checks the metaschema's formats (``pattern`` a regex, ...)."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return [
        Violation(
            path + where if where else path,
            rule,
            f"not a valid JSON Schema (draft 2020-12): {message}",
        )
        for where, message in _metaschema_errors(text, formats)
    ]


def validate_config_schema(schema: Any, *, path: str = "config_schema") -> list[Violation]:
    """Check a provider's config schema (parsed JSON) the way Configure will use it (DESIGN D14).

    The schema must be a valid JSON Schema (draft 2020-12) with the metaschema's formats checked:
    every ``pattern`` / ``patternProperties`` key compiles as a regular expression (Python's
    ``re``, which is what validates the config), ``$ref``/``$id`` are URI references. Tool input
    schemas are not format-checked: a vendor, not Python, applies their patterns.

    Returns:
        One ``capabilities.config_schema.invalid`` violation per offending location, its path
        ``config_schema.properties.a.pattern``; a value that is not JSON (NaN, a non-str key)
        gives one violation at its path. Empty when usable.
    """
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        return [Violation(path, "capabilities.config_schema.invalid", f"not JSON: {exc}")]
    return [
        Violation(
            path + where if where else path,
            "capabilities.config_schema.invalid",
            f"not a valid JSON Schema (draft 2020-12): {message}",
        )
        for where, message in _metaschema_errors(text, True)
    ]


# ---------------------------------------------------------------------------------------------
# Capabilities and ModelSpec (issue 3 part 1)
# ---------------------------------------------------------------------------------------------


def _enum_label(value: int, enum_cls: type[betterproto2.Enum]) -> str:
    for member in enum_cls:
        if member.value == value:
            return member.proto_name or member.name or str(int(value))
    return f"{int(value)} (unknown)"


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
    (draft 2020-12, formats checked: see :func:`validate_config_schema`) when present (DESIGN
    D14). ``None`` in a field without proto3 presence reads
    as its default (``protocol_version=None`` is the empty string).

    The version's MAJOR must equal :data:`protocol_py.version.PROTOCOL_MAJOR`
    (``capabilities.protocol_version.incompatible``); a newer MINOR of the same major is the
    *warning* ``capabilities.protocol_version.newer_minor`` (compatible; fields added since may
    be ignored), and an enum number this version does not know is then the warning
    ``enum.unknown_value`` instead of an error (a value the newer minor added, which matches
    no known value wherever it is read: docs/forward-compatibility.md).

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
            # values a newer minor added: read as no known value (docs/forward-compatibility.md)
            out[:] = [
                Violation(v.path, v.rule, v.message, "warning")
                if v.rule == "enum.unknown_value"
                else v
                for v in out
            ]
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


# ---------------------------------------------------------------------------------------------
# Request validation (issue 3 part 2)
# ---------------------------------------------------------------------------------------------

_TOOL_RESULT_KINDS = frozenset({"text", "image", "document"})


_ONEOF_MEMBERS: dict[tuple[type[betterproto2.Message], str], tuple[str, ...]] = {}
"""(class, oneof group) -> the group's member names in declaration order, built once."""


def _set_members(message: betterproto2.Message, group: str) -> list[str]:
    """The members of oneof ``group`` set on ``message``, in declaration order."""
    key = (type(message), group)
    names = _ONEOF_MEMBERS.get(key)
    if names is None:
        meta = _meta(type(message))
        order = list(meta.meta_by_field_name)
        fields = meta.oneof_field_by_group.get(group, set())
        names = tuple(sorted((f.name for f in fields), key=order.index))
        _ONEOF_MEMBERS[key] = names
    return [name for name in names if getattr(message, name, None) is not None]


MAX_VIOLATIONS: Final = 1000
"""Most violations (errors and warnings) one request validation collects, in violations: it
stops walking the request at the next one and appends a last violation of rule
:data:`TOO_MANY_VIOLATIONS_RULE` saying more were found (a request of 500,000 empty messages
would otherwise build 1.5 million violation objects)."""

TOO_MANY_VIOLATIONS_RULE: Final = "request.too_many_violations"
"""Rule of the last violation of a capped validation (see :data:`MAX_VIOLATIONS`)."""


class _CappedError(Exception):
    """The request already broke :data:`MAX_VIOLATIONS` rules: stop walking it."""


class _Violations(list[Violation]):
    """A violation list that raises :class:`_CappedError` instead of growing past
    :data:`MAX_VIOLATIONS` items."""

    def append(self, item: Violation) -> None:
        if len(self) >= MAX_VIOLATIONS:
            raise _CappedError
        super().append(item)

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)


def _capped_note() -> Violation:
    return Violation(
        "",
        TOO_MANY_VIOLATIONS_RULE,
        f"more than {MAX_VIOLATIONS} violations: validation stopped after the first "
        f"{MAX_VIOLATIONS} (bound MAX_VIOLATIONS)",
    )


def violations_capped(violations: Sequence[Violation]) -> bool:
    """True when ``violations`` ends with the note of a capped validation
    (:data:`MAX_VIOLATIONS`): the others are the first of more."""
    return bool(violations) and violations[-1].rule == TOO_MANY_VIOLATIONS_RULE


class _RequestChecker:
    """One pass over a request; collects violations in ``out``."""

    def __init__(self, spec: ModelSpec | None, out: list[Violation]) -> None:
        # Without a spec only the model-independent rules run (validate_request_shape).
        self.has_spec = spec is not None
        self.spec = spec if spec is not None else ModelSpec()
        self.thinking = self.spec.thinking if self.spec.thinking is not None else ThinkingSpec()
        self.caching = self.spec.caching if self.spec.caching is not None else CachingSpec()
        self.out = out
        self.tool_use_ids: dict[str, str] = {}
        self.new_tool_use_ids: list[str] = []

    def add(self, path: str, rule: str, message: str, severity: str = "error") -> None:
        self.out.append(
            Violation(path, rule, message, "warning" if severity == "warning" else "error")
        )

    # -- content blocks -------------------------------------------------------------------

    def block(self, block: ContentBlock, path: str, where: str, earlier_ids: set[str]) -> None:
        """Check one content block. ``where`` is "message", "tool_result" or "context"."""
        members = _set_members(block, "block")
        if not members:
            self.add(path, "request.content.block_unset", "no member of the block oneof is set")
            return
        if len(members) > 1:
            self.add(
                path,
                "request.content.block_multiple",
                f"exactly one member of the block oneof MUST be set, found {', '.join(members)}",
            )
            return
        kind = members[0]
        bpath = _join(path, kind)
        if where != "message" and kind not in _TOOL_RESULT_KINDS:
            if where == "tool_result":
                self.add(
                    bpath,
                    "request.content.tool_result_content_kind",
                    f"a tool_result may hold only text, image and document blocks, not {kind}",
                )
            else:
                self.add(
                    bpath,
                    "request.context.content_kind",
                    f"an assembled_context section may hold only text, image and document "
                    f"blocks, not {kind}",
                )
            return
        spec = self.spec
        if kind == "image":
            image = block.image
            if self.has_spec and not spec.supports_vision:
                self.add(
                    bpath,
                    "request.content.image_unsupported",
                    f"model {spec.id!r} does not accept image blocks (supports_vision=false)",
                )
            if image is not None and image.media_type == "":
                self.add(
                    _join(bpath, "media_type"),
                    "request.content.media_type_empty",
                    "an image block MUST carry its media type",
                )
        elif kind == "document":
            document = block.document
            if self.has_spec and not spec.supports_documents:
                self.add(
                    bpath,
                    "request.content.document_unsupported",
                    f"model {spec.id!r} does not accept document blocks (supports_documents=false)",
                )
            if document is not None and document.media_type == "":
                self.add(
                    _join(bpath, "media_type"),
                    "request.content.media_type_empty",
                    "a document block MUST carry its media type",
                )
        elif kind in ("thinking", "redacted_thinking"):
            if self.has_spec and not self.thinking.supported:
                self.add(
                    bpath,
                    f"request.content.{kind}_unsupported",
                    f"model {spec.id!r} does not reason (thinking.supported=false); a {kind} "
                    "block is not relevant to it and an adapter will not send it",
                    "warning",
                )
        elif kind == "tool_use":
            tool_use = block.tool_use
            if self.has_spec and not spec.supports_tool_use:
                self.add(
                    bpath,
                    "request.content.tool_use_unsupported",
                    f"model {spec.id!r} does not accept tool_use blocks (supports_tool_use=false)",
                )
            if tool_use is not None:
                if tool_use.id == "":
                    self.add(
                        _join(bpath, "id"),
                        "request.content.tool_use_id_empty",
                        "a tool_use block MUST carry the vendor's tool-call id",
                    )
                elif tool_use.id in self.tool_use_ids:
                    self.add(
                        _join(bpath, "id"),
                        "request.content.tool_use_id_duplicate",
                        f"tool_use id {tool_use.id!r} is already used at "
                        f"{self.tool_use_ids[tool_use.id]}",
                    )
                else:
                    self.tool_use_ids[tool_use.id] = bpath
                    self.new_tool_use_ids.append(tool_use.id)
                if tool_use.name == "":
                    self.add(
                        _join(bpath, "name"),
                        "request.content.tool_use_name_empty",
                        "a tool_use block MUST name the called tool",
                    )
                if tool_use.input is not None:
                    ipath = _join(bpath, "input")
                    try:
                        from_struct(tool_use.input, path=ipath)
                    except InvalidValueError as exc:
                        self.out.append(
                            _struct_violation(exc, ipath, "request.content.tool_use_input_invalid")
                        )
                for problem in vendor_data_problems(tool_use.vendor_data):
                    self.add(
                        f"{bpath}.vendor_data[{problem.entry}]",
                        f"request.content.tool_use.vendor_data.{problem.rule}",
                        problem.message,
                    )
        elif kind == "tool_result":
            result = block.tool_result
            if self.has_spec and not spec.supports_tool_use:
                self.add(
                    bpath,
                    "request.content.tool_result_unsupported",
                    f"model {spec.id!r} does not accept tool_result blocks "
                    "(supports_tool_use=false)",
                )
            if result is not None:
                if result.tool_use_id not in earlier_ids:
                    self.add(
                        _join(bpath, "tool_use_id"),
                        "request.content.tool_result_unknown_id",
                        f"tool_result answers tool_use id {result.tool_use_id!r}, which no "
                        "tool_use block of an earlier message carries",
                    )
                for j, inner in enumerate(result.content):
                    self.block(inner, f"{bpath}.content[{j}]", "tool_result", earlier_ids)

    def _role_fits(self, role: Role, block: ContentBlock, path: str) -> None:
        """tool_use is the model's (ROLE_ASSISTANT); tool_result answers it from the user's side
        (ROLE_USER, which carries tool results: content.v1 Role)."""
        if role == Role.USER and block.tool_use is not None:
            self.add(
                _join(path, "tool_use"),
                "request.content.tool_use_in_user_message",
                "a tool_use block is a call made by the model: it belongs in a ROLE_ASSISTANT "
                "message, not a ROLE_USER one",
            )
        elif role == Role.ASSISTANT and block.tool_result is not None:
            self.add(
                _join(path, "tool_result"),
                "request.content.tool_result_in_assistant_message",
                "a tool_result block answers the model's call: it belongs in a ROLE_USER "
                "message, not a ROLE_ASSISTANT one",
            )

    def messages(
        self, messages: Sequence[Message], images: Sequence[bytes | None] | None = None
    ) -> None:
        """Check the messages; ``images``: each message's wire image, for a request just
        decoded cleanly from them, so a message validated before is not walked again
        (:mod:`protocol_py.rules.request_memo`); a None image (a message over
        :data:`~protocol_py.rules.request_memo.MAX_IMAGE_BYTES`) is walked uncached, and a list
        holding one is not kept as a conversation prefix."""
        if not messages:
            self.add("messages", "request.messages.empty", "messages MUST be non-empty")
        earlier_ids: set[str] = set()
        message_ids: dict[str, int] = {}
        settings = settings_of(self.spec if self.has_spec else None)
        start = 0
        kept: tuple[bytes, ...] = ()
        if images is not None and messages:
            found = PREFIXES.match((settings, messages[0].id), images)
            if found is not None:  # the same messages as a valid list seen before
                kept, state = found
                start = len(kept)
                message_ids = dict(state.message_ids)
                self.tool_use_ids.update(state.tool_use_ids)
                earlier_ids = set(state.answered)
        first = len(self.out)
        uncached = False  # a message without its image: the list is not kept as a prefix
        for i in range(start, len(messages)):
            message = messages[i]
            mpath = f"messages[{i}]"
            if message.id == "":
                self.add(
                    _join(mpath, "id"),
                    "request.message.id_missing",
                    "every message MUST carry its kernel-assigned id",
                )
            elif message.id in message_ids:
                self.add(
                    _join(mpath, "id"),
                    "request.message.id_duplicate",
                    f"message id {message.id!r} is already used by "
                    f"messages[{message_ids[message.id]}] (ids are unique per message, DESIGN D16)",
                )
            else:
                message_ids[message.id] = i
            image = images[i] if images is not None else None
            if image is None:
                uncached = True
            else:
                known = VALIDATED.get(settings, message.id, image)
                if known is not None and self._reuse(known, mpath, earlier_ids):
                    continue
            before = len(self.out)
            if message.role == Role.UNSPECIFIED:
                self.add(
                    _join(mpath, "role"),
                    "request.message.role_unspecified",
                    "a message MUST NOT carry ROLE_UNSPECIFIED",
                )
            if not message.content:
                self.add(
                    _join(mpath, "content"),
                    "request.message.content_empty",
                    "a message MUST carry at least one content block",
                )
            for j, block in enumerate(message.content):
                bpath = f"{mpath}.content[{j}]"
                self._role_fits(message.role, block, bpath)
                self.block(block, bpath, "message", earlier_ids)
            if image is not None and len(self.out) == before:
                VALIDATED.put(settings, message.id, image, clean_message(message))
            earlier_ids.update(self.new_tool_use_ids)
            self.new_tool_use_ids.clear()
        if (
            images is not None
            and messages
            and len(self.out) == first
            and start < len(messages)
            and not uncached
        ):
            PREFIXES.put(
                (settings, messages[0].id),
                # the images kept already are reused; none is None here (not uncached)
                cast("tuple[bytes, ...]", (*kept, *images[start:])),
                ValidState(
                    message_ids=dict(message_ids),
                    tool_use_ids=dict(self.tool_use_ids),
                    answered=frozenset(earlier_ids),
                ),
            )

    def _reuse(self, known: CleanMessage, mpath: str, earlier_ids: set[str]) -> bool:
        """Account for a message that passed every message-local rule before (``known``):
        True when its tool_use ids are new and its tool_results answer earlier calls, as a
        full walk would find; False (nothing changed) when the message must be walked."""
        uses, seen = known.uses, self.tool_use_ids
        for _, use in uses:
            if use in seen:
                return False
        for answer in known.answers:
            if answer not in earlier_ids:
                return False
        for j, use in uses:
            seen[use] = f"{mpath}.content[{j}].tool_use"
            earlier_ids.add(use)
        return True

    def context(self, sections: Sequence[ContextSection]) -> None:
        for i, section in enumerate(sections):
            spath = f"assembled_context[{i}]"
            if section.provider == "":
                self.add(
                    _join(spath, "provider"),
                    "request.context.provider_empty",
                    "a context section MUST name the provider that contributed it",
                )
            for j, block in enumerate(section.content):
                self.block(block, f"{spath}.content[{j}]", "context", set())

    # -- tools ----------------------------------------------------------------------------

    def tools(self, tools: Sequence[ToolDeclaration]) -> None:
        if tools and self.has_spec and not self.spec.supports_tool_use:
            self.add(
                "tools",
                "request.tools.unsupported",
                f"model {self.spec.id!r} does not accept tool declarations "
                f"(supports_tool_use=false), got {len(tools)}",
            )
        first: dict[str, int] = {}
        for i, tool in enumerate(tools):
            tpath = f"tools[{i}]"
            if tool.name == "":
                self.add(_join(tpath, "name"), "request.tools.name_empty", "a tool MUST be named")
            elif tool.name in first:
                self.add(
                    _join(tpath, "name"),
                    "request.tools.name_duplicate",
                    f"tool name {tool.name!r} is already declared by tools[{first[tool.name]}]",
                )
            else:
                first[tool.name] = i
            if tool.input_schema is not None:
                self.schema(tool.input_schema, _join(tpath, "input_schema"))

    def schema(self, struct: wkt.Struct, path: str) -> None:
        try:
            schema = from_struct(struct, path=path)
        except InvalidValueError as exc:
            self.out.append(_struct_violation(exc, path, "request.tools.input_schema.invalid"))
            return
        self.out.extend(_schema_violations(schema, path, "request.tools.input_schema.invalid"))
        top_type = schema.get("type")
        if isinstance(top_type, str) and top_type != "object":
            self.add(
                _join(path, "type"),
                "request.tools.input_schema.not_object",
                f"a tool's arguments are a JSON object, but the schema's type is {top_type!r}",
                "warning",
            )
        self._portable(schema, path)

    def _portable(self, schema: Mapping[str, Any], path: str) -> None:
        stack: list[tuple[str, Mapping[str, Any]]] = [(path, schema)]
        while stack:
            where, node = stack.pop()
            for key in sorted(node):
                value = node[key]
                if key not in PORTABLE_SCHEMA_KEYWORDS:
                    self.add(
                        _join(where, key),
                        "request.tools.input_schema.non_portable",
                        f"JSON Schema keyword {key!r} is outside the portable subset (type, "
                        "properties, required, enum, items, description); adapters may ignore "
                        "or reject it",
                        "warning",
                    )
                elif key == "properties" and isinstance(value, Mapping):
                    for name in sorted(value, reverse=True):
                        if isinstance(value[name], Mapping):
                            stack.append((f"{where}.properties.{name}", value[name]))
                elif key == "items" and isinstance(value, Mapping):
                    stack.append((f"{where}.items", value))

    # -- generation parameters ------------------------------------------------------------

    def params(self, params: GenerationParams, tools: Sequence[ToolDeclaration]) -> None:
        thinking = self.thinking
        spec = self.spec
        effort = thinking.effort
        levels = list(effort.levels) if effort is not None else []
        if params.temperature is not None:
            value = float(params.temperature)
            if not math.isfinite(value):
                self.add(
                    "params.temperature",
                    "request.params.temperature.not_finite",
                    f"temperature {value} MUST be a finite number",
                )
            elif value < 0:
                self.add(
                    "params.temperature",
                    "request.params.temperature.negative",
                    f"temperature {value} MUST be >= 0 (its upper bound is the vendor's)",
                )
        if params.thinking_effort is not None and self.has_spec:
            where = "params.thinking_effort"
            if effort is None:
                self.add(
                    where,
                    "request.params.thinking_effort.unsupported",
                    f"model {spec.id!r} declares no effort control, so thinking_effort "
                    f"{params.thinking_effort!r} cannot be sent",
                )
            elif params.thinking_effort not in levels:
                self.add(
                    where,
                    "request.params.thinking_effort.unknown_level",
                    f"thinking_effort {params.thinking_effort!r} is not one of the model's "
                    f"levels {levels!r}",
                )
        if params.thinking_budget_tokens is not None and self.has_spec:
            where = "params.thinking_budget_tokens"
            budget = thinking.budget
            value = params.thinking_budget_tokens
            if budget is None:
                self.add(
                    where,
                    "request.params.thinking_budget_tokens.unsupported",
                    f"model {spec.id!r} declares no budget control, so thinking_budget_tokens "
                    f"{value} cannot be sent",
                )
            elif budget.range is not None and not budget.range.min <= value <= budget.range.max:
                self.add(
                    where,
                    "request.params.thinking_budget_tokens.out_of_range",
                    f"thinking_budget_tokens {value} is outside the model's range "
                    f"[{budget.range.min}, {budget.range.max}]",
                )
        if params.disable_thinking and params.thinking_budget_tokens is not None:
            # a budget sizes reasoning that disable_thinking turns off: contradictory. An effort
            # is allowed (CONDITIONAL models accept disabling only at some efforts).
            self.add(
                "params.disable_thinking",
                "request.params.disable_thinking.with_budget",
                f"disable_thinking=true contradicts thinking_budget_tokens "
                f"{params.thinking_budget_tokens}: send one or the other",
            )
        if params.disable_thinking and self.has_spec:
            self.disable(params)
        if params.max_output_tokens is not None:
            value = params.max_output_tokens
            if value <= 0:
                self.add(
                    "params.max_output_tokens",
                    "request.params.max_output_tokens.not_positive",
                    f"max_output_tokens {value} MUST be > 0",
                )
            elif self.has_spec and value > spec.max_output_tokens:
                self.add(
                    "params.max_output_tokens",
                    "request.params.max_output_tokens.above_model_max",
                    f"max_output_tokens {value} is above the model's maximum "
                    f"{spec.max_output_tokens}",
                )
        for i, seq in enumerate(params.stop_sequences):
            if seq == "":
                self.add(
                    f"params.stop_sequences[{i}]",
                    "request.params.stop_sequences.empty",
                    "a stop sequence MUST be non-empty",
                )
        if params.tool_choice is not None:
            self.tool_choice(params, tools)

    def disable(self, params: GenerationParams) -> None:
        thinking = self.thinking
        mode = thinking.disable
        where = "params.disable_thinking"
        if mode == ThinkingDisable.ALWAYS:
            return
        if mode == ThinkingDisable.CONDITIONAL:
            if params.thinking_effort is not None:
                effort: str | None = params.thinking_effort
                source = "requested"
            else:
                effort = thinking.effort.default if thinking.effort is not None else None
                source = "default"
            allowed = list(thinking.disable_allowed_efforts)
            if effort is None or effort not in allowed:
                self.add(
                    where,
                    "request.params.disable_thinking.effort_not_allowed",
                    f"model {self.spec.id!r} accepts disable_thinking only at efforts "
                    f"{allowed!r}; the {source} effort is {effort!r}",
                )
            return
        self.add(
            where,
            "request.params.disable_thinking.unsupported",
            f"model {self.spec.id!r} cannot turn reasoning off (thinking.disable is "
            f"{_enum_label(mode, ThinkingDisable)})",
        )

    def tool_choice(self, params: GenerationParams, tools: Sequence[ToolDeclaration]) -> None:
        choice = params.tool_choice
        assert choice is not None
        spec = self.spec
        mode = choice.mode
        label = _enum_label(mode, ToolChoiceMode)
        if mode == ToolChoiceMode.UNSPECIFIED:
            self.add(
                "params.tool_choice.mode",
                "request.params.tool_choice.mode_unspecified",
                "tool_choice.mode MUST be set",
            )
        elif self.has_spec and int(mode) not in {int(m) for m in spec.supported_tool_choice_modes}:
            supported = [_enum_label(m, ToolChoiceMode) for m in spec.supported_tool_choice_modes]
            self.add(
                "params.tool_choice.mode",
                "request.params.tool_choice.mode_unsupported",
                f"model {spec.id!r} does not accept tool_choice mode {label} "
                f"(supported: {supported!r})",
            )
        if mode == ToolChoiceMode.SPECIFIC:
            if choice.tool_name is None:
                self.add(
                    "params.tool_choice.tool_name",
                    "request.params.tool_choice.tool_name_missing",
                    "tool_choice mode TOOL_CHOICE_MODE_SPECIFIC needs tool_name",
                )
            elif choice.tool_name not in {t.name for t in tools}:
                self.add(
                    "params.tool_choice.tool_name",
                    "request.params.tool_choice.unknown_tool",
                    f"tool_choice.tool_name {choice.tool_name!r} names no tool in the request's "
                    "tools",
                )
        elif choice.tool_name is not None:
            self.add(
                "params.tool_choice.tool_name",
                "request.params.tool_choice.tool_name_unexpected",
                f"tool_name {choice.tool_name!r} is only allowed with TOOL_CHOICE_MODE_SPECIFIC "
                f"(mode is {label})",
            )

    # -- cache breakpoints ----------------------------------------------------------------

    def breakpoints(self, breakpoints: Sequence[CacheBreakpoint], n_messages: int) -> None:
        if not self.has_spec or not self.caching.explicit_markers:
            return  # meaningful only with explicit markers; ignored otherwise (spec)
        for i, bp in enumerate(breakpoints):
            bpath = f"cache_breakpoints[{i}]"
            members = _set_members(bp, "position")
            if not members:
                self.add(
                    bpath,
                    "request.cache_breakpoints.position_unset",
                    "no member of the position oneof is set",
                )
            elif len(members) > 1:
                self.add(
                    bpath,
                    "request.cache_breakpoints.position_multiple",
                    f"exactly one position MUST be set, found {', '.join(members)}",
                )
            elif members[0] == "after_message_index":
                index = bp.after_message_index
                assert index is not None
                if not 0 <= index < n_messages:
                    self.add(
                        _join(bpath, "after_message_index"),
                        "request.cache_breakpoints.index_out_of_range",
                        f"after_message_index {index} is outside [0, {n_messages})",
                    )


def _validate_request(
    request: StreamCompletionRequest, spec: ModelSpec | None, *, check_model_id: bool
) -> list[Violation]:
    """One pass over the request. ``spec`` None runs only the model-independent rules."""
    _require(request, StreamCompletionRequest, "request")
    out = _Violations()
    try:
        _check_request(request, spec, out, check_model_id=check_model_id)
    except _CappedError:
        return [*out, _capped_note()]
    return list(out)


def _check_request(
    request: StreamCompletionRequest,
    spec: ModelSpec | None,
    out: list[Violation],
    *,
    check_model_id: bool,
) -> list[Violation]:
    """The pass of :func:`_validate_request`, collecting into ``out``."""
    images = take_request_images(request)
    try:
        if not wire.take_wire_clean(request):  # a request fresh and clean from the wire is
            request = _walk(request, "", out)  # well-typed by construction
            images = None  # only a clean request's messages are those of their images
    except InvalidValueError as exc:
        if exc.rule != "value.too_deep":
            raise
        # reachable from the wire (betterproto2 decodes any depth): a violation, not an error
        out.clear()
        out.append(Violation(exc.path, "request.too_deep", str(exc)))
        return out
    if spec is not None:
        _require(spec, ModelSpec, "spec")
        # type check only; spec rules are validate_model_spec's job
        spec = _walk(spec, "spec", [])
    if check_model_id:
        if request.model_id == "":
            out.append(Violation("model_id", "request.model_id.empty", "model_id MUST be set"))
        elif spec is not None and request.model_id != spec.id:
            out.append(
                Violation(
                    "model_id",
                    "request.model_id.mismatch",
                    f"model_id {request.model_id!r} does not name the resolved model {spec.id!r}",
                )
            )
    checker = _RequestChecker(spec, out)
    checker.messages(request.messages, images)
    checker.tools(request.tools)
    if request.params is not None:
        checker.params(request.params, request.tools)
    checker.context(request.assembled_context)
    cc = request.call_context
    if cc is None:
        out.append(
            Violation(
                "call_context",
                "request.call_context.missing",
                "call_context MUST be set on every request",
            )
        )
    else:
        for name in ("session_id", "turn_id"):
            if getattr(cc, name) == "":
                out.append(
                    Violation(
                        f"call_context.{name}",
                        f"request.call_context.{name}_empty",
                        f"call_context.{name} MUST be non-empty",
                    )
                )
    checker.breakpoints(request.cache_breakpoints, len(request.messages))
    if request.provider_options is not None:
        # pass-through, never interpreted; but it still travels as JSON to the vendor
        try:
            from_struct(request.provider_options, path="provider_options")
        except InvalidValueError as exc:
            out.append(
                _struct_violation(exc, "provider_options", "request.provider_options_invalid")
            )
    return out


def validate_request(request: StreamCompletionRequest, spec: ModelSpec) -> list[Violation]:
    """Validate a StreamCompletionRequest against the resolved ModelSpec (issue 3 part 2).

    Covers model_id, messages (non-empty, unique non-empty ids, roles, at least one content block),
    content blocks (exactly one member; tool_use only in ROLE_ASSISTANT and tool_result only in
    ROLE_USER messages; image/document/tool blocks against supports_vision/supports_documents/
    supports_tool_use, including blocks nested in tool_result and assembled_context; tool_result
    answering an earlier tool_use id; tool_use inputs that are JSON), tools (names, portable input
    schemas that are JSON), GenerationParams (temperature finite and >= 0, thinking
    effort/budget/disable per DESIGN D4, disable_thinking never with a budget, max_output_tokens in
    (0, model max], stop sequences, tool_choice), call_context, cache breakpoints (checked only when
    the model declares ``caching.explicit_markers``; ignored otherwise, as the spec requires) and
    ``provider_options`` (never interpreted, but it must be JSON: no NaN or Infinity). Every
    ``google.protobuf.Struct`` handed on to a provider is checked with
    :func:`protocol_py.codec.structs.from_struct`, so a request that passes never makes a provider
    fail on
    it. The rules that need no ModelSpec are :func:`validate_request_shape`, computed by the same
    pass. ``None`` in a field without proto3 presence reads as its default. The spec itself is not
    validated here; use :func:`validate_model_spec`. For a request the server just decoded
    cleanly, messages whose exact wire images were validated before are not walked again
    (:mod:`protocol_py.rules.request_memo`); the result is the same.

    Returns:
        Errors and warnings together, in request order. Warnings (``severity == "warning"``):
        tool-schema keywords outside the portable subset, a non-object tool schema, and
        thinking/redacted_thinking blocks sent to a model without reasoning. A request is valid
        iff ``errors_only(result)`` is empty.

    Raises:
        InvalidValueError: ``request`` or ``spec`` has the wrong type, or a field holds a value of
            the wrong Python type (rule ``value.wrong_type``).
    """
    if spec is None:  # validate_request_shape is the call for "no model"; keep the typed error
        _require(spec, ModelSpec, "spec")
    return _validate_request(request, spec, check_model_id=True)


def validate_request_shape(request: StreamCompletionRequest) -> list[Violation]:
    """Validate the parts of a StreamCompletionRequest that do not depend on the model.

    For a request whose ``model_id`` names no served model: a server reports these together with its
    own ``request.model_id.unknown`` instead of stopping at the unknown id. The rules are exactly
    those of :func:`validate_request` that need no ModelSpec, computed by the same pass:
    ``model_id`` non-empty, messages non-empty with unique non-empty ids, a role and some content,
    tool_use/tool_result blocks in the role they belong to, disable_thinking without a thinking
    budget, each content block with exactly one member (and the kinds allowed inside tool_result and
    assembled_context), media types, tool_use ids/names and inputs that are JSON, tool_result
    answering an earlier tool_use id, tool names and input schemas, temperature finite and >= 0,
    ``provider_options`` that is JSON, ``max_output_tokens`` > 0, non-empty stop sequences,
    tool_choice mode set and tool_name consistent with it, context section providers, call_context,
    and messages nested at most 100 deep (``request.too_deep``, then the only violation). Left out
    (they need the model): image/document/tool/thinking support, thinking effort, budget and
    disable, the model's output maximum and tool_choice modes, and cache breakpoints (meaningful
    only with explicit markers).

    Returns:
        Errors and warnings, in request order; a subset of what :func:`validate_request` returns
        for the same request against any ModelSpec (``request.model_id.mismatch`` aside).

    Raises:
        InvalidValueError: ``request`` is not a StreamCompletionRequest, or a field holds a value
            of the wrong Python type (rule ``value.wrong_type``).
    """
    return _validate_request(request, None, check_model_id=True)


# ---------------------------------------------------------------------------------------------
# Strict proto3 JSON decoding (issue 3 part 7)
# ---------------------------------------------------------------------------------------------

decode_json = protojson.decode
"""Alias of :func:`protocol_py.codec.protojson.decode` (strict proto3-JSON decoding)."""

decode_json_or_raise = protojson.decode_or_raise
"""Alias of :func:`protocol_py.codec.protojson.decode_or_raise`."""


_DOCUMENT_KINDS: tuple[tuple[str, type[betterproto2.Message]], ...] = (
    ("Capabilities", Capabilities),
    ("ModelSpec", ModelSpec),
    ("Pricing", Pricing),
)


def _field_keys(cls: type[betterproto2.Message]) -> set[str]:
    return set(protojson.field_keys(cls))


def detect_kind(data: Mapping[str, Any]) -> str | None:
    """Name the message a proto3-JSON document holds: ``"Capabilities"``, ``"ModelSpec"``,
    ``"Pricing"``, or ``None`` when no key is a field of any of them.

    Rule: the kind whose fields (JSON or proto names) claim the most of the document's top-level
    keys wins; ties go to Capabilities, then ModelSpec, then Pricing. The three field sets are
    disjoint, so a well-formed document is always recognised by any one of its keys; keys the
    winner does not know are then reported as ``json.unknown_field``. An empty object is not
    recognised (it would be a valid empty Capabilities and an invalid ModelSpec or Pricing).

    Raises:
        InvalidValueError: ``data`` is not a mapping (rule ``value.wrong_type``).
    """
    if not isinstance(data, Mapping):
        raise InvalidValueError(
            f"data: expected a parsed JSON object, got {type(data).__name__}",
            rule="value.wrong_type",
        )
    best: tuple[int, str] | None = None
    for name, cls in _DOCUMENT_KINDS:
        keys = _field_keys(cls)
        hits = sum(1 for key in data if key in keys)
        if hits and (best is None or hits > best[0]):
            best = (hits, name)
    return best[1] if best else None


def validate_document(data: Mapping[str, Any]) -> tuple[str, list[Violation]]:
    """Validate a parsed proto3-JSON Capabilities, ModelSpec or Pricing document.

    The kind is detected from the top-level keys (see :func:`detect_kind`). The document is
    decoded strictly (:func:`protocol_py.codec.protojson.decode`: every ``json.*`` violation), and
    what decodes is validated with :func:`validate_capabilities`, :func:`validate_model_spec` or
    :func:`protocol_py.rules.pricing.validate_pricing` (a standalone Pricing has no caching
    context, so
    its cache-rate presence rule is not checked), so a JSON typo never hides a rule violation.
    Unknown fields are ignored by the rules. A field whose value cannot be decoded is treated as
    absent (:func:`protocol_py.codec.protojson.decode_lenient`), and a rule violation at that field,
    inside it, or at a message that contains it is not reported: it could be an artefact of the
    missing value (``"maxOutputTokens": "x"`` gives only ``json.invalid``, never
    ``model.max_output_tokens.not_positive``).

    Returns:
        ``(kind, violations)`` with kind ``"Capabilities"``, ``"ModelSpec"``, ``"Pricing"``, or
        ``"unknown"`` (with one ``document.unknown_kind`` or ``document.not_object`` violation).
        Never raises for bad data.
    """
    if not isinstance(data, Mapping):
        return "unknown", [
            Violation(
                "",
                "document.not_object",
                f"expected a JSON object (Capabilities, ModelSpec or Pricing), got JSON "
                f"{protojson.json_type(data)}",
            )
        ]
    kind = detect_kind(data)
    if kind is None:
        keys = ", ".join(repr(k) for k in list(data)[:5]) or "none"
        return "unknown", [
            Violation(
                "",
                "document.unknown_kind",
                "not a Capabilities, ModelSpec or Pricing document: no top-level key is a field "
                f"of any of them (keys: {keys})",
            )
        ]
    cls = dict(_DOCUMENT_KINDS)[kind]
    message, violations, pruned = protojson.decode_lenient(cls, data)
    if message is None:
        return kind, violations
    try:
        rules = _document_rules(message)
    except InvalidValueError as exc:  # defensive: a decoded document is well typed
        return kind, [*violations, Violation(exc.path, exc.rule or "json.invalid", str(exc))]
    return kind, [*violations, *(v for v in rules if not _masked(v.path, pruned))]


def _document_rules(message: betterproto2.Message) -> list[Violation]:
    if isinstance(message, Capabilities):
        return validate_capabilities(message)
    if isinstance(message, ModelSpec):
        return validate_model_spec(message)
    assert isinstance(message, Pricing)
    out: list[Violation] = []
    message = _walk(message, "", out)
    for v in _pricing_violations(message, caching_supported=None, path=""):
        out.append(Violation(v.path.lstrip("."), v.rule, v.message, v.severity))
    return out


def _masked(path: str, pruned: Sequence[str]) -> bool:
    """Whether a rule violation at ``path`` may be an artefact of a field that did not decode
    (and was treated as absent): it is at that field, inside it, or at a message containing it.
    """
    for gone in pruned:
        if path == gone or path.startswith((gone + ".", gone + "[")):
            return True
        if gone.startswith((path + ".", path + "[")) or path == "":
            return True
    return False


def load_document(path: str) -> tuple[str, list[Violation]]:
    """Read a JSON file and validate it with :func:`validate_document`.

    Returns:
        ``(kind, violations)``. An unreadable file gives kind ``"unknown"`` and one
        ``file.unreadable`` violation; text that is not UTF-8 JSON (or holds NaN/Infinity) one
        ``file.not_json`` violation. Never raises for a bad file.

    Raises:
        InvalidValueError: ``path`` is not a file path (``str``, ``bytes`` or path-like; rule
            ``value.wrong_type``). An ``int`` is refused rather than read as a file descriptor.
    """
    if not isinstance(path, (str, bytes)) and not hasattr(path, "__fspath__"):
        raise InvalidValueError(
            f"path: expected a file path, got {type(path).__name__}", rule="value.wrong_type"
        )
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
        reason = getattr(exc, "strerror", None) or exc
        return "unknown", [Violation(str(path), "file.unreadable", f"cannot read: {reason}")]

    def reject(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        data = json.loads(raw.decode("utf-8-sig"), parse_constant=reject)
    except json.JSONDecodeError as exc:
        return "unknown", [
            Violation(str(path), "file.not_json", f"not valid JSON: {describe_json_error(exc)}")
        ]
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return "unknown", [Violation(str(path), "file.not_json", f"not valid JSON: {exc}")]
    return validate_document(data)
