"""Bounded error text: the one capping rule for every status message, echoed value and log detail.

A gRPC status message travels in the ``grpc-message`` trailer, percent-encoded and HPACK-coded;
HPACK's cost grows with the square of a header's length, so an error that repeated a 1 MiB
caller value would hold every client for minutes. Every path that builds a gRPC
status, an in-band error message or a log detail from caller text goes through this module:

* :func:`quote_value` echoes one caller value as its ``repr``, cut to
  :data:`MAX_ECHOED_VALUE_CHARS` with a marker and the full length:
  ``'aaaa…' (1048576 chars, cut)``;
* :func:`bounded_message` caps a whole message so that its percent-encoded form (what
  ``grpc-message`` carries) is at most :data:`MAX_ERROR_MESSAGE_BYTES` bytes;
* :func:`printable` makes foreign text (a vendor's error message) safe to show: cut to
  :data:`MAX_FOREIGN_TEXT_CHARS` and every character Python does not print escaped (``\\x00``,
  ``\\n``, ``\\u2028``, ``\\u202e``);
* :func:`listed` joins a list of problems into ``"<prefix>: N <noun>(s): a; b"`` and, when they
  do not all fit, says how many are listed and how many there are in all:
  ``"<prefix>: 5000 <noun>(s), first 12 listed: a; b; ..."``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final
from urllib.parse import quote

MAX_ERROR_MESSAGE_BYTES: Final = 1024
"""Largest gRPC status message, in bytes of its percent-encoded form (the ``grpc-message``
trailer); also the bound of every in-band error message and every log ``detail`` built from
caller text."""

MAX_ECHOED_VALUE_CHARS: Final = 64
"""Largest part of one caller value echoed in an error or log line, in characters (of the
value itself, before quoting); a longer value is cut and marked with its full length."""

MAX_LISTED_ITEM_CHARS: Final = 256
"""Largest single problem in a :func:`listed` message, in characters."""

MAX_FOREIGN_TEXT_CHARS: Final = 4096
"""Largest part of a foreign text (an upstream's error message) kept by :func:`printable`, in
characters, before escaping; a message is cut to :data:`MAX_ERROR_MESSAGE_BYTES` later, and
this first cut bounds the work of redacting it."""

CUT_MARKER: Final = "…"
"""Appended where text was cut (U+2026 HORIZONTAL ELLIPSIS)."""

_GRPC_MESSAGE_SAFE: Final = "".join(chr(c) for c in range(0x20, 0x7F) if c != ord("%"))
"""The characters ``grpc-message`` carries unescaped (printable ASCII except ``%``)."""


def encoded_size(text: str) -> int:
    """Length in bytes of ``text`` percent-encoded as the ``grpc-message`` trailer carries it."""
    return len(quote(text, safe=_GRPC_MESSAGE_SAFE, encoding="utf-8", errors="replace"))


def quote_value(value: object, limit: int = MAX_ECHOED_VALUE_CHARS) -> str:
    """``repr(value)`` of a str (or ``str(value)`` of anything else), cut to ``limit`` chars.

    Example: ``quote_value("a" * 1048576)`` is ``"'aaaa…' (1048576 chars, cut)"`` (with
    ``limit`` a's); a value within the limit is its plain ``repr``.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit] + CUT_MARKER!r} ({len(value)} chars, cut)"
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{CUT_MARKER} ({len(text)} chars, cut)"


def _shown(char: str) -> str:
    return char if char.isprintable() else repr(char)[1:-1]


def printable(text: str, limit: int = MAX_FOREIGN_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (marked as :func:`bounded_message` does) with every
    character Python does not print escaped as its ``repr`` does: controls (NUL ->
    ``\\x00``, LF -> ``\\n``), line and paragraph separators (``\\u2028``), bidi overrides
    and other format characters (``\\u202e``), spaces other than ASCII's (``\\xa0``).

    Example: ``printable("a\\x00b")`` is ``"a\\\\x00b"`` (the four characters ``\\x00``)."""
    if len(text) > limit:
        text = f"{text[:limit]}{CUT_MARKER} ({len(text)} chars, cut)"
    return text if text.isprintable() else "".join(map(_shown, text))


def bounded_message(text: str, limit: int = MAX_ERROR_MESSAGE_BYTES) -> str:
    """``text`` unchanged if its percent-encoded form fits in ``limit`` bytes, else cut at a
    character boundary and ended with ``"… (<n> chars, cut)"`` so that the result fits."""
    if len(text) <= limit // 3 or encoded_size(text) <= limit:
        return text
    suffix = f"{CUT_MARKER} ({len(text)} chars, cut)"
    budget = limit - encoded_size(suffix)
    keep = min(len(text), budget)
    while keep > 0 and encoded_size(text[:keep]) > budget:
        # each character costs 1 to 12 encoded bytes: shrink in proportion, at least by one
        keep = min(keep - 1, keep * budget // max(1, encoded_size(text[:keep])))
    return text[: max(0, keep)] + suffix


def listed(
    prefix: str,
    noun: str,
    items: Sequence[str],
    limit: int = MAX_ERROR_MESSAGE_BYTES,
    *,
    more: bool = False,
) -> str:
    """``"<prefix>: <N> <noun>(s): a; b; c"``, with as many items as fit in ``limit`` bytes.

    Each item is first cut to :data:`MAX_LISTED_ITEM_CHARS`. When not every item fits, the
    count says how many are listed: ``"invalid config: 5000 error(s), first 3 listed: a; b; c"``.
    ``more`` says ``items`` are only the first of more (a capped collection): the count then
    reads ``"more than <N>"``. At least one item is always listed (cut if need be); the result
    fits in ``limit``.
    """
    total: int | str = len(items)
    if more:
        total = f"more than {total}"
    head_all = f"{prefix}: {total} {noun}(s): "
    cut = [bounded_message(item, MAX_LISTED_ITEM_CHARS) for item in items]
    whole = head_all + "; ".join(cut)
    if encoded_size(whole) <= limit and not more:
        return whole
    size = encoded_size(f"{prefix}: {total} {noun}(s), first {total} listed: ")
    count = 0
    for item in cut:
        extra = encoded_size(item) + (2 if count else 0)
        if size + extra > limit:
            break
        size += extra
        count += 1
    count = max(count, 1)
    text = f"{prefix}: {total} {noun}(s), first {count} listed: " + "; ".join(cut[:count])
    return bounded_message(text, limit)


__all__ = [
    "CUT_MARKER",
    "MAX_ECHOED_VALUE_CHARS",
    "MAX_ERROR_MESSAGE_BYTES",
    "MAX_FOREIGN_TEXT_CHARS",
    "MAX_LISTED_ITEM_CHARS",
    "bounded_message",
    "encoded_size",
    "listed",
    "printable",
    "quote_value",
]
