"""What each side may send a peer of an older protocol minor (docs/decisions.md#d30).

A field added inside a message the peer already knows is safe: the peer keeps it as an unknown
field and its answer stays correct. A new oneof member is not: the peer decodes a message with no
member set, which its rules reject. Protocol 1.2 adds two such things, and relaxes one rule:

- ``StreamEvent.vendor_block`` and ``ContentBlock.vendor_block`` (a 1.1 stream checker answers
  ``stream.event.empty``, a 1.1 plugin's validation ``request.content.block_unset``);
- a ``TextDelta`` with empty text that carries only vendor data (a 1.1 stream checker answers
  ``stream.text_delta.empty``).

So the plugin side reads ``StreamCompletionRequest.kernel_protocol_version`` (absent: a kernel of
1.0 or 1.1) and drops those events for an older kernel (:class:`EventGate`; the reference server
applies it to whatever its provider yields), and the kernel side reads the plugin's
``Capabilities.protocol_version`` and removes vendor blocks from a request to an older plugin
(:func:`request_for_plugin`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

from protocol_py.errors import Violation
from protocol_py.version import PROTOCOL_MAJOR, PROTOCOL_VERSION
from protocol_py_gen.content.v1 import ContentBlock, Message, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

__all__ = [
    "OLDEST_KERNEL",
    "VENDOR_BLOCK_SINCE",
    "EventGate",
    "kernel_version_violations",
    "parse_protocol_version",
    "request_for_plugin",
]

VENDOR_BLOCK_SINCE: Final = (1, 2)
"""The first protocol version with vendor blocks and empty-text TextDelta events."""

OLDEST_KERNEL: Final = (1, 1)
"""The version assumed for a request without ``kernel_protocol_version`` (1.0 and 1.1 kernels
cannot set it; the two read the same events as far as this module is concerned)."""

_VERSION = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")


def parse_protocol_version(text: str | None) -> tuple[int, int] | None:
    """``"MAJOR.MINOR"`` as two integers (each at most 9 digits, no leading zero).

    Returns:
        ``(major, minor)``, or None when ``text`` is None or not of that form.
    """
    if text is None:
        return None
    match = _VERSION.fullmatch(text)
    if match is None:
        return None
    return int(match[1]), int(match[2])


class EventGate:
    """Decides, event by event, what a kernel of a given version may receive.

    Built from the request's ``kernel_protocol_version`` (absent or malformed: 1.1, see
    :data:`OLDEST_KERNEL`; request validation reports a malformed one before any event). For a
    kernel below 1.2 it refuses ``vendor_block`` events and ``text_delta`` events with empty
    text, counting each refusal by event kind in :attr:`dropped`; for any other kernel it admits
    everything. Fields a kernel does not know inside an admitted event (``TextDelta.vendor_data``,
    ``Usage.request_counts``) are sent as they are: the kernel keeps them as unknown fields.
    """

    def __init__(self, kernel_protocol_version: str | None) -> None:
        version = parse_protocol_version(kernel_protocol_version) or OLDEST_KERNEL
        self._stated = kernel_protocol_version
        self.kernel_version: tuple[int, int] = version
        self.filters: bool = version < VENDOR_BLOCK_SINCE
        """True when some events are refused (the kernel is older than 1.2)."""
        self.dropped: dict[str, int] = {}
        """Refused events by kind (``"vendor_block"``, ``"text_delta"``), in first-seen order."""

    def admits(self, event: StreamEvent) -> bool:
        """Whether ``event`` may be sent to the kernel; a refusal is counted in :attr:`dropped`."""
        if not self.filters:
            return True
        if event.vendor_block is not None:
            kind = "vendor_block"
        elif event.text_delta is not None and event.text_delta.text == "":
            kind = "text_delta"
        else:
            return True
        self.dropped[kind] = self.dropped.get(kind, 0) + 1
        return False

    def dropped_note(self) -> str | None:
        """What was refused, as one log line ("dropped 2 vendor_block event(s) that a kernel
        below protocol 1.2 cannot read ..."), or None when nothing was."""
        if not self.dropped:
            return None
        counts = ", ".join(f"{count} {kind}" for kind, count in self.dropped.items())
        since = ".".join(map(str, VENDOR_BLOCK_SINCE))
        stated = "absent" if self._stated is None else repr(self._stated[:16])
        return (
            f"dropped {counts} event(s) that a kernel below protocol {since} cannot read "
            f"(vendor-only content; the request's kernel_protocol_version is {stated})"
        )


def _without_vendor_blocks(message: Message) -> Message | None:
    """A copy of ``message`` without vendor blocks, or None when it holds none."""
    kept = [block for block in message.content if block.vendor_block is None]
    if len(kept) == len(message.content):
        return None
    if not kept:
        # the kernel keeps an empty text block for position (content.v1.TextBlock.text)
        kept = [ContentBlock(text=TextBlock(text=""))]
    return Message(
        role=message.role,
        content=kept,
        id=message.id,
        produced_by_model_id=message.produced_by_model_id,
        produced_by_provider=message.produced_by_provider,
    )


def request_for_plugin(
    request: StreamCompletionRequest, plugin_protocol_version: str
) -> tuple[StreamCompletionRequest, int]:
    """The request as a plugin of ``plugin_protocol_version`` may receive it.

    For a plugin below 1.2 (or one whose version does not parse: treated as 1.1) every
    ``vendor_block`` content block is removed from the messages; a message left with no block
    keeps one empty text block, so the message sequence (and every index a cache breakpoint
    names) is unchanged. Messages and the request are copied only where something is removed;
    the caller's request is never modified.

    Args:
        request: The request as the kernel built it.
        plugin_protocol_version: The plugin's ``Capabilities.protocol_version``, "MAJOR.MINOR".

    Returns:
        ``(request to send, number of vendor blocks removed)``; the request itself when none
        was removed.
    """
    version = parse_protocol_version(plugin_protocol_version) or OLDEST_KERNEL
    if version >= VENDOR_BLOCK_SINCE:
        return request, 0
    messages: list[Message] = []
    removed = 0
    for message in request.messages:
        copy = _without_vendor_blocks(message)
        if copy is None:
            messages.append(message)
            continue
        removed += sum(1 for block in message.content if block.vendor_block is not None)
        messages.append(copy)
    if not removed:
        return request, 0
    return dataclasses.replace(request, messages=messages), removed


def kernel_version_violations(value: str | None) -> list[Violation]:
    """Check ``StreamCompletionRequest.kernel_protocol_version`` (absent is valid: a 1.0 or 1.1
    kernel).

    Rules (path ``kernel_protocol_version``): ``request.kernel_protocol_version.invalid`` (not
    ``MAJOR.MINOR``), ``request.kernel_protocol_version.other_major`` (a major this package
    does not speak).
    """
    if value is None:
        return []
    parsed = parse_protocol_version(value)
    if parsed is None:
        return [
            Violation(
                "kernel_protocol_version",
                "request.kernel_protocol_version.invalid",
                f"kernel_protocol_version {value[:16]!r} MUST be MAJOR.MINOR, for example "
                f"{PROTOCOL_VERSION!r}",
            )
        ]
    if parsed[0] != PROTOCOL_MAJOR:
        return [
            Violation(
                "kernel_protocol_version",
                "request.kernel_protocol_version.other_major",
                f"a kernel of protocol {value} cannot talk to this plugin of protocol "
                f"{PROTOCOL_VERSION} (another major version)",
            )
        ]
    return []
