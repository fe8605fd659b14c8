"""The one JSON parser for everything a vendor sends: a nesting bound checked before parsing.

``json.loads`` recurses once per nested array or object; an upstream (or a gateway in front of
it) that sends JSON nested thousands deep makes it raise :class:`RecursionError`, which is not a
:class:`ValueError` and so escaped every adapter's malformed-JSON handling as an internal
error. :func:`loads` first measures the nesting depth with a scan that skips string contents;
JSON nested deeper than :data:`MAX_VENDOR_JSON_DEPTH` raises :class:`VendorJSONDepthError` (a
``ValueError``, so each caller's existing malformed-JSON path applies: a TRANSIENT error in a
stream, the status-based classification for an error body) without calling ``json.loads``.

Vendors' own documents are shallow: an OpenAI chat chunk, an Anthropic event or a Gemini
``GenerateContentResponse`` nests at most about 8 levels, plus the depth of a tool call's
arguments when a vendor sends them as JSON (Gemini ``functionCall.args``); 128 leaves room for
any tool schema a caller may use while staying far below the interpreter's recursion limit
(1,000 frames by default).

Cost: a text with at most :data:`MAX_VENDOR_JSON_DEPTH` brackets cannot be too deep and is
passed on after two ``str.count`` calls; a text with more is scanned once, token by token (a
fixed regular expression that matches a whole string literal or one bracket), stopping at the
first level past the bound. Vendor texts are bounded before they get here (an SSE event by
``MAX_SSE_EVENT_BYTES``, an error body by ``MAX_ERROR_BODY_BYTES``, a whole 2xx body by 16 MiB).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_VENDOR_JSON_DEPTH", "VendorJSONDepthError", "json_depth_exceeds", "loads"]

MAX_VENDOR_JSON_DEPTH: Final = 128
"""Deepest nesting of arrays and objects accepted in vendor JSON (levels); deeper JSON raises
:class:`VendorJSONDepthError` before ``json.loads`` runs."""

_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}"]', re.DOTALL)
"""A whole string literal (skipped: brackets inside it do not nest) or one bracket; a lone
``"`` is a string that never ends (the rest of the text is inside it)."""
_OPEN: Final = frozenset("[{")
_CLOSE: Final = frozenset("]}")


class VendorJSONDepthError(ValueError):
    """Vendor JSON nested deeper than :data:`MAX_VENDOR_JSON_DEPTH` levels.

    The message names the bound, never the text.
    """

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_VENDOR_JSON_DEPTH} levels")
        self.msg = str(self)  # like json.JSONDecodeError.msg, for callers that show it


def json_depth_exceeds(text: str | bytes, limit: int = MAX_VENDOR_JSON_DEPTH) -> bool:
    """True when ``text`` (JSON, maybe malformed) nests arrays or objects deeper than ``limit``.

    Brackets inside string literals do not count; a closing bracket lowers the level even when
    it does not match its opener (the text is malformed then and ``json.loads`` says so).
    """
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in _OPEN:
            depth += 1
            if depth > limit:
                return True
        elif token in _CLOSE:
            depth = max(depth - 1, 0)
        elif token == '"':
            return False  # an unterminated string: nothing after it nests
    return False


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` for vendor JSON, with the nesting bound checked first.

    Bytes are decoded as UTF-8 by ``json.loads`` itself (invalid UTF-8 raises).

    Raises:
        VendorJSONDepthError: nesting deeper than :data:`MAX_VENDOR_JSON_DEPTH`.
        ValueError: anything else ``json.loads`` rejects (``json.JSONDecodeError``,
            ``UnicodeDecodeError``).
    """
    if json_depth_exceeds(text):
        raise VendorJSONDepthError
    return json.loads(text)


def malformed_event_message(exc: ValueError) -> str:
    """The TRANSIENT error message for an SSE event whose data is not JSON the adapter can read:
    ``malformed JSON in an SSE data line``, followed by the nesting bound when that was the
    cause (never the data itself)."""
    if isinstance(exc, VendorJSONDepthError):
        return f"malformed JSON in an SSE data line ({exc.msg})"
    return "malformed JSON in an SSE data line"
