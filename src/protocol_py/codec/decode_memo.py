"""Decode a request's conversation reusing the messages decoded on earlier turns.

A kernel resends the whole conversation every turn, so nearly every message of a request was
decoded on the turn before, often under another id (a kernel restarted, a history rewritten
by compaction). :func:`decode_messages_memo` decodes a request whose repeated ``Message``
field (``messages``) is looked up message by message in a :class:`DecodeMemo` keyed by each
message's wire image without its ``id`` (:func:`protocol_py.codec.wire.content_key`, compared
byte for byte: no hash stands in for the content). A hit costs a scan of the image, a lookup
and a shallow copy carrying the new id; only the messages never seen are decoded. Before
that, the memo's :class:`ListIndex` matches the messages by position against the last list
of the same conversation (the same first message), two byte comparisons per message, under
the same ids or new ones of the same length: a resent conversation is neither scanned nor
hashed message by message.

The result equals :func:`protocol_py.codec.wire.decode_report` of the whole body, field for
field (tests compare both, and against upb): a hit is stored only from a message that decoded
clean and exact (every field known, every enum a known member, every map entry complete), its
repeated elements and map entries are counted against the request's
:data:`~protocol_py.codec.wire.MAX_DECODED_OBJECTS` budget as if decoded again, and any body
this path does not cover (a message over :data:`~protocol_py.codec.wire.MAX_KEPT_IMAGE_BYTES`,
a scan that fails, any decoding error) is decoded whole by ``decode_report`` instead.

Sharing (docs/decisions.md#d37): a hit's ``Message`` is a new object with its own ``content``
list, but the content blocks in that list are the objects decoded on the first turn, shared by
every request that carries the same message content. The request a provider receives is read
only: a provider builds what it sends from it and never changes it in place (the built-in
providers never do; the server's own steps copy before they change a request).

Bounds: :data:`MAX_ENTRIES` messages and :data:`MAX_BYTES` of accounted bytes (each entry
counts twice its key's bytes, the key and the decoded strings, plus :data:`ENTRY_BYTES`, plus
:data:`OBJECT_BYTES` per repeated element and map entry it holds), the least recently used
dropped first; a message whose image is larger than
:data:`~protocol_py.codec.wire.MAX_KEPT_IMAGE_BYTES` is never stored. The memo's
:class:`SplitIndex` (the content key and id span of each whole image seen, so a message resent
under the same id is not scanned again): :data:`MAX_SPLIT_ENTRIES` images and
:data:`MAX_SPLIT_BYTES` accounted bytes, likewise.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import is_, itemgetter
from typing import Final, TypeVar, cast

import betterproto2

from protocol_py.codec import metadata, wire
from protocol_py.codec.prefixes import BoundedLRU
from protocol_py.codec.wire_gen import (
    GENERATOR,
    FallbackError,
    State,
    length_prefix,
    over_budget,
    varint,
    varint_bytes,
)

__all__ = [
    "ENTRY_BYTES",
    "LIST_ENTRY_BYTES",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "MAX_LISTS",
    "MAX_LIST_BYTES",
    "MAX_SPLIT_BYTES",
    "MAX_SPLIT_ENTRIES",
    "OBJECT_BYTES",
    "SPLIT_ENTRY_BYTES",
    "DecodeMemo",
    "ListIndex",
    "ListMatch",
    "SplitIndex",
    "decode_messages_memo",
    "split_message_id",
]

M = TypeVar("M", bound=betterproto2.Message)

MAX_ENTRIES: Final = 16_384
"""Most decoded messages one memo holds."""

MAX_BYTES: Final = 64 * 1024 * 1024
"""Most accounted bytes one memo holds (64 MiB; see :data:`ENTRY_BYTES` and
:data:`OBJECT_BYTES`)."""

ENTRY_BYTES: Final = 640
"""Bytes counted per memo entry on top of twice its key's bytes (the key, and the decoded
strings that repeat it): the decoded ``Message`` with its ``__dict__``, its content list and
the memo's own bookkeeping (tracemalloc measures about 600 bytes for a message without
content blocks on CPython 3.11)."""

OBJECT_BYTES: Final = 384
"""Bytes counted per repeated element and map entry the entry's decode created (a content
block with its one set member, a Struct entry with its Value; tracemalloc measures 280-370
bytes each on CPython 3.11)."""

MAX_SPLIT_ENTRIES: Final = MAX_ENTRIES
"""Most images whose split (content key, id span) a :class:`SplitIndex` keeps."""

MAX_SPLIT_BYTES: Final = 64 * 1024 * 1024
"""Most accounted bytes a :class:`SplitIndex` holds (64 MiB; see :data:`SPLIT_ENTRY_BYTES`)."""

SPLIT_ENTRY_BYTES: Final = 200
"""Bytes counted per :class:`SplitIndex` entry on top of twice its image's bytes (the image
and its content key): the entry's tuple and the index's bookkeeping."""

MAX_LISTS: Final = 256
"""Most conversations whose last message list a :class:`ListIndex` keeps."""

MAX_LIST_BYTES: Final = 64 * 1024 * 1024
"""Most accounted bytes a :class:`ListIndex` holds (64 MiB; see :data:`LIST_ENTRY_BYTES`)."""

LIST_ENTRY_BYTES: Final = 120
"""Bytes counted per message of a kept list on top of what its memo and index entries count:
its places in the list's three tuples and its split tuple."""

_ID_FIELD: Final = 3
"""Field number of ``Message.id`` (proto/content/v1/types.proto)."""


def split_message_id(image: bytes) -> tuple[bytes, int, int] | None:
    """``(content key, id start, id end)`` of the ``Message`` serialization ``image``: the key
    is ``image`` without its ``id`` field (as :func:`protocol_py.codec.wire.content_key`), and
    ``image[start:end]`` is the UTF-8 of the last ``id`` field's value (``-1, -1`` when there
    is none: the id is the empty string). None when ``image`` does not scan (never raised)."""
    parts: list[bytes] = []
    pos, end, kept = 0, len(image), 0
    start = stop = -1
    try:
        while pos < end:
            at = pos
            tag = image[pos]
            if tag < 0x80:
                pos += 1
            else:  # a field from 16 on; an id under a multi-byte tag only the decoder judges
                tag, pos = varint(image, pos)
                if tag >> 3 == _ID_FIELD:
                    return None
            kind = tag & 7
            if kind == 2:
                size = image[pos]
                if size < 0x80:  # one byte: most fields
                    pos += 1
                else:
                    size, pos = length_prefix(image, pos)
                if tag == (_ID_FIELD << 3 | 2):
                    start, stop = pos, pos + size
                    parts.append(image[kept:at])
                    kept = pos + size
                pos += size
            elif kind == 0:
                if image[pos] < 0x80:  # one byte: a role, a small number
                    pos += 1
                else:
                    _, pos = varint(image, pos)
            elif kind == 1:
                pos += 8
            elif kind == 5:
                pos += 4
            else:
                return None
            if tag >> 3 == _ID_FIELD and kind != 2:
                return None  # an id with another wire type: not for this path
    except (FallbackError, IndexError):
        return None
    if pos != end:
        return None
    if not parts:
        return image, -1, -1
    parts.append(image[kept:])
    return b"".join(parts), start, stop


_Split = tuple[bytes, int, int]
"""What :func:`split_message_id` finds in an image: ``(content key, id start, id end)``."""

_content_key_of: Final = itemgetter(0)
"""The content key of a :data:`_Split`."""


class SplitIndex(BoundedLRU[bytes, _Split]):
    """:func:`split_message_id` of the images seen before, keyed by the whole image (compared
    byte for byte by the dictionary: the split is a function of those bytes alone), so a
    message resent under the same id is not scanned again and its content key is the same
    ``bytes`` object turn after turn (its hash computed once, for every cache keyed by it);
    at most ``max_entries`` images and ``max_bytes`` accounted bytes
    (:data:`MAX_SPLIT_ENTRIES`, :data:`MAX_SPLIT_BYTES`; each entry counts twice its image,
    the image and its key, plus :data:`SPLIT_ENTRY_BYTES`), the least recently used dropped
    first. Safe to use from several threads at once."""

    def __init__(
        self, max_entries: int = MAX_SPLIT_ENTRIES, max_bytes: int = MAX_SPLIT_BYTES
    ) -> None:
        super().__init__(max_entries, max_bytes)

    def splits(self, images: Sequence[bytes]) -> list[_Split | None]:
        """:func:`split_message_id` of each of ``images``, in order: those seen before from
        the index (one taking of the lock), the others scanned and kept (another)."""
        out = self._get_many(images)
        new: list[tuple[bytes, _Split]] = []
        for i, image in enumerate(images):
            if out[i] is None:
                split = out[i] = split_message_id(image)
                if split is not None:
                    new.append((image, split))
        for image, split in new:
            self._put(image, split, 2 * len(image) + SPLIT_ENTRY_BYTES)
        return out


_Found = tuple[betterproto2.Message, int]
"""A :class:`DecodeMemo` entry: a decoded message and the count of repeated elements and map
entries its decode created."""

_Lead = tuple[bytes, int]
"""``(body, end)``: a request body whose first ``end`` bytes are exactly the fields of a kept
list's messages, each under its shortest tag and length, in order (:meth:`ListIndex.leading`)."""

_List = tuple[tuple[bytes, ...], tuple[_Split, ...], tuple[_Found, ...], _Lead | None]
"""What a :class:`ListIndex` keeps of a conversation: each message's image, its split and its
memo entry, in order, and the body they led, when they did."""


class ListIndex(BoundedLRU[bytes, _List]):
    """The last message list of each conversation, keyed by the content key of its first
    message (the same under new ids): each message's image, split (:func:`split_message_id`)
    and decoded message, in order, so the next turn's messages are matched to them by position
    with two byte comparisons each instead of a scan and two hashed lookups.

    :meth:`match` takes message ``k`` of the new list as message ``k`` of the kept one when
    its image is the kept image byte for byte, or when the two have the same length and are
    equal byte for byte outside the kept image's id span (the same message under a new id of
    the same length: the same split, the id read from the new image). The first message that
    is neither ends the match; the rest goes through the memo's :class:`SplitIndex` and
    lookups.

    :meth:`leading` goes one step further for the usual layout, a body that starts with its
    messages (``messages`` is field 1, and encoders write fields in number order): when a kept
    list's messages were the first fields of the body they came in, that body is kept too, and
    a new body that starts with the same bytes (one comparison) starts with the same messages,
    whose kept images then stand for its own without a scan.

    Bounds: at most ``max_entries`` conversations and ``max_bytes`` accounted bytes
    (:data:`MAX_LISTS`, :data:`MAX_LIST_BYTES`), the least recently used dropped first. Each
    message of a list counts what its memo and index entries count (twice its image, the image
    and its content key; :data:`ENTRY_BYTES` and :data:`OBJECT_BYTES` per element of the
    decoded message) plus :data:`LIST_ENTRY_BYTES`, as if nothing were shared with them: a list
    may keep its messages alive after the memo dropped them; a kept body counts its length (at
    most twice its messages' bytes: a body mostly of other fields keeps a copy of its leading
    bytes instead, and a list that would pass ``max_bytes`` with it is kept without it).
    Safe to use from several threads at once."""

    def __init__(self, max_entries: int = MAX_LISTS, max_bytes: int = MAX_LIST_BYTES) -> None:
        super().__init__(max_entries, max_bytes)

    def match(self, images: Sequence[bytes], first: _Split | None) -> list[tuple[_Split, _Found]]:
        """For the leading run of ``images`` that matches the list kept under the content key
        of ``first`` (the split of ``images[0]``; None: no list), each message's split and
        memo entry (see the class)."""
        if first is None or not images:
            return []
        key = first[0]
        kept = self._get(key)
        self._count(kept is not None)
        if kept is None:
            return []
        old_images, old_splits, old_found, _ = kept
        if len(images) >= len(old_images) and all(map(is_, images, old_images)):
            # the kept images themselves (a body that starts with the kept messages,
            # :meth:`leading`): every kept message matches, compared in one C loop
            return list(zip(old_splits, old_found, strict=True))
        out: list[tuple[_Split, _Found]] = []
        append = out.append
        # the shorter of the two lists bounds the match
        for image, old, split, found in zip(
            images, old_images, old_splits, old_found, strict=False
        ):
            if image is not old and image != old:
                start, end = split[1], split[2]
                if (
                    start < 0
                    or len(image) != len(old)
                    or not image.startswith(memoryview(old)[:start])
                    or not image.endswith(memoryview(old)[end:])
                ):
                    break
            append((split, found))
        return out

    def leading(self, data: bytes, key: bytes) -> tuple[tuple[bytes, ...], int] | None:
        """The images of the list kept under ``key`` and the count of bytes of ``data`` they
        take, when that list came with a body (:meth:`keep`) and ``data`` starts with the same
        bytes as that body's messages: then ``data``'s first fields are exactly those messages,
        whose images are the kept ones byte for byte. None otherwise."""
        with self._lock:
            found = self._entries.get(key)
        if found is None:
            return None
        images, _, _, lead = found[0]
        if lead is None or not data.startswith(memoryview(lead[0])[: lead[1]]):
            return None
        return images, lead[1]

    def keep(
        self,
        key: bytes,
        images: Sequence[bytes],
        splits: Sequence[_Split],
        found: Sequence[_Found | None],
        *,
        run: int = 0,
        body: tuple[bytes, bytes] | None = None,
    ) -> None:
        """Keep, under ``key``, the leading run of messages whose memo entry is known
        (``found[k]`` not None: a hit, or a message decoded clean and exact), replacing what
        was kept there; nothing when the first is unknown. ``run``: how many leading messages
        :meth:`match` took from the list kept under ``key``; when that was all of them and
        the kept list has no more, the kept list stands (it matches the same messages).
        ``body``: ``(data, tag)``, the body ``images`` were scanned from (in order) and the
        field's tag bytes; kept with the list when its messages are the body's first fields
        (:meth:`leading`)."""
        if run and run == len(images):
            with self._lock:
                kept_now = self._entries.get(key)
                if kept_now is not None and len(kept_now[0][0]) == run:
                    self._entries.move_to_end(key)
                    return
        count = 0
        for entry in found:
            if entry is None:
                break
            count += 1
        if not count:
            return
        size = 2 * sum(map(len, images[:count])) + count * (LIST_ENTRY_BYTES + ENTRY_BYTES)
        size += OBJECT_BYTES * sum(entry[1] for entry in cast("Sequence[_Found]", found[:count]))
        kept = cast("tuple[_Found, ...]", tuple(found[:count]))
        lead: _Lead | None = None
        if body is not None:
            end = _lead_end(body[0], body[1], images[:count])
            if end is not None:
                # the body itself (no copy) unless it is mostly other fields: then its lead
                held = body[0] if len(body[0]) <= 2 * end else body[0][:end]
                if size + len(held) <= self.max_bytes:
                    lead = (held, end)
                    size += len(held)
        self._put(key, (tuple(images[:count]), tuple(splits[:count]), kept, lead), size)


def _lead_end(data: bytes, tag: bytes, images: Sequence[bytes]) -> int | None:
    """The count of bytes of ``data`` taken by ``images`` as its first fields, each under
    ``tag`` and its shortest length, in order; None when ``data`` does not start so.
    ``images`` are the field's images scanned from ``data`` in wire order, so a field found
    at each expected place is that image."""
    pos = 0
    for image in images:
        if not data.startswith(tag, pos):
            return None
        pos += len(tag)
        head = varint_bytes(len(image))
        if not data.startswith(head, pos):
            return None
        pos += len(head) + len(image)
    return pos if pos <= len(data) else None


_PendingList = tuple[
    "ListIndex",
    bytes,
    Sequence[bytes],
    list[_Split],
    list["_Found | None"],
    int,
    tuple[bytes, bytes] | None,
]
"""A list :class:`ListMatch` keeps when told: the index, the key and the list's parts."""


class ListMatch:
    """What :func:`decode_messages_memo` matched by position (:class:`ListIndex`), and the
    list it keeps for the next turn once the caller calls :meth:`keep`: a caller that checks
    the body further (upb's parse) keeps the list only after the body passed, so every list
    holds messages of a body that passed every check."""

    __slots__ = ("pending", "run")

    def __init__(self) -> None:
        self.run = 0
        """How many leading messages were taken from the conversation's last list (their
        images equal those of a body that passed, outside their id values)."""
        self.pending: _PendingList | None = None
        """The list :meth:`keep` keeps: the index, its key, and the images, splits and memo
        entries of the decoded messages."""

    def keep(self) -> None:
        """Keep the decoded list as its conversation's last (once; nothing when none)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            index, key, images, splits, found, run, body = pending
            index.keep(key, images, splits, found, run=run, body=body)

    def forget(self) -> None:
        """Nothing matched, nothing to keep (the body was decoded another way)."""
        self.run, self.pending = 0, None


class DecodeMemo(BoundedLRU[bytes, tuple[betterproto2.Message, int]]):
    """Decoded messages keyed by their content key (:func:`split_message_id`), each with the
    count of repeated elements and map entries its decode created; at most ``max_entries``
    messages and ``max_bytes`` accounted bytes (:data:`MAX_ENTRIES`, :data:`MAX_BYTES`), the
    least recently used dropped first; the splits of the images it was asked about in
    :attr:`splits` (a :class:`SplitIndex`). Safe to use from several threads at once."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_entries, max_bytes)
        self.splits = SplitIndex(max_entries)
        """The content key and id span of each image seen (:class:`SplitIndex`)."""
        self.lists = ListIndex()
        """The last message list of each conversation (:class:`ListIndex`)."""

    def lookup(self, key: bytes) -> tuple[betterproto2.Message, int] | None:
        """The decoded message and its object count under ``key``, or None."""
        found = self._get(key)
        self._count(found is not None)
        return found

    def leading_images(
        self, data: bytes, number: int, max_bytes: int, rest: list[bytes] | None = None
    ) -> list[bytes | None] | None:
        """:func:`protocol_py.codec.wire.field_images` of ``data`` for field ``number`` with
        ``max_bytes`` (and its ``rest`` pieces), when ``data`` starts with the messages of its
        conversation's kept list (:meth:`ListIndex.leading`): those images are the kept ones
        and only the bytes after them are scanned. None when it does not (``rest`` untouched):
        the caller scans the whole body."""
        tag = varint_bytes(number << 3 | 2)
        if not data.startswith(tag):
            return None
        try:
            size, pos = length_prefix(data, len(tag))
        except (FallbackError, IndexError):
            return None
        if size > max_bytes or pos + size > len(data):
            return None
        split = self.splits.splits([data[pos : pos + size]])[0]
        if split is None:
            return None
        lead = self.lists.leading(data, split[0])
        if lead is None:
            return None
        kept, end = lead
        pieces: list[bytes] = []
        tail = wire.field_images(data, number, max_bytes, pieces, start=end)
        if tail is None:
            return None
        if rest is not None:
            rest.extend(pieces)
        return [*kept, *tail]

    def images(
        self, data: bytes, number: int, max_bytes: int, rest: list[bytes] | None = None
    ) -> list[bytes | None] | None:
        """:func:`protocol_py.codec.wire.field_images` of ``data`` for field ``number`` with
        ``max_bytes`` (and its ``rest`` pieces): by way of :meth:`leading_images` when
        ``data`` starts with its conversation's kept messages, else by a scan of the whole
        body."""
        found = self.leading_images(data, number, max_bytes, rest)
        if found is None:
            found = wire.field_images(data, number, max_bytes, rest)
        return found

    def count_hits(self, count: int) -> None:
        """Count ``count`` messages taken from the memo's entries by way of :attr:`lists`."""
        with self._lock:
            self.hits += count

    def lookup_many(self, keys: Sequence[bytes]) -> list[tuple[betterproto2.Message, int] | None]:
        """:meth:`lookup` of each of ``keys``, in order, under one taking of the lock."""
        return self._get_many(keys)

    def store(self, key: bytes, message: betterproto2.Message, objects: int) -> None:
        """Keep ``message`` (decoded clean and exact from an image whose content key is
        ``key``, creating ``objects`` repeated elements and map entries)."""
        self._put(key, (message, objects), 2 * len(key) + ENTRY_BYTES + OBJECT_BYTES * objects)


def decode_messages_memo(
    cls: type[M],
    data: bytes,
    field: str,
    memo: DecodeMemo,
    images: Sequence[bytes | None] | None = None,
    *,
    keys: list[bytes] | None = None,
    state: State | None = None,
    rest: bytes | None = None,
    listed: ListMatch | None = None,
) -> tuple[M, bool, bool]:
    """:func:`protocol_py.codec.wire.decode_report` of ``data`` as ``cls`` (``fallback=False``),
    the elements of its repeated ``Message`` field ``field`` taken from ``memo`` where their
    content was decoded before (see the module docstring); equal in every field.

    Args:
        cls: A generated message class with a repeated ``Message`` field ``field``.
        data: The serialized message.
        field: The repeated field's name (``"messages"``).
        memo: Where decoded messages are looked up and kept.
        images: :func:`protocol_py.codec.wire.field_images` of ``data`` for that field with
            :data:`~protocol_py.codec.wire.MAX_KEPT_IMAGE_BYTES`, when the caller has them.
        keys: When given, an empty list that receives each element's content key
            (:func:`protocol_py.codec.wire.content_key` of its image) when this path decoded
            the body; left empty when the body was decoded whole.
        state: The decode's :class:`~protocol_py.codec.wire_gen.State` (its element budget,
            and afterwards what was decoded), as for
            :func:`protocol_py.codec.wire.decode_report`; memo hits count against it too.
        rest: :func:`protocol_py.codec.wire.without_field` of ``data`` for that field, when
            the caller has it with ``images`` (from the same scan: the ``rest`` pieces of
            :func:`protocol_py.codec.wire.field_images`); else computed here.
        listed: When given, receives how many leading messages the memo's
            :class:`ListIndex` matched, and the list is kept only when the caller calls its
            :meth:`ListMatch.keep`; else the list is kept at once.

    Returns:
        ``(message, clean, exact)`` as :func:`protocol_py.codec.wire.decode_report`.

    Raises:
        What :func:`protocol_py.codec.wire.decode_report` with ``fallback=False`` raises.
    """
    number = metadata.field_number(cls, field)
    if images is None:
        images = memo.images(data, number, wire.MAX_KEPT_IMAGE_BYTES)
    if rest is None and images:
        rest = wire.without_field(data, number)
    if images is None or rest is None or not _canonical(data, rest, number, images):
        return wire.decode_report(cls, data, fallback=False, state=state)
    limit = state.limit if state is not None else wire.MAX_DECODED_OBJECTS
    keep_now = listed is None  # no caller to tell: the list is kept here
    match = ListMatch() if listed is None else listed
    try:
        tag = varint_bytes(number << 3 | 2)
        found = _decode(
            cls, rest, field, memo, images, keys=keys, limit=limit, listed=match, body=(data, tag)
        )
    except (
        FallbackError,
        wire.DecodeBudgetError,
        UnicodeDecodeError,
        IndexError,
        struct.error,
        RecursionError,
    ):
        found = None
    if found is None:  # the whole body decoded the one way, errors and all
        if keys is not None:
            keys.clear()
        match.forget()
        return wire.decode_report(cls, data, fallback=False, state=state)
    if keep_now:
        match.keep()
    if state is not None:
        state.left, state.clean, state.unknown = found[3].left, found[3].clean, found[3].unknown
    return found[:3]


def _canonical(data: bytes, rest: bytes, number: int, images: Sequence[bytes | None]) -> bool:
    """True when ``data`` is ``rest`` plus each image under field ``number``'s shortest tag and
    length (every image kept: none over the bound): no over-long tag or length, and no
    occurrence of the field with another wire type, which only the whole decode judges."""
    tag = len(varint_bytes(number << 3 | 2))
    total = len(rest)
    for image in images:
        if image is None:
            return False
        size = len(image)
        total += tag + size + (1 if size < 0x80 else 2 if size < 0x4000 else _varint_size(size))
    return total == len(data)


def _varint_size(value: int) -> int:
    return len(varint_bytes(value))


def _decode(
    cls: type[M],
    rest: bytes,
    field: str,
    memo: DecodeMemo,
    images: Sequence[bytes | None],
    *,
    keys: list[bytes] | None,
    limit: int,
    listed: ListMatch,
    body: tuple[bytes, bytes] | None = None,
) -> tuple[M, bool, bool, State] | None:
    st = State(limit)
    message: M = GENERATOR.decoder(cls)(rest, 0, len(rest), st, 1)
    elements = getattr(message, field)
    if elements:  # the field occurs in ``rest``: not this path's shape
        return None
    element_cls = metadata.fields(cls)[field].cls
    decode_element = GENERATOR.decoder(element_cls)
    new = object.__new__
    if None in images:
        return None
    whole = cast("Sequence[bytes]", images)
    first = memo.splits.splits(whole[:1])[0] if whole else None  # the conversation's key
    matched = memo.lists.match(whole, first)
    run = len(matched)
    memo.count_hits(run)
    found_splits = memo.splits.splits(whole[run:]) if run < len(whole) else []
    if None in found_splits:
        return None
    splits = [split for split, _ in matched] + cast("list[_Split]", found_splits)
    found_all: list[_Found | None] = [found for _, found in matched]
    found_all += memo.lookup_many([split[0] for split in splits[run:]])
    if keys is not None:
        keys.extend(map(_content_key_of, splits))
    append = elements.append
    left = st.left
    kept_all: list[_Found | None] = []  # each message's memo entry, for the list index
    keep = kept_all.append
    for image, split, found in zip(whole, splits, found_all, strict=True):
        if found is not None:  # a hit: a new message with its own content list and new id
            cached, objects = found
            left -= 1 + objects  # the element itself and what it holds, as if decoded
            if left < 0:
                over_budget(st)
            element = new(element_cls)
            fields = element.__dict__
            fields.update(cached.__dict__)
            fields["content"] = list(fields["content"])
            start = split[1]
            fields["id"] = image[start : split[2]].decode() if start >= 0 else ""
            append(element)
            keep(found)
            continue
        left -= 1  # the element itself, as the whole decode counts it
        if left < 0:
            over_budget(st)
        own = State(left)  # this element's own flags, the request's budget
        element = decode_element(image, 0, len(image), own, 2)
        append(element)
        if own.clean and not own.unknown:
            kept = new(element_cls)
            kept.__dict__.update(element.__dict__)
            kept.content = list(element.content)  # the request's list is its own
            memo.store(split[0], kept, left - own.left)
            keep((kept, left - own.left))
        else:
            keep(None)
        left = own.left
        st.clean = st.clean and own.clean
        st.unknown = st.unknown or own.unknown
    st.left = left
    listed.run = run
    if first is not None:
        listed.pending = (memo.lists, first[0], whole, splits, kept_all, run, body)
    return message, st.clean, not st.unknown, st
