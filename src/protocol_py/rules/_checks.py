"""Helpers the validators of :mod:`protocol_py.rules` share: field paths, the Python-type check
of a message built in code, the argument type check, a ``google.protobuf.Struct`` that cannot be
JSON as a violation, and enum value labels for messages.

Package-internal: the validators are :mod:`protocol_py.rules.capabilities`,
:mod:`protocol_py.rules.request` and :mod:`protocol_py.rules.documents`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import betterproto2

from protocol_py.codec import type_check
from protocol_py.errors import InvalidValueError, Violation

__all__: list[str] = []

M = TypeVar("M", bound=betterproto2.Message)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _walk(message: M, path: str, out: list[Violation]) -> M:
    """:func:`protocol_py.codec.type_check.check_message`: the message with proto3 defaults for
    ``None`` (``ModelSpec(id=None)`` is the empty id), Python types checked (raising), unknown
    enum numbers appended to ``out``."""
    fixed, found = type_check.check_message(message, path=path)
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


def _enum_label(value: int, enum_cls: type[betterproto2.Enum]) -> str:
    for member in enum_cls:
        if member.value == value:
            return member.proto_name or member.name or str(int(value))
    return f"{int(value)} (unknown)"
