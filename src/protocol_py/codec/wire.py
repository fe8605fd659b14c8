"""Fast protobuf wire codec for the generated betterproto2 classes.

betterproto2's own codec is generic pure Python that copies every nested field several times;
it decodes a long conversation about 300x slower than google's upb. This module encodes and
decodes the *same* generated classes (plugin authors and kernels keep them) with per-class
functions generated once from betterproto2's own metadata (:mod:`protocol_py.codec.wire_gen`),
reading the buffer in place: each decoder reads fields into locals, decodes sub-messages and
Struct map entries inline (:data:`protocol_py.codec.wire_gen.INLINE_LEVELS` levels) and sets the
instance's attributes once, in the order betterproto2's constructor sets them; each encoder
appends every part of a message and its sub-messages to one list, joined once.

* :func:`decode` returns exactly what ``cls.parse(data)`` returns, field for field, including
  ``_unknown_fields`` (the raw bytes of fields the class does not know, in wire order), a
  duplicated singular scalar field (the last one wins), unknown enum numbers and map entries
  without a value; except where betterproto2 0.10 departs from protobuf's parsing rules: a
  singular message field sent more than once is merged and a oneof keeps its last member
  (:mod:`protocol_py.codec.field_merge`; betterproto2 keeps the last occurrence whole, and
  every member sent), as upb and every conforming runtime read them. It returns what
  :func:`parse_merged` returns. Map entries keep their wire order, so a ``google.protobuf.Struct``
  renders its JSON keys in the order the kernel sent them (upb's maps do not keep that order,
  which is why upb does not carry the request here).
* :func:`encode` returns exactly ``bytes(message)``, except for a negative Duration, which
  betterproto2 0.10 writes with its nanoseconds of the wrong sign (off by up to a second):
  it is written as protobuf defines it (:mod:`protocol_py.codec.durations`).

Anything the tables do not cover (a field number seen with another wire type, groups, a
truncated field, a value of an unexpected Python type when encoding, nesting deeper than
:data:`MAX_FAST_DEPTH`) falls back to betterproto2 for the whole message, so the result never
differs from :func:`parse_merged`'s, errors included. Well-formedness is not this module's
job: the server checks each request body with upb first
(:func:`protocol_py.server.grpc_layer.limits.decode_request`).

:func:`decode_checked` also says whether the decoded message is *clean*: every enum number a
known member and every map entry complete, so :mod:`protocol_py.rules.request` may skip its
field-by-field Python type check (see :func:`mark_decoded`).
"""

from __future__ import annotations

import hashlib
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

import betterproto2
from grpclib.encoding.proto import ProtoCodec

from protocol_py.codec import field_merge, metadata
from protocol_py.codec.wire_gen import (
    GENERATOR,
    MAX_DECODED_OBJECTS,
    MAX_FAST_DEPTH,
    DecodeBudgetError,
    FallbackError,
    NeedsMergeError,
    State,
    encode_any,
    encode_into,
    flat_parts,
    length_prefix,
    varint,
)

__all__ = [
    "MAX_DECODED_OBJECTS",
    "MAX_FAST_DEPTH",
    "MAX_KEPT_IMAGE_BYTES",
    "DecodeBudgetError",
    "FallbackError",
    "MessageImages",
    "WireCodec",
    "content_key",
    "decode",
    "decode_checked",
    "decode_report",
    "encode",
    "encoded_size",
    "field_images",
    "keep_images",
    "mark_decoded",
    "parse_merged",
    "peek_images",
    "sha256_of",
    "take_images",
    "take_wire_clean",
    "wire_size",
    "without_field",
]

M = TypeVar("M", bound=betterproto2.Message)

# -- decoding -----------------------------------------------------------------------------------


def decode_checked(cls: type[M], data: bytes) -> tuple[M, bool]:
    """Decode ``data`` as ``cls``; equal to :func:`parse_merged` in every field.

    Args:
        cls: A generated message class.
        data: The serialized message (``bytes``; a ``bytearray`` or ``memoryview`` is copied).

    Returns:
        ``(message, clean)``: ``clean`` is True when every enum field holds a known member,
        every map entry carried its message value and nesting stayed within
        :data:`MAX_FAST_DEPTH` levels, i.e. when a Python-type walk of the message would find
        nothing to report or fix.

    Raises:
        Whatever ``cls.parse(data)`` raises for input the fast path hands back to it.
    """
    message, clean, _ = decode_report(cls, data)
    return message, clean


def decode_report(
    cls: type[M], data: bytes, *, fallback: bool = True, state: State | None = None
) -> tuple[M, bool, bool]:
    """:func:`decode_checked`, also saying whether every field was one ``cls`` knows.

    Args:
        cls: A generated message class.
        data: The serialized message.
        fallback: When False, input the fast path does not cover raises
            :class:`FallbackError` instead of going to betterproto2 (whose parse has no
            budget: the server decides first,
            :func:`protocol_py.server.grpc_layer.limits.decode_request`).
        state: The decode's :class:`~protocol_py.codec.wire_gen.State` (default: a fresh one
            whose budget is :data:`MAX_DECODED_OBJECTS`); pass one to set a smaller budget
            and to read, afterwards, how many elements were created (``limit - left``).

    Returns:
        ``(message, clean, exact)``: ``exact`` is True when the fast path decoded the whole
        message and met no field number its class does not know, i.e. every field of the
        wire data is a known field with its declared wire type (a known field with another
        wire type makes the fast path hand back to betterproto2: not exact). The server then
        needs no walk of upb's unknown fields
        (:func:`protocol_py.server.grpc_layer.limits.decode_request`).

    Raises:
        DecodeBudgetError: the message holds more than :data:`MAX_DECODED_OBJECTS` (or
            ``state.limit``) repeated elements and map entries.
        FallbackError: ``fallback`` is False and the fast path does not cover ``data``
            (UnicodeDecodeError for invalid UTF-8 in a string field).
        Whatever ``cls.parse(data)`` raises for input the fast path hands back to it.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    st = State() if state is None else state
    left = st.left
    found = _decode_fast(cls, data, st, fallback)
    if found is not None:
        return found
    # a singular message field or a oneof sent more than once: decoded again after the merge
    # protobuf applies (its bytes rewritten once, field_merge), the partial decode freed first
    data = field_merge.merged(cls, data)
    st.left, st.clean, st.unknown = left, True, False
    found = _decode_fast(cls, data, st, fallback, merged=True)
    assert found is not None  # merged: NeedsMergeError is a fallback there
    return found


def _decode_fast(
    cls: type[M], data: bytes, st: State, fallback: bool, *, merged: bool = False
) -> tuple[M, bool, bool] | None:
    """:func:`decode_report` of ``data`` by the generated decoder; None when it met a
    singular message field or oneof more than once and ``data`` is not ``merged`` yet."""
    try:
        message: M = GENERATOR.decoder(cls)(data, 0, len(data), st, 1)
    except DecodeBudgetError:
        pass  # raised again below: this one's traceback holds the partial message
    except (FallbackError, UnicodeDecodeError, IndexError, struct.error, RecursionError) as exc:
        if isinstance(exc, NeedsMergeError) and not merged:
            return None
        if not fallback:
            if isinstance(exc, UnicodeDecodeError):
                raise
            raise FallbackError from None
        return cls.parse(data if merged else field_merge.merged(cls, data)), False, False
    else:
        return message, st.clean, not st.unknown
    raise DecodeBudgetError(st.limit)


def parse_merged(cls: type[M], data: bytes) -> M:
    """betterproto2's parse of ``data`` after protobuf's merge of a singular message field
    or oneof sent more than once (:func:`protocol_py.codec.field_merge.merged`), which
    betterproto2 0.10's parser does not apply: the parse the generated decoder hands input it
    does not cover to.

    Raises:
        protocol_py.codec.field_merge.MergeBudgetError: ``data`` holds more fields than the
            merge reads (:data:`~protocol_py.codec.field_merge.MAX_MERGE_FIELDS`).
        Whatever ``cls.parse`` raises.
    """
    return cls.parse(field_merge.merged(cls, data))


def decode(cls: type[M], data: bytes) -> M:
    """Decode ``data`` as ``cls``; equal to :func:`parse_merged` (see :func:`decode_checked`)."""
    return decode_checked(cls, data)[0]


# -- "clean" marks for validation ----------------------------------------------------------------

_marks: dict[int, tuple[weakref.ref[betterproto2.Message], int, bool]] = {}
_marks_lock = threading.RLock()  # re-entered by a weakref callback run by GC


def _forget(table: dict[int, Any], key: int) -> Callable[[Any], None]:
    """The weakref callback removing ``table[key]`` when its message is gone."""

    def drop(ref: Any) -> None:
        with _marks_lock:
            entry = table.get(key)
            if entry is not None and entry[0] is ref:
                del table[key]

    return drop


def mark_decoded(message: betterproto2.Message, size: int, clean: bool) -> None:
    """Record that ``message`` was just decoded from ``size`` bytes of wire data, and whether
    it was clean (see :func:`decode_checked`); the mark goes with the message (weakly held).

    Only the server marks requests, right after decoding them and before anything else can
    change them. :func:`wire_size` reads the size (for :func:`protocol_py.server.offload.run_cpu`);
    :mod:`protocol_py.rules.request` skips its Python-type walk of a clean message once
    (:func:`take_wire_clean`).
    """
    key = id(message)
    with _marks_lock:
        _marks[key] = (weakref.ref(message, _forget(_marks, key)), size, clean)


def _mark(message: betterproto2.Message) -> tuple[Any, int, bool] | None:
    mark = _marks.get(id(message))
    return mark if mark is not None and mark[0]() is message else None


def wire_size(message: betterproto2.Message) -> int:
    """Bytes ``message`` was decoded from (:func:`mark_decoded`), or 0 when not marked."""
    with _marks_lock:
        mark = _mark(message)
    return mark[1] if mark is not None else 0


def take_wire_clean(message: betterproto2.Message) -> bool:
    """True (once) if ``message`` was marked clean by :func:`mark_decoded`."""
    with _marks_lock:
        mark = _mark(message)
        if mark is None or not mark[2]:
            return False
        _marks[id(message)] = (mark[0], mark[1], False)
    return True


# -- wire images of repeated sub-messages ---------------------------------------------------------

MAX_KEPT_IMAGE_BYTES: Final = 1024 * 1024
"""Largest wire image of a repeated sub-message that :func:`field_images` copies out, bytes
(1 MiB): a larger element gets None instead (no copy of it, no hash of it, nothing kept
alive by it), so whoever keys a cache by images treats that element as uncached (a copy or
hash of an image of tens of megabytes holds the interpreter for tens of milliseconds)."""

_images: dict[int, tuple[weakref.ref[betterproto2.Message], str, list[bytes | None]]] = {}


def field_images(
    data: bytes,
    number: int,
    max_bytes: int | None = None,
    rest: list[bytes] | None = None,
    start: int = 0,
) -> list[bytes | None] | None:
    """The raw bytes of every top-level length-delimited field ``number`` of ``data``, in wire
    order (for a repeated message field: each element's own serialization); None when
    ``data`` does not scan as protobuf (never raised). An element larger than ``max_bytes``
    bytes (when given, e.g. :data:`MAX_KEPT_IMAGE_BYTES`) is None: not copied.

    ``rest``: when given, an empty list that receives, in the same scan, the pieces of
    ``data`` outside every occurrence of field ``number`` (tags and lengths included), in
    order: joined, they are :func:`without_field` of ``data`` (one scan for both); left
    unspecified when None is returned.

    ``start``: scan ``data[start:]`` only (a field boundary of ``data``), as if it were the
    whole message; ``rest`` then receives the pieces of that part."""
    out: list[bytes | None] = []
    pos, end = start, len(data)
    limit = end if max_bytes is None else max_bytes
    kept = start  # start of the bytes of ``data`` not yet given to ``rest``
    try:
        while pos < end:
            at = pos
            tag = data[pos]  # one byte for fields 1-15, the usual case
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = varint(data, pos)
            kind = tag & 7
            if kind == 0:
                _, pos = varint(data, pos)
            elif kind == 1:
                pos += 8
            elif kind == 5:
                pos += 4
            elif kind == 2:
                size = data[pos]
                if size < 0x80:  # one byte: most fields
                    pos += 1
                else:
                    size, pos = length_prefix(data, pos)
                if tag >> 3 == number:
                    out.append(data[pos : pos + size] if size <= limit else None)
                    if rest is not None:
                        if at > kept:
                            rest.append(data[kept:at])
                        kept = pos + size
                pos += size
            else:
                return None
            if tag >> 3 == number and kind != 2 and rest is not None:
                if at > kept:
                    rest.append(data[kept:at])
                kept = pos
    except (FallbackError, IndexError):
        return None
    if pos != end:
        return None
    if rest is not None and kept < end:
        rest.append(data[kept:] if kept else data)
    return out


def without_field(data: bytes, number: int) -> bytes | None:
    """``data`` (one message's serialization) with every top-level occurrence of field
    ``number`` removed, the other fields' bytes unchanged and in order; ``data`` itself when
    the field is absent; None when ``data`` does not scan as protobuf (never raised).

    Caches keyed by a message's content rather than its identity use it: a Message image
    without its ``id`` (field 3) is the same for the same message under a new id."""
    parts: list[bytes] = []
    pos, end, kept = 0, len(data), 0
    try:
        while pos < end:
            at = pos
            tag = data[pos]  # one byte for fields 1-15, the usual case
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = varint(data, pos)
            kind = tag & 7
            if kind == 2:
                size = data[pos]
                if size < 0x80:  # one byte: most fields
                    pos += 1
                else:
                    size, pos = length_prefix(data, pos)
                pos += size
            elif kind == 0:
                _, pos = varint(data, pos)
            elif kind == 1:
                pos += 8
            elif kind == 5:
                pos += 4
            else:
                return None
            if tag >> 3 == number:
                parts.append(data[kept:at])
                kept = pos
    except (FallbackError, IndexError):
        return None
    if pos != end:
        return None
    if not parts:
        return data
    parts.append(data[kept:])
    return b"".join(parts)


_MESSAGE_ID_FIELD: Final = 3
"""Field number of ``Message.id`` (proto/content/v1/types.proto)."""


def content_key(image: bytes) -> bytes:
    """A key for the content of the ``Message`` whose serialization is ``image``: ``image``
    without the message's ``id`` (:func:`without_field`), every other field's bytes exactly;
    ``image`` itself when it does not scan (still an exact image of the content). Two messages
    have the same key exactly when they differ at most in their id, so a cache of what depends
    on a message's content alone (its vendor translation, its message-local validity) survives
    the same message under a new id (a kernel restarted, a history rewritten by compaction)."""
    stripped = without_field(image, _MESSAGE_ID_FIELD)
    return image if stripped is None else stripped


class MessageImages(list[bytes | None]):
    """The wire images of a request's messages (a list, as :func:`field_images` returns)
    with, when the server's decode computed them, each message's :func:`content_key` in
    ``content_keys`` (the same bytes objects its decode memo looked up, their hash computed
    once), so a translation cache keyed by content needs no scan, copy or hash of its own;
    None when not computed."""

    __slots__ = ("content_keys",)

    def __init__(self, images: list[bytes | None], content_keys: list[bytes] | None = None) -> None:
        super().__init__(images)
        self.content_keys = (
            content_keys if content_keys is not None and len(content_keys) == len(images) else None
        )


def keep_images(
    message: betterproto2.Message,
    field: str,
    data: bytes,
    images: list[bytes | None] | None = None,
) -> None:
    """Keep, for one :func:`take_images`, the wire image of each element of the repeated
    message field ``field`` of ``message``, just decoded exactly (:func:`decode_report`) from
    ``data``; the images go with the message (weakly held). The server keeps those of a
    request's ``messages``: the OpenAI-compatible adapter keys its translation cache with them
    instead of encoding every message again (an image decodes to exactly the message).

    ``images``: :func:`field_images` of ``data`` for that field, when the caller has them
    already (the list is shared, never changed); else they are computed here with
    :data:`MAX_KEPT_IMAGE_BYTES` (a larger element's image is None)."""
    if images is None:
        number = metadata.field_number(type(message), field)
        images = field_images(data, number, MAX_KEPT_IMAGE_BYTES)
    if images is None or len(images) != len(getattr(message, field)):
        return
    key = id(message)
    with _marks_lock:
        _images[key] = (weakref.ref(message, _forget(_images, key)), field, images)


def take_images(message: betterproto2.Message, field: str) -> list[bytes | None] | None:
    """The images :func:`keep_images` kept for ``message``'s ``field`` (then forgotten), or
    None; also None when the field no longer holds as many elements. An element whose image
    was larger than the bound is None (to be treated as uncached)."""
    return _kept_images(message, field, forget=True)


def peek_images(message: betterproto2.Message, field: str) -> list[bytes | None] | None:
    """:func:`take_images` without forgetting them: the next :func:`take_images` (the
    translation's) still gets them."""
    return _kept_images(message, field, forget=False)


def _kept_images(
    message: betterproto2.Message, field: str, *, forget: bool
) -> list[bytes | None] | None:
    with _marks_lock:
        kept = _images.get(id(message))
        if kept is None or kept[0]() is not message or kept[1] != field:
            return None
        if forget:
            del _images[id(message)]
    images = kept[2]
    return images if len(images) == len(getattr(message, field)) else None


# -- encoding -----------------------------------------------------------------------------------


def encode(message: betterproto2.Message) -> bytes:
    """Serialize ``message``; exactly ``bytes(message)`` (betterproto2's encoding), faster,
    except that a negative Duration is written as protobuf defines it
    (:mod:`protocol_py.codec.durations`).

    Raises:
        Whatever ``bytes(message)`` raises for a message holding values of the wrong type.
    """
    try:
        return encode_any(message)
    except (FallbackError, KeyError, AttributeError, TypeError, ValueError, RecursionError):
        return bytes(message)


def _parts(message: betterproto2.Message) -> tuple[list[Any], int] | None:
    """The generated encoder's parts of ``message`` and their byte count, or None where
    :func:`encode` falls back to betterproto2."""
    out: list[Any] = []
    try:
        size = encode_into(message, out)
    except (FallbackError, KeyError, AttributeError, TypeError, ValueError, RecursionError):
        return None
    return out, size


def encoded_size(message: betterproto2.Message) -> int:
    """``len(encode(message))``, bytes, without joining the encoding (a string of
    :data:`~protocol_py.codec.wire_gen.LONG_TEXT_CHARS` characters or more is not copied when ASCII,
    and encoded a piece at a time otherwise).

    Raises:
        Whatever :func:`encode` raises.
    """
    found = _parts(message)
    return found[1] if found is not None else len(encode(message))


def sha256_of(message: betterproto2.Message) -> hashlib._Hash:
    """``hashlib.sha256(encode(message))``, the encoding hashed part by part: no call copies or
    hashes more than a long string's piece (:data:`~protocol_py.codec.wire_gen.LONG_TEXT_CHARS`
    characters) at a time, and hashlib releases the interpreter while hashing a large piece.

    Raises:
        Whatever :func:`encode` raises.
    """
    found = _parts(message)
    if found is None:
        return hashlib.sha256(encode(message))
    digest = hashlib.sha256()
    for piece in flat_parts(found[0]):
        digest.update(piece)
    return digest


class WireCodec(ProtoCodec):
    """grpclib's protobuf codec using :func:`encode` / :func:`decode` for generated classes
    (other message types, e.g. grpclib's own health and reflection messages, go through
    grpclib's codec unchanged)."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        """Serialize ``message`` (a ``message_type``); TypeError for another type."""
        if isinstance(message, betterproto2.Message):
            if not isinstance(message, message_type):
                raise TypeError(f"Message must be of type {message_type!r}, not {type(message)!r}")
            return encode(message)
        data: bytes = super().encode(message, message_type)
        return data

    def decode(self, data: bytes, message_type: Any) -> Any:
        """Parse ``data`` as ``message_type``."""
        if isinstance(message_type, type) and issubclass(message_type, betterproto2.Message):
            return decode(message_type, data)
        return super().decode(data, message_type)
