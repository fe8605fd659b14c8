"""Whether a request's messages hold an image block, remembered by message content.

The HTTP providers' context-window estimate (:meth:`HTTPProvider.count_input_tokens
<protocol_py.providers.http.base.HTTPProvider.count_input_tokens>`) gives no estimate for a
request holding an image (its base64 data would be counted, a large overestimate), so it asks
on every turn whether any block of any message is an image, at any depth (a tool result's
content included). Walking every block of a long conversation every turn reads every message's
objects from memory; :class:`ImageFreeMessages` keeps the content keys
(:func:`protocol_py.codec.wire.content_key`: a message's wire image without its id, compared
byte for byte, no hash standing in for it) of the messages found to hold none, so only the
messages never seen before are walked. A message's blocks are a function of its content key,
so the answer is always the walk's (tests compare both); a message holding an image is never
remembered.

The content keys come from the server's decode (:func:`protocol_py.codec.wire.peek_images`
of a request it just decoded, :class:`protocol_py.codec.wire.MessageImages`); a request built
in process has none and is walked whole.

Bounds: :data:`MAX_ENTRIES` keys and :data:`MAX_BYTES` accounted bytes (each key counts its
length plus :data:`ENTRY_BYTES`, as if no other cache held the same ``bytes`` object), the
least recently used dropped first. Safe to use from several threads at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from protocol_py.codec import wire
from protocol_py.codec.prefixes import BoundedLRU
from protocol_py_gen.content.v1 import ContentBlock, Message
from protocol_py_gen.model.v1 import StreamCompletionRequest

__all__ = [
    "ENTRY_BYTES",
    "IMAGE_FREE",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "ImageFreeMessages",
    "has_image",
    "messages_hold_image",
]

MAX_ENTRIES: Final = 16_384
"""Most content keys one :class:`ImageFreeMessages` holds (messages)."""

MAX_BYTES: Final = 32 * 1024 * 1024
"""Most accounted bytes one :class:`ImageFreeMessages` holds (32 MiB; see
:data:`ENTRY_BYTES`)."""

ENTRY_BYTES: Final = 200
"""Bytes counted per entry on top of its key's length: the ordered map's entry and node and
the stored tuple (CPython 3.11)."""


def has_image(blocks: Iterable[ContentBlock]) -> bool:
    """Whether any of ``blocks`` is an image block, or a tool result whose content holds one
    (at any depth)."""
    for block in blocks:  # a plain loop: it runs over every block it is given
        if block.image is not None:
            return True
        result = block.tool_result
        if result is not None and has_image(result.content):
            return True
    return False


class ImageFreeMessages(BoundedLRU[bytes, bool]):
    """The content keys of messages found to hold no image block (see the module docstring),
    within ``max_entries`` keys and ``max_bytes`` accounted bytes."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_entries, max_bytes)

    def any_image(self, messages: Sequence[Message], keys: Sequence[bytes]) -> bool:
        """Whether any of ``messages`` holds an image block (:func:`has_image` of its content);
        ``keys[i]`` is the content key of ``messages[i]``. Those remembered are not walked
        (each counted a hit); the others are walked (each counted a miss) and remembered when
        they hold none. The walk stops at the first message holding one (those walked before
        it are remembered).

        Raises:
            ValueError: ``keys`` is not as long as ``messages``.
        """
        if len(keys) != len(messages):
            raise ValueError(f"{len(keys)} content keys for {len(messages)} messages")
        unknown = [i for i, known in enumerate(self._get_many(keys)) if known is None]
        found = False
        free: list[bytes] = []
        for i in unknown:
            if has_image(messages[i].content):
                found = True
                break
            free.append(keys[i])
        for key in free:
            self._put(key, True, len(key) + ENTRY_BYTES)
        return found


IMAGE_FREE: Final = ImageFreeMessages()
"""The process-wide memo :func:`messages_hold_image` uses."""


def messages_hold_image(
    request: StreamCompletionRequest, memo: ImageFreeMessages | None = None
) -> bool:
    """Whether any of ``request.messages`` holds an image block, at any depth: by ``memo``
    (None: :data:`IMAGE_FREE`) when the server's decode left the messages' content keys with
    the request (:func:`protocol_py.codec.wire.peek_images`, which leaves them for the
    translation), else by a walk of every block."""
    if memo is None:
        memo = IMAGE_FREE
    messages = request.messages
    images = wire.peek_images(request, "messages")
    keys = images.content_keys if isinstance(images, wire.MessageImages) else None
    if keys is not None and len(keys) == len(messages):
        return memo.any_image(messages, keys)
    return any(has_image(message.content) for message in messages)
