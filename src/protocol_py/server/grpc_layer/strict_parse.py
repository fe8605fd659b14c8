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

With ``runs`` (the caller's fast decode was exact, so nothing reads the result: see
:func:`strict_parse`), large runs of small repeated message entries (a map of a million
entries, a Struct's fields) are taken out of upb's main parse too: message fields of at least
:data:`STRICT_WALK_FIELD_BYTES` are walked into, and a run of at least
:data:`STRICT_RUN_MIN_BYTES` of consecutive small entries of repeated message fields is cut at
entry boundaries into pieces of about :data:`STRICT_PIECE_BYTES`, each wrapped in its real
chain of enclosing tags (lengths redone) and parsed by upb with the root class, so every entry
is checked at its real nesting depth; between pieces the worker step may be stopped
(:func:`protocol_py.server.offload.checkpoint`). Entries of a repeated field parse
independently of each other, so the pieces together refuse exactly what the whole run would;
any piece refused makes upb parse the whole body, for its very error.
"""

from __future__ import annotations

import codecs
import itertools
from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]

from protocol_py.server.offload import checkpoint

__all__ = [
    "STRICT_ELIDE_FIELD_BYTES",
    "STRICT_ELIDE_MIN_BYTES",
    "STRICT_PIECE_BYTES",
    "STRICT_RUN_MIN_BYTES",
    "STRICT_WALK_FIELD_BYTES",
    "UTF8_CHECK_CHUNK_BYTES",
    "strict_parse",
]

STRICT_ELIDE_MIN_BYTES: Final = 2 * 1024 * 1024
"""Request bodies of at least this many bytes (2 MiB) are checked with their large string and
bytes fields elided (and, with ``runs``, their runs of small entries parsed apart); smaller ones
are parsed whole by upb. upb's cost is per element, not per byte: a 2 MiB body of the densest
shape (one-letter messages or Struct entries, 5-12 bytes each) holds the interpreter for about
30 ms; at 8 MiB such a body held it for 120-250 ms, and 5.25 MiB of one-letter messages for
62-66 ms."""

STRICT_ELIDE_FIELD_BYTES: Final = 256 * 1024
"""Length-delimited fields of at least this many bytes (256 KiB) are elided (strings and
bytes) or walked into (messages); smaller ones are handed to upb as they are."""

STRICT_WALK_FIELD_BYTES: Final = 4 * 1024
"""With ``runs``: message fields of at least this many bytes (4 KiB) are walked into (their
runs of small entries elided); smaller ones are entries of a run, or kept as they are."""

STRICT_RUN_MIN_BYTES: Final = 64 * 1024
"""With ``runs``: consecutive small entries of repeated message fields taking at least this
many bytes (64 KiB) are parsed apart from the main body, in pieces."""

STRICT_PIECE_BYTES: Final = 32 * 1024
"""Entry bytes per separately parsed piece of a run (32 KiB, about 1,500 small Struct map
entries: about 0.14 ms of upb's parse, docs/performance.md)."""

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


_FIELDS: dict[Any, dict[int, tuple[int, Any, bool]]] = {}


def _fields(descriptor: Any) -> dict[int, tuple[int, Any, bool]]:
    """Field number -> (type, message descriptor or None, repeated) of ``descriptor``
    (cached)."""
    known = _FIELDS.get(descriptor)
    if known is None:
        known = _FIELDS[descriptor] = {
            f.number: (f.type, f.message_type if f.type == _MESSAGE else None, f.is_repeated)
            for f in descriptor.fields
        }
    return known


class _Runs:
    """The pieces of elided runs: ``(enclosing tags, outermost first; start; end)``."""

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list[tuple[tuple[int, ...], int, int]] = []


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
    runs: list[tuple[tuple[int, ...], int, int]] | None = None,
    tags: tuple[int, ...] = (),
    depth: int = 0,
) -> bool:
    """Append to ``out`` the pieces of the message ``data[span]`` (reached through the
    enclosing field ``tags``, outermost first) with its large strings and bytes emptied (their
    spans added to ``strings`` when strings) and, when ``runs`` is given, its large runs of
    small repeated message entries left out (their pieces added to ``runs`` as ``(tags, start,
    end)``); True when anything was elided. Raises :class:`_WholeBodyError` for anything it
    does not handle."""
    if depth > _MAX_NESTING:
        raise _WholeBodyError
    view = memoryview(data)
    known = _fields(descriptor)
    walk = STRICT_WALK_FIELD_BYTES if runs is not None else STRICT_ELIDE_FIELD_BYTES
    pos, end = span
    done = pos  # start of the bytes not yet appended
    elided = False
    run = piece = -1  # start of the current run of small entries, of its current piece
    cuts: list[int] = []  # piece boundaries inside the current run
    while pos < end:
        start = pos
        tag, pos = _varint(data, pos, end)
        kind = tag & 7
        entry = False  # a small entry of a repeated message field (with runs)
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
            field = known.get(tag >> 3)
            if field is not None and pos <= end:
                message = field[1]
                entry = runs is not None and message is not None and field[2]
                threshold = walk if message is not None else STRICT_ELIDE_FIELD_BYTES
                if size >= threshold and field[0] in (_STRING, _BYTES, _MESSAGE):
                    if not _canonical(data, start, head, tag) or not _canonical(
                        data, head, body, size
                    ):
                        # re-written below in canonical form, which would hide an over-long
                        # tag or length (upb refuses one over 5 bytes): upb parses it whole
                        raise _WholeBodyError
                    if message is not None:  # its large fields elided, length redone
                        inner: list[Any] = []
                        if not _elide(
                            message,
                            data,
                            (body, pos),
                            inner,
                            strings=strings,
                            runs=runs,
                            tags=(*tags, tag),
                            depth=depth + 1,
                        ):
                            inner = []  # nothing inside is large: kept as it is
                        else:
                            sub = b"".join(inner)
                            inner = [_varint_bytes(tag), _varint_bytes(len(sub)), sub]
                    else:
                        if field[0] == _STRING:
                            strings.append((body, pos))
                        inner = [_varint_bytes(tag), b"\0"]
                    if inner:  # this field is re-written: a run before it ends here
                        if run >= 0:
                            done = _close_run(
                                view,
                                runs=runs,
                                tags=tags,
                                out=out,
                                done=done,
                                bounds=(run, *cuts, start),
                            )
                            run = -1
                        out.append(view[done:start])
                        out.extend(inner)
                        done = pos
                        elided = True
                        entry = False
        else:
            raise _WholeBodyError  # groups (3, 4) and invalid wire types
        if pos > end:
            raise _WholeBodyError
        if entry:
            if run < 0:
                run = piece = start
                cuts = []
            elif pos - piece > STRICT_PIECE_BYTES:  # this entry starts the next piece
                cuts.append(start)
                piece = start
        elif run >= 0:
            done = _close_run(
                view, runs=runs, tags=tags, out=out, done=done, bounds=(run, *cuts, start)
            )
            run = -1
    if run >= 0:
        done = _close_run(view, runs=runs, tags=tags, out=out, done=done, bounds=(run, *cuts, end))
    out.append(view[done:end])
    return elided or done != span[0]


def _close_run(
    view: memoryview,
    *,
    runs: list[tuple[tuple[int, ...], int, int]] | None,
    tags: tuple[int, ...],
    out: list[Any],
    done: int,
    bounds: tuple[int, ...],
) -> int:
    """End the run of small entries ``view[bounds[0]:bounds[-1]]`` (pieces cut at
    ``bounds``): when it holds at least :data:`STRICT_RUN_MIN_BYTES`, its pieces go to ``runs``
    and the body before it to ``out``. Returns the start of the bytes not yet appended."""
    start, stop = bounds[0], bounds[-1]
    if runs is None or stop - start < STRICT_RUN_MIN_BYTES:
        return done
    runs.extend((tags, a, b) for a, b in itertools.pairwise(bounds))
    out.append(view[done:start])
    return stop


def _wrapped(view: memoryview, tags: tuple[int, ...], start: int, stop: int) -> bytes:
    """The entries ``view[start:stop]`` inside their chain of enclosing fields ``tags``."""
    piece = bytes(view[start:stop])
    for tag in reversed(tags):
        piece = b"".join((_varint_bytes(tag), _varint_bytes(len(piece)), piece))
    return piece


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


def strict_parse(strict: Any, data: bytes, *, runs: bool = False) -> Any:
    """``strict.FromString(data)`` (``strict``: protobuf's upb message class), with the
    same outcome, but for a body of at least :data:`STRICT_ELIDE_MIN_BYTES` upb parses it with
    its large string and bytes fields emptied (see the module); the returned message has
    those fields empty.

    ``runs``: large runs of small repeated message entries are parsed apart, in pieces, and
    are missing from the returned message (so is any wrong wire type inside them): only for a
    caller that reads nothing from the result (``decode_request`` after an exact fast decode,
    which has no wrong wire type to look for).

    Raises:
        google.protobuf.message.DecodeError: exactly as ``strict.FromString(data)`` does.
        protocol_py.server.offload.JobCancelled: between pieces, when the worker step was
            cancelled.
    """
    if len(data) < STRICT_ELIDE_MIN_BYTES:
        return strict.FromString(data)
    view = memoryview(data)
    out: list[Any] = []
    strings: list[tuple[int, int]] = []
    pieces: list[tuple[tuple[int, ...], int, int]] | None = [] if runs else None
    try:
        elided = _elide(strict.DESCRIPTOR, data, (0, len(data)), out, strings=strings, runs=pieces)
    except _WholeBodyError:
        elided = False
    if not elided or not all(_valid_utf8(view, span) for span in strings):
        return strict.FromString(data)
    small = b"".join(out)
    del out
    try:
        parsed = strict.FromString(small)
    except Exception:  # upb refuses: its error for the whole body, as before
        return strict.FromString(data)
    del small
    for tags, start, stop in pieces or ():
        checkpoint()  # a cancelled worker step stops between pieces
        try:
            strict.FromString(_wrapped(view, tags, start, stop))
        except Exception:  # upb refuses a piece: its error for the whole body
            return strict.FromString(data)
    return parsed
