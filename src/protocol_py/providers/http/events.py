"""Small StreamEvent constructors and checks shared by the vendor stream translators.

Every constructor builds the event through the oneof constructor (DEVELOPMENT.md, "Toolchain and
sharp edges": never assign a second oneof member).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import betterproto2

from protocol_py.providers.http import vendor_json
from protocol_py.rules.stream_order import CONTENT_EVENT_KINDS
from protocol_py_gen.content.v1 import VendorBlock, VendorData
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    RedactedThinking,
    StreamEvent,
    StreamMetadata,
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
)

M = TypeVar("M", bound=betterproto2.Message)

PROGRESS_KINDS = CONTENT_EVENT_KINDS | {"stop", "error"}
"""Event cases that count as generation progress for the start-up and no-progress timeouts
(C08). stream_start, metadata and usage do not: keep-alives, empty deltas and usage-only chunks
never extend a deadline."""


_IMMUTABLE = (type(None), str, bytes, int, float, bool)


def _blank(cls: type[betterproto2.Message]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The attributes of ``cls()`` (every field at its default, no unknown fields) that
    :func:`_new` copies, and the names of its repeated fields, which :func:`_new` gives a new
    empty list each (a copied list would be shared between messages).

    Raises:
        TypeError: another default is mutable (a map field, or a non-empty list); such classes
            are built by their constructor.
    """
    blank = dict(vars(cls()))
    lists = tuple(sorted(k for k, v in blank.items() if type(v) is list and not v))
    mutable = sorted(
        k for k, v in blank.items() if not isinstance(v, _IMMUTABLE) and k not in lists
    )
    if mutable:
        raise TypeError(f"{cls.__name__}: mutable defaults {mutable}")
    for name in lists:
        del blank[name]
    return blank, lists


_EVENT: Final = _blank(StreamEvent)
_TEXT: Final = _blank(TextDelta)
_THINKING: Final = _blank(ThinkingDelta)


def _new(
    cls: type[M], blank: tuple[dict[str, Any], tuple[str, ...]], name: str, value: object
) -> M:
    """``cls(**{name: value})`` for a class whose defaults :func:`_blank` accepts: the same
    message (equal, same attributes, same encoding), built from a copy of the blank template,
    about twice as fast as the dataclass constructor (it runs for every delta)."""
    message = object.__new__(cls)
    attrs = message.__dict__
    attrs.update(blank[0])
    for field_name in blank[1]:
        attrs[field_name] = []
    attrs[name] = value
    return message


def text(value: str) -> StreamEvent:
    """A text_delta event (callers never pass an empty string)."""
    return _new(StreamEvent, _EVENT, "text_delta", _new(TextDelta, _TEXT, "text", value))


def text_block(value: str, vendor_data: Sequence[VendorData] = ()) -> StreamEvent:
    """A text_delta that starts a new text block (protocol 1.2 ``new_block``), with the vendor
    data of that block; ``value`` may be empty only when ``vendor_data`` is not."""
    return StreamEvent(
        text_delta=TextDelta(text=value, vendor_data=list(vendor_data), new_block=True)
    )


def signed_text(value: str, vendor_data: Sequence[VendorData]) -> StreamEvent:
    """:func:`text_block` for a vendor part that carries its signature in ``vendor_data``: its
    text MAY be empty (a part that holds only a signature; protocol 1.2)."""
    return text_block(value, vendor_data)


def text_vendor_data(vendor_data: Sequence[VendorData]) -> StreamEvent:
    """An empty text_delta carrying vendor data for the open text block (protocol 1.2; for
    example Anthropic's citations, sent when the block ends)."""
    return StreamEvent(text_delta=TextDelta(text="", vendor_data=list(vendor_data)))


def vendor_block(vendor: str, block_type: str, data: bytes) -> StreamEvent:
    """A vendor_block event (protocol 1.2): a whole vendor-owned block, verbatim."""
    return StreamEvent(vendor_block=VendorBlock(vendor=vendor, block_type=block_type, data=data))


def thinking(value: str) -> StreamEvent:
    """A thinking_delta event."""
    return _new(
        StreamEvent, _EVENT, "thinking_delta", _new(ThinkingDelta, _THINKING, "text", value)
    )


def signature(value: str) -> StreamEvent:
    """A thinking_signature event carrying the vendor string's UTF-8 bytes verbatim
    (docs/decisions.md#d6)."""
    return StreamEvent(thinking_signature=ThinkingSignature(signature=value.encode("utf-8")))


def redacted(value: str) -> StreamEvent:
    """A redacted_thinking event carrying the vendor string's UTF-8 bytes verbatim
    (docs/decisions.md#d6)."""
    return StreamEvent(redacted_thinking=RedactedThinking(data=value.encode("utf-8")))


def tool_start(call_id: str, name: str, vendor_data: Sequence[VendorData] = ()) -> StreamEvent:
    """A tool_call_start event, with the vendor data known when the call opens (protocol 1.1)."""
    return StreamEvent(
        tool_call_start=ToolCallStart(id=call_id, name=name, vendor_data=list(vendor_data))
    )


def tool_delta(call_id: str, fragment: str) -> StreamEvent:
    """A tool_call_delta event with the fragment as received."""
    return StreamEvent(tool_call_delta=ToolCallDelta(id=call_id, arguments_fragment=fragment))


def tool_done(call_id: str, vendor_data: Sequence[VendorData] = ()) -> StreamEvent:
    """A tool_call_done event, with vendor data that arrived after the call opened (1.1)."""
    return StreamEvent(tool_call_done=ToolCallDone(id=call_id, vendor_data=list(vendor_data)))


def start(request_id: str) -> StreamEvent:
    """A stream_start event (callers never pass an empty id)."""
    return StreamEvent(stream_start=StreamStart(provider_request_id=request_id))


def metadata(meta: StreamMetadata) -> StreamEvent:
    """A metadata event."""
    return StreamEvent(metadata=meta)


def error(err: ModelError) -> StreamEvent:
    """An error event."""
    return StreamEvent(error=err)


def check_tool_arguments(call_id: str, fragments: list[str]) -> ModelError | None:
    """Check a finished tool call's concatenated arguments (case B04).

    Empty or whitespace-only arguments mean ``{}`` (parameterless tools) and pass. Anything else
    must parse as a JSON object; otherwise a TRANSIENT error naming the call id is returned (the
    model produced invalid arguments; a retry may succeed).
    """
    joined = "".join(fragments)
    if not joined.strip():
        return None
    try:
        value = vendor_json.loads(joined)
    except (json.JSONDecodeError, vendor_json.VendorJSONDepthError) as exc:
        return ModelError(
            kind=ErrorKind.TRANSIENT,
            message=f"tool call {call_id!r}: arguments are not valid JSON ({exc.msg})",
            retryable=True,
        )
    if not isinstance(value, dict):
        return ModelError(
            kind=ErrorKind.TRANSIENT,
            message=f"tool call {call_id!r}: arguments are JSON but not an object",
            retryable=True,
        )
    return None


def as_int(value: object) -> int | None:
    """``value`` when it is a JSON integer (not bool, not float), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


MAX_USAGE_COUNT = 2**53
"""Largest vendor token count an adapter passes on (docs/decisions.md#d5: integers beyond 2^53 are
not exact in JSON); the sum of a few such counts still fits the proto's int64."""

_log = logging.getLogger("protocol_py.providers")


def usage_count(raw: Mapping[str, object], key: str, where: str) -> int | None:
    """A vendor usage count ``raw[key]`` normalised for a Usage event (docs/adapters.md "Usage").

    Returns the count when it is a JSON integer (an integral float counts) in
    ``[0, MAX_USAGE_COUNT]``; None when it is absent or null. Any other value (negative,
    fractional, a string, a bool, an object, too large) is dropped: None is returned and a
    warning naming ``where`` (e.g. ``"usage.completion_tokens"``) is logged, so one bad figure
    never turns a finished answer into an error. Never raises.
    """
    value = raw.get(key)
    if value is None:
        return None
    count = as_int(value)
    if count is not None and 0 <= count <= MAX_USAGE_COUNT:
        return count
    shown = repr(value) if isinstance(value, (int, float, bool)) else type(value).__name__
    _log.warning("vendor usage %s dropped: %s is not a token count", where, shown)
    return None


def counted_reasoning(output_tokens: int, reasoning_tokens: int | None, where: str) -> int | None:
    """A vendor reasoning figure documented as inside the output count, checked against it.

    Reasoning that is part of the output cannot exceed it (``usage.reasoning_exceeds_output``
    in :mod:`protocol_py.rules.cost` and :mod:`protocol_py.rules.stream_order`). When a vendor
    reports more, the reasoning figure is dropped (None) with a warning naming ``where``; the
    output count, which is what is billed, is kept, so the finished answer and its cost survive.
    Never raises.
    """
    if reasoning_tokens is None or reasoning_tokens <= output_tokens:
        return reasoning_tokens
    _log.warning(
        "vendor usage %s dropped: %d reasoning tokens exceed the %d output tokens "
        "that include them",
        where,
        reasoning_tokens,
        output_tokens,
    )
    return None


def as_str(value: object) -> str | None:
    """``value`` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _fix_surrogates(value: str) -> str:
    """``value`` with each UTF-16 surrogate pair joined into its character and every lone
    surrogate replaced by U+FFFD (a protobuf string must be valid UTF-8)."""
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def valid_text(value: str) -> str:
    """``value`` safe for a protobuf string field: unchanged unless it holds surrogate code
    points (JSON ``\\ud83d`` escapes a gateway split apart), which are joined into characters
    where they pair and otherwise become U+FFFD."""
    if value.isascii() or _SURROGATE.search(value) is None:
        return value
    return _fix_surrogates(value)


class SurrogateJoiner:
    """Joins the halves of a character outside the BMP that a vendor (or a gateway slicing its
    text by UTF-16 code unit) split across two deltas of one channel.

    A fragment ending in a high surrogate keeps it back; the next fragment of the same channel
    gets it in front, so the pair becomes one character. Whatever cannot pair becomes U+FFFD
    (:func:`valid_text`). A channel is any hashable key: ``"text"``, ``"thinking"``, a tool
    call. :meth:`flush` returns a held half (as U+FFFD) when the channel ends.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[object, str] = {}

    def feed(self, channel: object, fragment: str) -> str:
        """The part of ``fragment`` that can be emitted now (maybe empty)."""
        if fragment.isascii() and not self._held:
            return fragment
        held = self._held.pop(channel, None)
        if held is not None:
            fragment = held + fragment
        if fragment and "\ud800" <= fragment[-1] <= "\udbff":
            self._held[channel] = fragment[-1]
            fragment = fragment[:-1]
        return valid_text(fragment)

    def flush(self, channel: object) -> str:
        """A half still held for ``channel`` as U+FFFD, or ``""``; the channel is cleared."""
        return "\ufffd" if self._held.pop(channel, None) is not None else ""

    def channels(self) -> list[object]:
        """Channels holding a half, in the order they started holding it."""
        return list(self._held)


def scrub_event(event: StreamEvent) -> StreamEvent:
    """Make every string of ``event`` valid for protobuf (:func:`valid_text`), in place.

    The translators join split surrogate pairs themselves (:class:`SurrogateJoiner`); this is
    the last line for any other vendor string (an id, a name, an error message) holding a lone
    surrogate, which would otherwise fail the event's encoding (a bare gRPC UNKNOWN).
    """
    text = event.text_delta
    if text is not None:
        if not text.text.isascii():
            text.text = valid_text(text.text)
        return event
    thinking = event.thinking_delta
    if thinking is not None:
        if not thinking.text.isascii():
            thinking.text = valid_text(thinking.text)
        return event
    _scrub(event)
    return event


def _scrub(message: betterproto2.Message) -> None:
    for name, value in vars(message).items():
        if name.startswith("_"):
            continue
        if isinstance(value, str):
            if not value.isascii():
                setattr(message, name, valid_text(value))
        elif isinstance(value, betterproto2.Message):
            _scrub(value)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, betterproto2.Message):
                    _scrub(item)
                elif isinstance(item, str) and not item.isascii():
                    value[i] = valid_text(item)
        elif isinstance(value, dict) and (
            any(isinstance(k, str) and not k.isascii() for k in value)
            or any(isinstance(v, str) and not v.isascii() for v in value.values())
        ):
            setattr(
                message,
                name,
                {
                    (valid_text(k) if isinstance(k, str) else k): (
                        valid_text(v) if isinstance(v, str) else v
                    )
                    for k, v in value.items()
                },
            )
