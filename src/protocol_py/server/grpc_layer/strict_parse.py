"""The strict (upb) well-formedness check of a large request body without one long hold of
the interpreter (one request never stalls the others).

``decode_request`` parses every request body with protobuf's upb class first, to refuse one
that is not well-formed protobuf (:func:`protocol_py.server.grpc_layer.limits.decode_request`).
upb's
parse is one C call that holds the interpreter throughout: for a 60 MiB text block it copied
and UTF-8-checked the text in about 50 ms, during which the event loop (every other stream)
waited (``benchmarks/loop_stall.py --trace-stalls``).

:func:`strict_parse` gives the same answer for a body of at least
:data:`STRICT_ELIDE_MIN_BYTES` while upb only sees a small body: the body's fields are walked
(in Python, interruptible) and every string or bytes field of at least
:data:`STRICT_ELIDE_FIELD_BYTES` is replaced by an empty value (its enclosing messages'
lengths rewritten); each elided string's UTF-8 is checked separately,
:data:`UTF8_CHECK_CHUNK_BYTES` at a time (Python's strict UTF-8 decoder, which refuses what
upb refuses: overlong forms, surrogates, truncated sequences); upb then parses the small body.
Every field keeps its number, wire type and nesting, so wire types, unknown fields and nesting
depth are checked by upb exactly as before. Anything unusual (a framing error, a group, an
invalid string, a re-written field whose tag or length is not in its shortest varint form
(upb refuses one over 5 bytes, which the canonical re-write would hide), upb refusing the
small body, nesting deeper than :data:`~protocol_py.server.grpc_layer.limits.PROTOBUF_MAX_DEPTH`)
makes
upb parse the whole body as before, so a malformed request gets the very same error.
"""

from __future__ import annotations

import codecs
from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]

__all__ = [
    "STRICT_ELIDE_FIELD_BYTES",
    "STRICT_ELIDE_MIN_BYTES",
    "UTF8_CHECK_CHUNK_BYTES",
    "strict_parse",
]

STRICT_ELIDE_MIN_BYTES: Final = 8 * 1024 * 1024
"""Request bodies of at least this many bytes (8 MiB) are checked with their large string and
bytes fields elided; smaller ones are parsed whole by upb (at most about 10 ms)."""

STRICT_ELIDE_FIELD_BYTES: Final = 256 * 1024
"""Length-delimited fields of at least this many bytes (256 KiB) are elided (strings and
bytes) or walked into (messages); smaller ones are handed to upb as they are."""

UTF8_CHECK_CHUNK_BYTES: Final = 1024 * 1024
"""Bytes of an elided string checked for valid UTF-8 per C call (1 MiB, well under a
millisecond)."""

_MAX_NESTING: Final = 100
"""Message levels walked before the whole body goes to upb (protobuf's recursion limit,
:data:`~protocol_py.server.grpc_layer.limits.PROTOBUF_MAX_DEPTH`, which upb then enforces)."""

_STRING: Final = FieldDescriptor.TYPE_STRING
_BYTES: Final = FieldDescriptor.TYPE_BYTES
_MESSAGE: Final = FieldDescriptor.TYPE_MESSAGE


class _WholeBodyError(Exception):
    """Something the walk does not handle: upb parses the whole body instead."""


_FIELDS: dict[Any, dict[int, tuple[int, Any]]] = {}


def _fields(descriptor: Any) -> dict[int, tuple[int, Any]]:
    """Field number -> (type, message descriptor or None) of ``descriptor`` (cached)."""
    known = _FIELDS.get(descriptor)
    if known is None:
        known = _FIELDS[descriptor] = {
            f.number: (f.type, f.message_type if f.type == _MESSAGE else None)
            for f in descriptor.fields
        }
    return known


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 64:
            break
    raise _WholeBodyError


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _canonical(data: bytes, start: int, stop: int, value: int) -> bool:
    """True when the varint ``data[start:stop]`` (of ``value``) is in its shortest form."""
    return stop - start == len(_varint_bytes(value))


def _elide(
    descriptor: Any,
    data: bytes,
    span: tuple[int, int],
    out: list[Any],
    *,
    strings: list[tuple[int, int]],
    depth: int = 0,
) -> bool:
    """Append to ``out`` the pieces of the message ``data[span]`` with its large strings and
    bytes emptied (their spans added to ``strings`` when strings); True when anything was
    elided. Raises :class:`_WholeBodyError` for anything it does not handle."""
    if depth > _MAX_NESTING:
        raise _WholeBodyError
    view = memoryview(data)
    known = _fields(descriptor)
    pos, end = span
    run = pos  # start of the bytes not yet appended
    elided = False
    while pos < end:
        start = pos
        tag, pos = _varint(data, pos, end)
        kind = tag & 7
        if kind == 0:
            _, pos = _varint(data, pos, end)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            head = pos  # the length's first byte
            size, body = _varint(data, pos, end)
            pos = body + size
            field = known.get(tag >> 3) if size >= STRICT_ELIDE_FIELD_BYTES else None
            if field is not None and pos <= end and field[0] in (_STRING, _BYTES, _MESSAGE):
                if not _canonical(data, start, head, tag) or not _canonical(data, head, body, size):
                    # re-written below in canonical form, which would hide an over-long tag or
                    # length (upb refuses one over 5 bytes) from upb: it parses the whole body
                    raise _WholeBodyError
                if field[1] is not None:  # a message: its large fields elided, length redone
                    inner: list[Any] = []
                    if not _elide(
                        field[1], data, (body, pos), inner, strings=strings, depth=depth + 1
                    ):
                        continue  # nothing inside is large: kept as it is
                    sub = b"".join(inner)
                    out.extend((view[run:start], _varint_bytes(tag), _varint_bytes(len(sub)), sub))
                else:
                    if field[0] == _STRING:
                        strings.append((body, pos))
                    out.extend((view[run:start], _varint_bytes(tag), b"\0"))
                run = pos
                elided = True
        else:
            raise _WholeBodyError  # groups (3, 4) and invalid wire types
        if pos > end:
            raise _WholeBodyError
    out.append(view[run:end])
    return elided


def _valid_utf8(data: memoryview, span: tuple[int, int]) -> bool:
    """True when ``data[span]`` is valid UTF-8, checked :data:`UTF8_CHECK_CHUNK_BYTES` at a
    time (a sequence split between two chunks is carried over by the incremental decoder)."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    start, end = span
    try:
        for at in range(start, end, UTF8_CHECK_CHUNK_BYTES):
            stop = min(at + UTF8_CHECK_CHUNK_BYTES, end)
            decoder.decode(data[at:stop], final=stop == end)
    except UnicodeDecodeError:
        return False
    return True


def strict_parse(strict: Any, data: bytes) -> Any:
    """``strict.FromString(data)`` (``strict``: protobuf's upb message class), with the
    same outcome, but for a body of at least :data:`STRICT_ELIDE_MIN_BYTES` upb parses it with
    its large string and bytes fields emptied (see the module); the returned message has
    those fields empty.

    Raises:
        google.protobuf.message.DecodeError: exactly as ``strict.FromString(data)`` does.
    """
    if len(data) < STRICT_ELIDE_MIN_BYTES:
        return strict.FromString(data)
    view = memoryview(data)
    out: list[Any] = []
    strings: list[tuple[int, int]] = []
    try:
        elided = _elide(strict.DESCRIPTOR, data, (0, len(data)), out, strings=strings)
    except _WholeBodyError:
        elided = False
    if not elided or not all(_valid_utf8(view, span) for span in strings):
        return strict.FromString(data)
    small = b"".join(out)
    del out
    try:
        return strict.FromString(small)
    except Exception:  # upb refuses: its error for the whole body, as before
        return strict.FromString(data)
