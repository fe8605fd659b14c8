"""Configure's config schema: JSON Schema validation of a config, and secret redaction.

A provider declares its configuration as a JSON Schema (draft 2020-12; docs/decisions.md#d14).
Configure checks a config against it here; messages name JSON Pointer paths and schema rules, never
the values, so secrets cannot leak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import jsonschema
from rfc3986_validator import validate_rfc3986  # type: ignore[import-untyped]

from protocol_py.codec.structs import MAX_EXACT_INT, structs_within
from protocol_py_gen.google.protobuf import Struct, Value

SECRET_KEY_RE: Final = re.compile(r"key|token|secret|password", re.IGNORECASE)
"""A config key whose name matches this (anywhere, any case) holds a secret."""

REDACTED_NAME: Final = "<redacted>"
"""What an error or log line shows instead of a secret-looking name (:func:`looks_secret`)."""

SECRET_SCAN_CHARS: Final = 1024
"""How much of a name :func:`looks_secret` reads, characters: more than any error or log line
shows of one name (``MAX_LISTED_ITEM_CHARS``, 256), so the check is bounded whatever the name's
length."""

_VENDOR_KEY: Final = re.compile(
    r"(?:sk-|xai-|gsk_|AIza|ghp_|gho_|github_pat_|glpat-|xox[abposr]-)[A-Za-z0-9_\-]{6,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
)
"""A credential's shape: OpenAI and Anthropic ``sk-`` (``sk-ant-``, ``sk-proj-``), xAI
``xai-``, Groq ``gsk_``, Google ``AIza``, GitHub ``ghp_``/``gho_``/``github_pat_``, GitLab
``glpat-``, Slack ``xoxb-`` (and ``xoxa-``, ``xoxp-``, ``xoxo-``, ``xoxs-``, ``xoxr-``), then at
least 6 key characters; or an AWS access key id (``AKIA`` or ``ASIA`` and 16 upper-case letters
and digits)."""

_SEGMENT: Final = re.compile(r"[A-Za-z0-9+=]{16,}")
"""A run of at least 16 letters, digits, ``+`` and ``=`` (a key name's words are separated by
``_``, ``-``, ``.``, ``/`` or case changes within shorter runs)."""


def _random_looking(run: str) -> bool:
    if len(run) >= 32:
        return len(set(run)) >= 10
    digits = sum(c.isdigit() for c in run)
    if not digits or digits == len(run):
        return False
    return digits >= 2 or (any(c.isupper() for c in run) and any(c.islower() for c in run))


def looks_secret(name: str) -> bool:
    """True when ``name`` (a Configure key, a URL path segment) looks like a credential rather
    than a name, so that errors and logs show :data:`REDACTED_NAME` instead.

    The rule (docs/security.md, "What is never logged"): a credential's shape (``sk-...``,
    ``sk-ant-...``, ``xai-...``, ``gsk_...``, ``AIza...``, ``ghp_...``, ``glpat-...``,
    ``xoxb-...`` and the others of ``_VENDOR_KEY``, then 6 key characters; an AWS access key
    id), or a run of 16
    or more characters of ``[A-Za-z0-9+=]`` that is random-looking: 32 characters or more with at
    least 10 different ones, or
    letters mixed with at least 2 digits, or with a digit and both letter cases. Words joined by
    ``_`` or ``-`` (``max_retry_after_s``, ``claude-sonnet-4-5-20250929``) never match. Only the
    first :data:`SECRET_SCAN_CHARS` characters are read.
    """
    head = name[:SECRET_SCAN_CHARS]
    if _VENDOR_KEY.search(head):
        return True
    return any(_random_looking(m.group()) for m in _SEGMENT.finditer(head))


def shown_name(name: str) -> str:
    """``name`` as an error or log line may show it: :data:`REDACTED_NAME` when it
    :func:`looks_secret`, else unchanged."""
    return REDACTED_NAME if looks_secret(name) else name


def _is_uri(value: object) -> bool:
    """RFC 3986 ``absolute-URI`` syntax (any scheme: ``https:``, ``file:``, ``urn:``, ...),
    checked by ``rfc3986-validator``; non-strings pass (``format`` applies to strings only)."""
    if not isinstance(value, str):
        return True
    return validate_rfc3986(value, rule="URI") is not None


MAX_FORMAT_CHARS: Final = 8192
"""Longest config string a ``format`` is checked on, characters (8 Ki: RFC 9110 asks that URIs
of at least 8,000 octets be supported); a longer one fails its format unchecked. The checks
are regular expressions and parsers over the whole string in one call (``rfc3986-validator``'s
``uri`` took about 120 bytes of memory per character: a 60 MB ``base_url`` peaked at 7.4 GB)."""


def _bounded(check: Callable[[object], bool]) -> Callable[[object], bool]:
    """``check``, failing at once for a string over :data:`MAX_FORMAT_CHARS` characters."""

    def bounded(value: object) -> bool:
        if isinstance(value, str) and len(value) > MAX_FORMAT_CHARS:
            return False
        return check(value)

    return bounded


def config_format_checker() -> jsonschema.FormatChecker:
    """jsonschema's draft 2020-12 format checker with ``uri`` always checked (RFC 3986 syntax,
    through ``rfc3986-validator``), whichever optional URI packages are installed; every format
    fails, unchecked, on a string over :data:`MAX_FORMAT_CHARS` characters."""
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    checker = jsonschema.FormatChecker(list(checker.checkers))
    checker.checks("uri")(_is_uri)
    for name, (check, raises) in list(checker.checkers.items()):
        checker.checks(name, raises)(_bounded(check))
    return checker


def json_pointer(path: Any) -> str:
    """Render a jsonschema error path (a deque of keys and indices) as a JSON Pointer."""
    parts = [shown_name(str(p)).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else "/"


def _describe_schema_error(error: jsonschema.ValidationError) -> list[str]:
    """Messages for one schema error that never include the offending value: one per unknown
    property for ``additionalProperties`` (so the error count counts properties), else one."""
    validator = str(error.validator)
    instance = error.instance
    if validator == "additionalProperties" and isinstance(instance, Mapping):
        allowed = (
            set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        )
        extra = sorted(str(k) for k in instance if k not in allowed)
        return [
            f"{json_pointer([*error.absolute_path, k])}: unknown property "
            "(additionalProperties is false)"
            for k in extra
        ]
    return [_describe_one(error)]


def _describe_one(error: jsonschema.ValidationError) -> str:
    where = json_pointer(error.absolute_path)
    validator = str(error.validator)
    expected = error.validator_value
    instance = error.instance
    if validator == "required" and isinstance(instance, Mapping):
        missing = [k for k in expected if k not in instance] if isinstance(expected, list) else []
        return f"{where}: missing required property {', '.join(map(str, missing))}"
    if validator == "type":
        return f"{where}: must be of type {json.dumps(expected)}"
    if validator == "format":
        if isinstance(instance, str) and len(instance) > MAX_FORMAT_CHARS:
            return (
                f"{where}: is not a valid {expected!r}: longer than {MAX_FORMAT_CHARS} "
                f"characters (bound MAX_FORMAT_CHARS), not checked"
            )
        return f"{where}: is not a valid {expected!r}"
    if validator in ("enum", "const"):
        return f"{where}: must be one of {json.dumps(expected)}"
    return f"{where}: fails {validator} {json.dumps(expected, default=str)}"


def validate_config(schema: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Validate ``config`` against a JSON Schema (draft 2020-12, formats checked).

    Returns:
        One message per error, ``"<JSON Pointer>: <rule>"``, sorted by path; empty when valid.
        Messages name paths and schema rules only, never the values, so secrets cannot leak.

    Raises:
        ValueError: the schema itself is invalid or unusable (metaschema or format errors such
            as a ``pattern`` that is no regular expression, or a failure while applying it such
            as an unresolvable ``$ref``).
    """
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid config schema: {exc.message}") from None
    validator = jsonschema.Draft202012Validator(schema, format_checker=config_format_checker())
    try:
        errors = sorted(
            validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path]
        )
    except Exception as exc:  # an unresolvable $ref, a regex the engine rejects, ...
        raise ValueError(f"unusable config schema: {type(exc).__name__}: {exc}") from None
    return [message for e in errors for message in _describe_schema_error(e)]


def inexact_numbers(config: Any, path: tuple[str | int, ...] = ()) -> list[str]:
    """Every number in ``config`` whose magnitude is beyond 2^53 (docs/decisions.md#d5), as
    ``"<JSON Pointer>: number beyond 2^53 (json.integer_beyond_2_53) ..."`` messages.

    A Struct number is a double: above 2^53 (:data:`~protocol_py.codec.structs.MAX_EXACT_INT`) every
    double is an integer, and not every integer is a double, so the value the caller meant may
    already have been rounded. ``from_struct`` rejects such a Python ``int``; this also catches
    one that arrived on the wire as a double (``1e20``), which would otherwise pass a schema
    ``"type": "integer"`` and be applied rounded or dropped. Values are never echoed.
    """
    if isinstance(config, Mapping):
        return [m for k, v in config.items() for m in inexact_numbers(v, (*path, str(k)))]
    if isinstance(config, list):
        return [m for i, v in enumerate(config) for m in inexact_numbers(v, (*path, i))]
    if (
        isinstance(config, int | float)
        and not isinstance(config, bool)
        and abs(config) > MAX_EXACT_INT
    ):
        return [
            f"{json_pointer(path)}: number beyond 2^53 (json.integer_beyond_2_53): a "
            "google.protobuf.Value double cannot carry it exactly"
        ]
    return []


def loose_objects(schema: Any, path: str = "#") -> list[str]:
    """JSON Pointer fragments of every object-typed subschema of ``schema`` that does not set
    ``additionalProperties: false`` (a misspelt key would then validate and be dropped)."""
    found: list[str] = []
    if isinstance(schema, Mapping):
        if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
            found.append(path)
        for key, value in schema.items():
            found.extend(loose_objects(value, f"{path}/{key}"))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            found.extend(loose_objects(value, f"{path}/{index}"))
    return found


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``config`` with the value of every secret-like key (:data:`SECRET_KEY_RE`) replaced
    by ``"***"``, at any depth, and every key name that :func:`looks_secret` (with its value)
    replaced by ``<redacted>``, ``<redacted>#2``, ... (one entry each, none lost)."""

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            hidden = 0
            for k, v in value.items():
                if looks_secret(str(k)):
                    hidden += 1
                    out[REDACTED_NAME if hidden == 1 else f"{REDACTED_NAME}#{hidden}"] = "***"
                else:
                    out[k] = "***" if SECRET_KEY_RE.search(str(k)) else walk(v)
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    result = walk(config)
    return result if isinstance(result, dict) else {}


MAX_CONFIG_ENTRIES: Final = 10_000
"""Most object members and array elements a Configure config may hold, at every depth
counted together (docs/decisions.md#d35). A larger config is refused INVALID_ARGUMENT before
it is converted or checked: jsonschema sorts all the unknown keys of an object in one C call
(``additionalProperties``), which for a million keys held the interpreter, and so the event
loop, for seconds even in a worker thread; provider configs hold tens of entries."""


def config_entries_within(struct: Struct | None, bound: int = MAX_CONFIG_ENTRIES) -> bool:
    """Whether ``struct`` holds at most ``bound`` object members and array elements, at
    every depth counted together; counting stops one past ``bound`` (a config of a million
    keys costs ``bound`` steps, never a pass over all of them)."""
    return structs_within([struct], bound)


def fill_missing_values(struct: Struct | None) -> Struct | None:
    """Give every Struct map entry decoded without a value (None) an empty Value, in place.

    A map entry with no value field is legal protobuf; its Value has no kind, which protobuf's
    JSON mapping reads as null. betterproto2 leaves such entries as None.
    """
    if struct is None:
        return None
    stack: list[Struct] = [struct]
    while stack:
        current = stack.pop()
        for key, value in list(current.fields.items()):
            if value is None:
                current.fields[key] = Value()
                continue
            pending = [value]
            while pending:
                item = pending.pop()
                if item.struct_value is not None:
                    stack.append(item.struct_value)
                elif item.list_value is not None:
                    pending.extend(v for v in item.list_value.values if v is not None)
    return struct


# -- reflection --------------------------------------------------------------------------------
