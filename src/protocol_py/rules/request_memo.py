"""Per-message request validation reused across turns.

An agent kernel resends the whole conversation every turn: turn N's messages are a prefix of
turn N+1's, byte for byte on the wire. :func:`protocol_py.rules.request.validate_request` walks
every message every turn; for a request the server just decoded cleanly from the wire
(:func:`protocol_py.codec.wire.take_wire_clean`), a message whose exact wire image already passed
every message-local rule under the same model settings need not be walked again.

What is reused: for a message that raised *no* violation (no error, no warning), its wire image
without its id (:func:`protocol_py.codec.wire.content_key`: the exact bytes, compared in full: no
hash of the content stands in for it) and the model settings the rules read
(:func:`settings_of`) map to a :class:`CleanMessage`: the tool_use ids it introduces and
the tool_use ids its tool_results answer. Those are the only facts the rules read across
messages, so on a hit the validator checks them against the conversation so far (a duplicated
tool_use id, a tool_result answering no earlier call) and falls back to the full walk of that
message when either fails: the violations reported are always exactly those of a full walk.
Message id checks (missing, duplicate) are never skipped.

A second, cheaper level serves the usual turn: the state the cross-message rules build (message
ids, tool_use ids, answered calls) after a whole message list that raised no violation is kept
per conversation (:data:`PREFIXES`, a :class:`~protocol_py.codec.prefixes.ConversationPrefixes`);
when the next request's messages start with exactly the messages of that list, the validator
resumes from that state and walks only the messages after them. With the content keys of the
server's decode (:class:`protocol_py.codec.wire.MessageImages`), a list is keyed by the settings
and its first message's content key and matched by content keys (the same bytes objects turn
after turn, compared byte for byte where they are not), so it is resumed under new message ids
too: the id rules then run over the resumed messages, whose tool_use ids and answered calls are
content. Without them, by the settings and the first message's id, matched by images.

Bounds: :data:`MAX_PREFIXES` conversations and :data:`MAX_PREFIX_BYTES` bytes of their images;
:data:`MAX_ENTRIES` messages and :data:`MAX_BYTES` bytes of images per memo, the least
recently used dropped first; an image larger than :data:`MAX_IMAGE_BYTES` is never stored (such
a message is walked every turn). The memo is safe to use from several worker threads at once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Final

import betterproto2

from protocol_py.codec import metadata, wire
from protocol_py.codec.prefixes import BoundedLRU, ConversationPrefixes
from protocol_py_gen.content.v1 import Message
from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest, ThinkingSpec

__all__ = [
    "MAX_BYTES",
    "MAX_ENTRIES",
    "MAX_IMAGE_BYTES",
    "MAX_PREFIXES",
    "MAX_PREFIX_BYTES",
    "CleanMessage",
    "ValidState",
    "ValidatedMessages",
    "clean_message",
    "keep_request_images",
    "request_images",
    "settings_of",
    "take_request_images",
    "valid_prefixes",
]

MAX_ENTRIES: Final = 16_384
"""Most messages one memo remembers as valid (entries)."""

MAX_BYTES: Final = 32 * 1024 * 1024
"""Most bytes of message wire images one memo holds as keys (32 MiB)."""

MAX_IMAGE_BYTES: Final = wire.MAX_KEPT_IMAGE_BYTES
"""Largest message wire image remembered, bytes (1 MiB,
:data:`protocol_py.codec.wire.MAX_KEPT_IMAGE_BYTES`): a bigger message is walked every turn, and a
message list holding one is not kept as a conversation prefix (its image is None: never copied,
hashed or kept)."""


MAX_PREFIXES: Final = 64
"""Most conversations whose last valid message list is kept (entries)."""

MAX_PREFIX_BYTES: Final = 64 * 1024 * 1024
"""Most bytes of message wire images the kept message lists hold (64 MiB); an image also held
by the per-message memo is the same object, counted here too."""


@dataclass(frozen=True, slots=True)
class ValidState:
    """The cross-message state after a message list that raised no violation.

    Attributes:
        message_ids: Message id -> index.
        tool_use_ids: tool_use id -> the field path of its block.
        answered: The tool_use ids a later tool_result may answer.
    """

    message_ids: dict[str, int]
    tool_use_ids: dict[str, str]
    answered: frozenset[str]


def valid_prefixes() -> ConversationPrefixes[ValidState]:
    """A memo of valid message lists within :data:`MAX_PREFIXES` and :data:`MAX_PREFIX_BYTES`,
    keyed by ``(settings, first message id)``."""
    return ConversationPrefixes(MAX_PREFIXES, MAX_PREFIX_BYTES)


@dataclass(frozen=True, slots=True)
class CleanMessage:
    """What a message that passed every message-local rule contributes to the rules that span
    messages.

    Attributes:
        uses: ``(content index, tool_use id)`` of each tool_use block, in order.
        answers: The ``tool_use_id`` of each tool_result block, in order.
    """

    uses: tuple[tuple[int, str], ...]
    answers: tuple[str, ...]


def clean_message(message: Message) -> CleanMessage:
    """The :class:`CleanMessage` of ``message`` (read from its top-level content blocks)."""
    return CleanMessage(
        uses=tuple(
            (j, block.tool_use.id)
            for j, block in enumerate(message.content)
            if block.tool_use is not None
        ),
        answers=tuple(
            block.tool_result.tool_use_id
            for block in message.content
            if block.tool_result is not None
        ),
    )


def settings_of(spec: ModelSpec | None) -> Hashable:
    """The ModelSpec settings the message rules read: whether a spec is given, and
    ``supports_vision``, ``supports_documents``, ``supports_tool_use`` and
    ``thinking.supported`` (a message valid under one set may not be under another)."""
    if spec is None:
        return (False,)
    thinking = spec.thinking if spec.thinking is not None else ThinkingSpec()
    return (
        True,
        spec.supports_vision,
        spec.supports_documents,
        spec.supports_tool_use,
        thinking.supported,
    )


class ValidatedMessages(BoundedLRU[tuple[Hashable, bytes], CleanMessage]):
    """LRU map ``(settings, content key) -> CleanMessage`` within the bounds above, the
    content key being the message's wire image without its id
    (:func:`protocol_py.codec.wire.content_key`, compared exactly by the dictionary): the
    message-local rules never read the id, so the same message under a new id hits (the id
    checks run on every message, hit or not)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_entries, max_bytes)

    def get(
        self, settings: Hashable, image: bytes, key: bytes | None = None
    ) -> CleanMessage | None:
        """The entry of the message of wire image ``image`` under ``settings``, or None
        (counted as a miss). ``key``: the image's content key
        (:func:`protocol_py.codec.wire.content_key`) when the caller has it (the server's
        decode computed it: :class:`protocol_py.codec.wire.MessageImages`), else computed
        here."""
        found = self._get((settings, wire.content_key(image) if key is None else key))
        self._count(found is not None)
        return found

    def get_many(self, settings: Hashable, keys: Sequence[bytes]) -> list[CleanMessage | None]:
        """:meth:`get` of each content key of ``keys`` under ``settings``, in order, under one
        taking of the lock (each counted as a hit or a miss)."""
        return self._get_many([(settings, key) for key in keys])

    def put(
        self, settings: Hashable, image: bytes, entry: CleanMessage, key: bytes | None = None
    ) -> None:
        """Remember that the message of wire image ``image`` (content key ``key``, computed
        here when None) passed every message-local rule under ``settings``; an image over
        :data:`MAX_IMAGE_BYTES` is not kept."""
        if len(image) <= MAX_IMAGE_BYTES:
            if key is None:
                key = wire.content_key(image)
            self._put((settings, key), entry, len(key))


# -- wire images of a request just decoded -----------------------------------------------------

_images: dict[int, tuple[weakref.ref[StreamCompletionRequest], list[bytes | None]]] = {}
_images_lock = threading.RLock()  # re-entered by a weakref callback run by GC


_MESSAGES_FIELD: Final = metadata.field_number(StreamCompletionRequest, "messages")


def request_images(data: bytes, rest: list[bytes] | None = None) -> list[bytes | None] | None:
    """The wire image of each message of the StreamCompletionRequest body ``data``
    (:func:`protocol_py.codec.wire.field_images`; one larger than :data:`MAX_IMAGE_BYTES` is None,
    not copied), or None when ``data`` does not scan. ``rest``: as for
    :func:`~protocol_py.codec.wire.field_images` (the body's pieces outside its messages)."""
    return wire.field_images(data, _MESSAGES_FIELD, MAX_IMAGE_BYTES, rest)


def keep_request_images(
    request: StreamCompletionRequest, data: bytes, images: list[bytes | None] | None = None
) -> None:
    """Keep, for one :func:`take_request_images`, the wire image of each of
    ``request.messages``, just decoded exactly and cleanly from ``data`` (the server calls
    this right after decoding; weakly held, so it goes with the request). ``images``: those
    images already scanned (:func:`protocol_py.codec.wire.field_images` with
    :data:`MAX_IMAGE_BYTES`; shared, never changed), else scanned here; an image larger than
    :data:`MAX_IMAGE_BYTES` is None (that message is walked uncached)."""
    if images is None:
        images = request_images(data)
    if images is None or len(images) != len(request.messages):
        return
    key = id(request)

    def drop(ref: object) -> None:
        with _images_lock:
            entry = _images.get(key)
            if entry is not None and entry[0] is ref:
                del _images[key]

    with _images_lock:
        _images[key] = (weakref.ref(request, drop), images)


def take_request_images(request: betterproto2.Message) -> Sequence[bytes | None] | None:
    """The images kept for ``request`` (then forgotten), or None; also None when its message
    list no longer has as many elements."""
    with _images_lock:
        kept = _images.get(id(request))
        if kept is None or kept[0]() is not request:
            return None
        del _images[id(request)]
    images = kept[1]
    messages = getattr(request, "messages", None)
    return images if messages is not None and len(images) == len(messages) else None


VALIDATED: Final = ValidatedMessages()
"""The process-wide memo :func:`protocol_py.rules.request.validate_request` uses."""

PREFIXES: Final = valid_prefixes()
"""The process-wide message lists :func:`protocol_py.rules.request.validate_request` resumes
from."""
