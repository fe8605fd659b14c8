"""JSON Schema checks: tool input schemas and a provider's config schema (spec: "Tool schema";
docs/decisions.md#d14).

A schema is usable when it passes the JSON Schema draft 2020-12 metaschema. A config schema is
also checked with the metaschema's formats (every ``pattern`` compiles as a Python regular
expression, since Python validates the config); a tool input schema is not, as a vendor, not
Python, applies its patterns. :data:`PORTABLE_SCHEMA_KEYWORDS` is the subset every adapter MUST
support; :mod:`protocol_py.rules.request` warns about the other keywords of a tool schema.

The metaschema check is memoised on the schema's JSON text, bounded by
:data:`SCHEMA_MEMO_ENTRIES` entries of at most :data:`SCHEMA_MEMO_MAX_CHARS` characters; a
longer schema's on the SHA-256 digest of its text (:data:`LARGE_SCHEMA_MEMO_ENTRIES`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Final

from jsonschema import Draft202012Validator

from protocol_py.bounded_text import MAX_LISTED_ITEM_CHARS, bounded_message
from protocol_py.codec.prefixes import BoundedLRU
from protocol_py.errors import Violation

__all__ = [
    "LARGE_SCHEMA_MEMO_BYTES",
    "LARGE_SCHEMA_MEMO_ENTRIES",
    "PORTABLE_SCHEMA_KEYWORDS",
    "SCHEMA_MEMO_ENTRIES",
    "SCHEMA_MEMO_MAX_CHARS",
    "validate_config_schema",
]

PORTABLE_SCHEMA_KEYWORDS = frozenset(
    {"type", "properties", "required", "enum", "items", "description"}
)
"""The JSON Schema keywords every adapter MUST support (spec: "Tool schema")."""


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


LARGE_SCHEMA_MEMO_ENTRIES: Final = 256
"""Most JSON Schemas longer than :data:`SCHEMA_MEMO_MAX_CHARS` whose metaschema check is
memoised (entries, LRU), each under the SHA-256 digest of its JSON text (32 bytes): a kernel
resends the same large tool schema every turn, and its check costs about 0.3 ms a JSON value
(a schema of 9,999 values took 2.9 s each time)."""

LARGE_SCHEMA_MEMO_BYTES: Final = 16 * 1024 * 1024
"""Most bytes those memoised checks hold (16 MiB), each entry counted as its digest plus the
characters of its errors' paths and messages; an entry larger than that is not kept."""

_Errors = tuple[tuple[str, str], ...]


class _DigestMemo(BoundedLRU[tuple[bytes, bool], _Errors]):
    def get(self, key: tuple[bytes, bool]) -> _Errors | None:
        return self._get(key)

    def put(self, key: tuple[bytes, bool], errors: _Errors) -> None:
        self._put(key, errors, len(key[0]) + sum(len(a) + len(b) for a, b in errors))


_large_memo = _DigestMemo(LARGE_SCHEMA_MEMO_ENTRIES, LARGE_SCHEMA_MEMO_BYTES)


def _metaschema_errors(schema_json: str, formats: bool = False) -> _Errors:
    """(relative path, message) per offending location of one schema, memoised on its JSON text
    up to :data:`SCHEMA_MEMO_MAX_CHARS` characters, on the text's SHA-256 digest beyond
    (:data:`LARGE_SCHEMA_MEMO_ENTRIES`, :data:`LARGE_SCHEMA_MEMO_BYTES`): the same tool
    declarations arrive with every request of a session."""
    if len(schema_json) <= SCHEMA_MEMO_MAX_CHARS:
        return _memoised_metaschema_check(schema_json, formats)
    key = (hashlib.sha256(schema_json.encode("utf-8", "surrogatepass")).digest(), formats)
    found = _large_memo.get(key)
    if found is None:
        found = _metaschema_check(schema_json, formats)
        _large_memo.put(key, found)
    return found


def _metaschema_check(schema_json: str, formats: bool) -> _Errors:
    """(relative path, message) per offending location, each cut to
    :data:`~protocol_py.bounded_text.MAX_LISTED_ITEM_CHARS` bytes (jsonschema's messages quote
    the offending value whole, and a path names the schema's keys: both are caller text, kept
    in the memo)."""
    found: dict[str, str] = {}
    checker = _METASCHEMA_FORMATS if formats else _METASCHEMA
    for err in checker.iter_errors(json.loads(schema_json)):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        where = bounded_message(where, MAX_LISTED_ITEM_CHARS)
        # the metaschema's dynamic references repeat the same error several times
        if where not in found:
            found[where] = bounded_message(err.message, MAX_LISTED_ITEM_CHARS)
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
    """Check a provider's config schema (parsed JSON) the way Configure will use it
    (docs/decisions.md#d14).

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
