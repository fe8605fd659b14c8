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
passed on after two ``str.count`` calls; a text with more is measured by C-level passes only
(:func:`json_depth_exceeds`), never a Python loop per character. Vendor texts are bounded
before they get here (an SSE event by ``MAX_SSE_EVENT_BYTES``, an error body by
``MAX_ERROR_BODY_BYTES``, a whole 2xx body by 16 MiB).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_VENDOR_JSON_DEPTH", "VendorJSONDepthError", "json_depth_exceeds", "loads"]

MAX_VENDOR_JSON_DEPTH: Final = 128
"""Deepest nesting of arrays and objects accepted in vendor JSON (levels); deeper JSON raises
:class:`VendorJSONDepthError` before ``json.loads`` runs."""

_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE: Final = bytes.maketrans(b"{}", b"[]")
_RUNS: Final = re.compile(rb"\[+|\]+")
_PASSES: Final = 16
"""``bytes.replace`` passes before the run walk: after them every remaining run of brackets
stands for a subtree at least this deep, so there are at most about ``len / 32`` runs."""


class VendorJSONDepthError(ValueError):
    """Vendor JSON nested deeper than :data:`MAX_VENDOR_JSON_DEPTH` levels.

    The message names the bound, never the text.
    """

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_VENDOR_JSON_DEPTH} levels")
        self.msg = str(self)  # like json.JSONDecodeError.msg, for callers that show it


def json_depth_exceeds(text: str | bytes, limit: int = MAX_VENDOR_JSON_DEPTH) -> bool:
    """True when ``text`` (JSON, maybe malformed) nests arrays or objects deeper than ``limit``.

    Brackets inside string literals do not count (the text after a string that never ends is
    inside it). Only C-level passes over the UTF-8 bytes, never a Python loop per character:
    escaped backslashes and quotes are dropped, the text is split at its quotes and the parts
    outside strings kept, every byte but a bracket deleted; 16 ``bytes.replace`` passes then
    remove the innermost bracket pairs (the shallow structure), and the runs of brackets left
    (each standing for a subtree at least 16 deep, so few) are walked for the deepest level.
    Brackets left unmatched (a truncated text) count as levels too, so a text ``json.loads``
    would recurse into past the bound is never passed on.
    """
    if isinstance(text, str):
        if text.count("[") + text.count("{") <= limit:
            return False
        data = text.encode("utf-8", errors="surrogatepass")
    else:
        data = bytes(text)
        if data.count(b"[") + data.count(b"{") <= limit:
            return False
    if b'"' in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
        data = b"".join(data.split(b'"')[::2])  # outside the string literals
    brackets = data.translate(_SQUARE, _NOT_BRACKETS)
    depth = 0
    # the first passes remove the shallow structure (nearly all of a real document) at C speed
    while brackets and depth < _PASSES and depth <= limit:
        inner = brackets.replace(b"[]", b"")
        if len(inner) == len(brackets):
            break  # no matched pair left
        depth += 1
        brackets = inner
    if not brackets or depth > limit:
        return depth > limit
    # what is left nests deeper than the passes: each remaining run of openers or closers
    # stands for many levels, so a walk over the runs is short
    level = peak = 0
    for run in _RUNS.finditer(brackets):
        size = run.end() - run.start()
        if brackets[run.start()] == 0x5B:  # "["
            level += size
            if level > peak:
                peak = level
                if depth + peak > limit:
                    return True
        else:
            level = max(level - size, 0)
    return depth + peak > limit


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
