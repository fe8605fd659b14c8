"""Violations and the typed errors every public function of the package raises
(docs/decisions.md#d13).

A :class:`Violation` is one broken rule: a field path such as
``pricing.tiers[1].input_tokens_until``, a stable rule id such as ``pricing.tiers.overlap`` and a
human-readable message. Validators return every violation, never only the first.

Every error the package raises derives from :class:`ProtocolError`; errors about a malformed value
also derive from :class:`ValueError`, so callers that already catch ``ValueError`` keep working.
No public function lets a bare ``KeyError``, ``TypeError`` or ``IndexError`` escape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule.

    Attributes:
        path: Field path inside the validated value, dotted with ``[i]`` indices, for example
            ``models[0].thinking.effort.default``. Empty for the value as a whole.
        rule: Stable rule id, for example ``thinking.effort.default_not_a_level``. Rule ids are
            part of the contract: conformance vectors and other languages match on them.
        message: Human-readable explanation naming the offending value.
        severity: ``"error"`` (the value is invalid) or ``"warning"`` (valid, but the caller
            should know, for example a tool schema keyword outside the portable subset).
    """

    path: str
    rule: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        """Render as ``path: rule: message``, the command line's format."""
        return f"{self.path or '<root>'}: {self.rule}: {self.message}"


def errors_only(violations: Iterable[Violation]) -> list[Violation]:
    """Return the violations of severity ``"error"``, in order.

    Raises:
        InvalidValueError: ``violations`` is not an iterable of :class:`Violation`
            (rule ``value.wrong_type``).
    """
    return [v for v in _violations(violations, "violations") if v.severity == "error"]


def _violations(violations: object, what: str) -> list[Violation]:
    items = (
        list(violations)
        if isinstance(violations, Iterable) and not isinstance(violations, (str, bytes, Mapping))
        else None
    )
    if items is None or not all(isinstance(v, Violation) for v in items):
        raise InvalidValueError(
            f"{what}: expected an iterable of Violation, got {type(violations).__name__}",
            path=what,
            rule="value.wrong_type",
        )
    return items


class ProtocolError(Exception):
    """Base class of every error raised by protocol-py."""


class InvalidValueError(ProtocolError, ValueError):
    """A value is malformed: a negative token count, a NaN rate, an unparseable date, an unknown
    enum value, JSON that cannot be carried exactly. The message names the field and the rule."""

    def __init__(self, message: str, *, path: str = "", rule: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.rule = rule


class ValidationError(ProtocolError, ValueError):
    """A value broke one or more rules; ``violations`` lists every one of them."""

    def __init__(self, violations: Sequence[Violation], what: str = "value") -> None:
        """Raises:
        InvalidValueError: ``violations`` is not an iterable of :class:`Violation`."""
        self.violations: tuple[Violation, ...] = tuple(_violations(violations, "violations"))
        lines = "\n".join(f"  {v}" for v in self.violations)
        super().__init__(f"invalid {what}: {len(self.violations)} violation(s)\n{lines}")


class StreamOrderError(ProtocolError):
    """A StreamEvent sequence broke the event-order rules (docs/decisions.md#d12).

    Attributes:
        index: Zero-based index of the offending event in the stream.
        rule: Stable rule id, for example ``stream.order.event_after_terminal``.
    """

    def __init__(self, index: int, rule: str, message: str) -> None:
        super().__init__(f"event {index}: {rule}: {message}")
        self.index = index
        self.rule = rule
        self.detail = message


_JSON_EXPECTED = {
    "Expecting value": "expected a JSON value",
    "Expecting property name enclosed in double quotes": (
        "expected a property name in double quotes (a trailing comma?)"
    ),
    "Expecting ':' delimiter": "expected ':' after the property name",
    "Expecting ',' delimiter": "expected ',' or a closing bracket",
    "Extra data": "unexpected text after the JSON value",
    "Unterminated string starting at": "unterminated string",
    "Invalid control character at": "a control character inside a string (escape it)",
    "Invalid \\escape": "an invalid backslash escape",
}


def describe_json_error(exc: json.JSONDecodeError) -> str:
    """``line L column C: <what was expected>`` for a JSON syntax error (1-based line and
    column, as an editor shows them), saying when the text ended early."""
    what = _JSON_EXPECTED.get(exc.msg, exc.msg)
    if exc.pos >= len(exc.doc.rstrip()) and exc.msg != "Extra data":
        what = f"the text ends early ({what})"
    return f"line {exc.lineno} column {exc.colno}: {what}"
