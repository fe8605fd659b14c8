"""Standalone protocol documents: a proto3-JSON Capabilities, ModelSpec or Pricing file, as the
``protocol-py validate`` command reads it (docs/decisions.md#d13).

:func:`validate_document` detects the kind (:func:`detect_kind`), decodes the document strictly
(:func:`protocol_py.codec.protojson.decode`) and runs the kind's rules on every field that
decodes (:func:`protocol_py.codec.protojson.decode_lenient`), so a JSON typo never hides a rule
violation; :func:`load_document` reads the file first. JSON problems become ``json.*``
violations, a bad file ``file.*`` violations, never exceptions. ``decode_json`` and
``decode_json_or_raise`` are aliases of :func:`protocol_py.codec.protojson.decode` and
:func:`protocol_py.codec.protojson.decode_or_raise`, kept for existing callers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import betterproto2

from protocol_py.codec import protojson
from protocol_py.errors import InvalidValueError, Violation, describe_json_error
from protocol_py.rules._checks import _walk
from protocol_py.rules.capabilities import (
    _pricing_violations,
    validate_capabilities,
    validate_model_spec,
)
from protocol_py_gen.model.v1 import Capabilities, ModelSpec, Pricing

__all__ = [
    "DOCUMENT_KINDS",
    "decode_json",
    "decode_json_or_raise",
    "detect_kind",
    "load_document",
    "validate_document",
]

decode_json = protojson.decode
"""Alias of :func:`protocol_py.codec.protojson.decode` (strict proto3-JSON decoding)."""

decode_json_or_raise = protojson.decode_or_raise
"""Alias of :func:`protocol_py.codec.protojson.decode_or_raise`."""


_DOCUMENT_KINDS: tuple[tuple[str, type[betterproto2.Message]], ...] = (
    ("Capabilities", Capabilities),
    ("ModelSpec", ModelSpec),
    ("Pricing", Pricing),
)

DOCUMENT_KINDS: Final = tuple(name for name, _ in _DOCUMENT_KINDS)
"""The document kinds :func:`validate_document` recognises, in tie-break order."""


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
    what decodes is validated with
    :func:`~protocol_py.rules.capabilities.validate_capabilities`,
    :func:`~protocol_py.rules.capabilities.validate_model_spec` or
    :func:`protocol_py.rules.pricing.validate_pricing` (a standalone Pricing has no caching
    context, so its cache-rate presence rule is not checked), so a JSON typo never hides a rule
    violation.
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
