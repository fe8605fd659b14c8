"""Stream event order (docs/decisions.md#d12; spec: "StreamEvent").

:class:`StreamOrderChecker` checks a StreamEvent sequence one event at a time; a server runs it
on a provider's output, and a client on what it receives (through
:class:`~protocol_py.rules.accumulate.StreamAccumulator`).

Event order. Successful stream: ``stream_start? metadata* content* usage? stop``. Failed
stream: the same prefix, then one ``error``, then nothing. A tool call is ``tool_call_start``,
``tool_call_delta*``, ``tool_call_done`` for one id; calls and other content may interleave, but
every call must be closed before ``stop``. ``metadata`` and ``safety_notice`` may arrive anywhere
before the terminal event and never close an open block. Rule ids raised as
:class:`~protocol_py.errors.StreamOrderError` (with the zero-based event index):

- ``stream.event.empty``: no oneof member set (or not a StreamEvent)
- ``stream.event.multiple``: several oneof members set (a second member assigned)
- ``stream.event.invalid``: the member holds a value of the wrong Python type (a ``str`` where a
  message or ``bytes`` belongs; built in code, never decoded from the wire); ``None`` in a
  field without proto3 presence reads as its default
- ``stream.order.after_terminal``: any event after ``stop`` or ``error``
- ``stream.order.stream_start_not_first``: ``stream_start`` anywhere but index 0
- ``stream.order.content_after_usage``: a content event after ``usage``
- ``stream.order.usage_repeated``: a second ``usage``
- ``stream.stream_start.empty_id``: ``provider_request_id`` empty
- ``stream.text_delta.empty``: an empty text fragment that carries no vendor data (protocol
  1.2: a delta with vendor data may have empty text)
- ``stream.text_delta.vendor_data.<rule>`` (protocol 1.2): ``vendor_data`` of a ``text_delta``
  breaks a rule of :mod:`protocol_py.rules.vendor_data`, counted over the text block the delta
  lands on (``location_duplicate`` across the block's deltas, ``too_many``, ...)
- ``stream.vendor_block.<rule>`` (protocol 1.2): a ``vendor_block`` breaks a rule of
  :mod:`protocol_py.rules.vendor_block` (``vendor_empty``, ``vendor_invalid``,
  ``block_type_empty``, ``block_type_invalid``, ``data_empty``, ``data_too_large``,
  ``data_not_object``)
- ``stream.thinking_delta.empty``: an empty thinking fragment
- ``stream.thinking_signature.empty``: an empty signature
- ``stream.redacted_thinking.empty``: empty redacted data
- ``stream.tool_call.empty_id``: ``tool_call_start`` without an id
- ``stream.tool_call.empty_name``: ``tool_call_start`` without a tool name
- ``stream.tool_call.duplicate_id``: ``tool_call_start`` for an id already opened
- ``stream.tool_call.unknown_id``: delta/done for an id never opened
- ``stream.tool_call.closed_id``: delta/done for an id already closed
- ``stream.tool_call.unclosed``: ``stop`` while a tool call is open
- ``stream.tool_call.vendor_data.<rule>`` (protocol 1.1): ``vendor_data`` of a
  ``tool_call_start`` or ``tool_call_done`` breaks a rule of :mod:`protocol_py.rules.vendor_data`
  (``location_empty``, ``location_invalid``, ``value_empty``, ``value_too_large``,
  ``location_duplicate`` across the call's start and done, ``too_many``)
- ``stream.usage.negative``: a negative token count (protocol 1.2: also a request count or
  ``cache_storage_token_seconds``)
- ``stream.usage.request_count.name_invalid`` / ``.name_duplicate``,
  ``stream.usage.request_counts.too_many`` (protocol 1.2): the rules of
  :func:`protocol_py.rules.fees.usage_problems`
- ``stream.usage.cache_write_1h_exceeds``: ``cache_write_1h_tokens`` > ``cache_write_tokens``
- ``stream.usage.reasoning_exceeds_output``: ``reasoning_tokens`` > ``output_tokens`` while
  ``reasoning_already_counted`` is true (reasoning counted inside the output cannot exceed it)
- ``stream.stop.reason_unspecified``: ``stop`` without a reason
- ``stream.stop.reason_unknown``: ``stop`` with a reason outside StopReason
- ``stream.stop.matched_stop_sequence_missing``: STOP_SEQUENCE without the matched sequence
- ``stream.stop.matched_stop_sequence_unexpected``: a matched sequence with another reason
- ``stream.error.kind_unspecified``: ``error`` without a kind
- ``stream.error.kind_unknown``: ``error`` with a kind outside ErrorKind
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import betterproto2

from protocol_py.codec import metadata, type_check
from protocol_py.errors import InvalidValueError, StreamOrderError
from protocol_py.rules import fees
from protocol_py.rules.vendor_block import vendor_block_problems
from protocol_py.rules.vendor_data import vendor_data_problems
from protocol_py_gen.content.v1 import VendorData
from protocol_py_gen.model.v1 import (
    ErrorKind,
    Stop,
    StopReason,
    StreamEvent,
    TextDelta,
    Usage,
)

__all__ = [
    "CONTENT_EVENT_KINDS",
    "StreamOrderChecker",
    "event_member",
]

CONTENT_EVENT_KINDS = frozenset(
    {
        "text_delta",
        "thinking_delta",
        "thinking_signature",
        "redacted_thinking",
        "tool_call_start",
        "tool_call_delta",
        "tool_call_done",
        "vendor_block",
    }
)
"""StreamEvent oneof cases that carry content (the ``content*`` part of a stream,
docs/decisions.md#d12)."""
_STOP_REASONS = frozenset(int(r) for r in StopReason if r != StopReason.UNSPECIFIED)
_ERROR_KINDS = frozenset(int(k) for k in ErrorKind if k != ErrorKind.UNSPECIFIED)
_USAGE_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cache_write_1h_tokens",
)


_EVENT_MEMBERS = metadata.oneof_members(StreamEvent, "event")
"""The members of StreamEvent's ``event`` oneof, in declaration order (deltas first)."""

_first_member = operator.attrgetter("text_delta")
_other_members = operator.attrgetter(*(m for m in _EVENT_MEMBERS if m != "text_delta"))
_ALL_UNSET = (None,) * (len(_EVENT_MEMBERS) - 1)


def event_member(event: StreamEvent) -> tuple[str, Any]:
    """``betterproto2.which_one_of(event, "event")``: the set member's name and value, or
    ``("", None)``; a few times faster (it runs for every event a server sends).

    Raises:
        RuntimeError: several members are set (betterproto2's own error, naming two of them).
    """
    first = _first_member(event)
    if first is not None and _other_members(event) == _ALL_UNSET:
        return "text_delta", first  # a text delta (most events): two C-level reads
    found_name, found = "", None
    for name in _EVENT_MEMBERS:
        value = getattr(event, name)
        if value is not None:
            if found_name:
                return betterproto2.which_one_of(event, "event")  # raises, as betterproto2 does
            found_name, found = name, value
    return found_name, found


def _event_member(event: object, index: int) -> tuple[str, Any]:
    if not isinstance(event, StreamEvent):
        raise StreamOrderError(
            index, "stream.event.empty", f"expected a StreamEvent, got {type(event).__name__}"
        )
    try:
        name, value = event_member(event)
    except RuntimeError as exc:  # betterproto2 raises it when several members are set
        raise StreamOrderError(index, "stream.event.multiple", f"event oneof: {exc}") from None
    if not name or value is None:
        raise StreamOrderError(index, "stream.event.empty", "no member of the event oneof is set")
    try:
        checked, unknown = type_check.check_message(value, path=name)
    except InvalidValueError as exc:
        raise StreamOrderError(index, "stream.event.invalid", str(exc)) from None
    del unknown  # unknown enum numbers are judged by the order rules (stop.reason, error.kind)
    return name, checked


def _check_vendor_data(
    index: int,
    name: str,
    call_id: str,
    entries: list[VendorData],
    earlier: Iterable[VendorData],
) -> None:
    """Raise for the first vendor data problem of a tool_call_start or tool_call_done."""
    if not entries:
        return
    for problem in vendor_data_problems(entries, earlier):
        raise StreamOrderError(
            index,
            f"stream.tool_call.vendor_data.{problem.rule}",
            f"{name} {call_id!r}: vendor_data[{problem.entry}]: {problem.message}",
        )


class StreamOrderChecker:
    """Incremental checker of the StreamEvent order rules (docs/decisions.md#d12).

    Feed every event of one stream, in order, to :meth:`check`. Memory is O(number of tool
    calls); each check is O(1).
    """

    __slots__ = (
        "_closed",
        "_index",
        "_open",
        "_open_vendor_data",
        "_terminated",
        "_text_vendor_data",
        "_usage_seen",
    )

    def __init__(self) -> None:
        self._index = 0
        self._terminated = False
        self._usage_seen = False
        self._open: set[str] = set()
        self._closed: set[str] = set()
        self._open_vendor_data: dict[str, list[VendorData]] = {}
        # vendor data of the open text block (empty when it has none or no text block is open)
        self._text_vendor_data: list[VendorData] = []

    @property
    def terminated(self) -> bool:
        """True once ``stop`` or ``error`` has been checked."""
        return self._terminated

    @property
    def index(self) -> int:
        """Index the next event will have (the number of events checked so far)."""
        return self._index

    @property
    def open_tool_calls(self) -> list[str]:
        """Ids of tool calls started and not yet done, sorted."""
        return sorted(self._open)

    def check(self, event: StreamEvent) -> None:
        """Check the next event of the stream.

        Raises:
            StreamOrderError: the event breaks an order rule; ``index`` is the event's zero-based
                position and ``rule`` one of the ids in the module docstring. The checker's state
                is unchanged by a rejected event, except that the index still advances.
        """
        self._check(event)

    def _check(self, event: StreamEvent) -> tuple[str, Any]:
        """:meth:`check`, returning the event's oneof member name and value."""
        index = self._index
        self._index += 1
        if self._terminated:
            raise StreamOrderError(
                index, "stream.order.after_terminal", "no event may follow stop or error"
            )
        if type(event) is StreamEvent and not self._usage_seen:
            # A text delta (most events): the checks below reduced to what applies to it.
            value = _first_member(event)
            if (
                type(value) is TextDelta
                and type(value.text) is str
                and value.text
                and not value.vendor_data
                and not value.new_block
                and _other_members(event) == _ALL_UNSET
            ):
                return "text_delta", value
        name, value = _event_member(event, index)
        if name in CONTENT_EVENT_KINDS:
            if self._usage_seen:
                raise StreamOrderError(
                    index,
                    "stream.order.content_after_usage",
                    f"{name} after usage (usage comes after all content)",
                )
            self._check_content(index, name, value)
        elif name == "stream_start":
            if index != 0:
                raise StreamOrderError(
                    index,
                    "stream.order.stream_start_not_first",
                    "stream_start must be the first event of the stream",
                )
            if not value.provider_request_id:
                raise StreamOrderError(
                    index, "stream.stream_start.empty_id", "provider_request_id must be non-empty"
                )
        elif name == "usage":
            if self._usage_seen:
                raise StreamOrderError(
                    index, "stream.order.usage_repeated", "usage may be sent at most once"
                )
            self._check_usage(index, value)
            self._usage_seen = True
        elif name == "stop":
            self._check_stop(index, value)
            self._terminated = True
        elif name == "error":
            kind = int(value.kind)
            if kind == int(ErrorKind.UNSPECIFIED):
                raise StreamOrderError(
                    index, "stream.error.kind_unspecified", "error.kind must be set"
                )
            if kind not in _ERROR_KINDS:
                raise StreamOrderError(
                    index, "stream.error.kind_unknown", f"error.kind {kind} is not an ErrorKind"
                )
            self._terminated = True
        # metadata and safety_notice: allowed anywhere before the terminal event.
        return name, value

    def _check_content(self, index: int, name: str, value: Any) -> None:
        if name == "text_delta":
            self._check_text_delta(index, value)
            return
        if self._text_vendor_data and name not in ("tool_call_delta", "tool_call_done"):
            self._text_vendor_data = []  # the event closes the open text block
        if name == "vendor_block":
            for problem in vendor_block_problems(value):
                raise StreamOrderError(
                    index,
                    f"stream.vendor_block.{problem.rule}",
                    f"vendor_block.{problem.field}: {problem.message}",
                )
            return
        if name == "thinking_delta" and not value.text:
            raise StreamOrderError(
                index, "stream.thinking_delta.empty", "thinking fragment is empty"
            )
        if name == "thinking_signature" and not value.signature:
            raise StreamOrderError(
                index, "stream.thinking_signature.empty", "thinking signature is empty"
            )
        if name == "redacted_thinking" and not value.data:
            raise StreamOrderError(
                index, "stream.redacted_thinking.empty", "redacted thinking data is empty"
            )
        if name == "tool_call_start":
            call_id = value.id
            if not call_id:
                raise StreamOrderError(
                    index, "stream.tool_call.empty_id", "tool_call_start.id must be non-empty"
                )
            if not value.name:
                raise StreamOrderError(
                    index,
                    "stream.tool_call.empty_name",
                    f"tool_call_start {call_id!r}: name must be non-empty",
                )
            if call_id in self._open or call_id in self._closed:
                raise StreamOrderError(
                    index,
                    "stream.tool_call.duplicate_id",
                    f"tool call {call_id!r} was already started in this stream",
                )
            _check_vendor_data(index, name, call_id, value.vendor_data, ())
            self._open.add(call_id)
            if value.vendor_data:
                self._open_vendor_data[call_id] = list(value.vendor_data)
        elif name in ("tool_call_delta", "tool_call_done"):
            call_id = value.id
            if call_id not in self._open:
                if call_id in self._closed:
                    raise StreamOrderError(
                        index,
                        "stream.tool_call.closed_id",
                        f"{name} for tool call {call_id!r}, which is already done",
                    )
                raise StreamOrderError(
                    index,
                    "stream.tool_call.unknown_id",
                    f"{name} for tool call {call_id!r}, which was never started",
                )
            if name == "tool_call_done":
                earlier = self._open_vendor_data.get(call_id, ())
                _check_vendor_data(index, name, call_id, value.vendor_data, earlier)
                self._open.discard(call_id)
                self._open_vendor_data.pop(call_id, None)
                self._closed.add(call_id)

    def _check_text_delta(self, index: int, delta: TextDelta) -> None:
        entries = delta.vendor_data
        if not delta.text and not entries:
            raise StreamOrderError(index, "stream.text_delta.empty", "text fragment is empty")
        if delta.new_block and self._text_vendor_data:
            self._text_vendor_data = []
        if not entries:
            return
        earlier = self._text_vendor_data
        for problem in vendor_data_problems(entries, earlier, item="text block"):
            raise StreamOrderError(
                index,
                f"stream.text_delta.vendor_data.{problem.rule}",
                f"text_delta: vendor_data[{problem.entry}]: {problem.message}",
            )
        self._text_vendor_data = [*earlier, *entries]

    @staticmethod
    def _check_usage(index: int, usage: Usage) -> None:
        for name in _USAGE_COUNTS:
            count = getattr(usage, name)
            if count is not None and count < 0:
                raise StreamOrderError(
                    index, "stream.usage.negative", f"usage.{name} is negative ({count})"
                )
        if (usage.cache_write_1h_tokens or 0) > (usage.cache_write_tokens or 0):
            raise StreamOrderError(
                index,
                "stream.usage.cache_write_1h_exceeds",
                f"usage.cache_write_1h_tokens {usage.cache_write_1h_tokens} exceeds "
                f"cache_write_tokens {usage.cache_write_tokens or 0}",
            )
        if usage.reasoning_already_counted is True and (usage.reasoning_tokens or 0) > (
            usage.output_tokens or 0
        ):
            raise StreamOrderError(
                index,
                "stream.usage.reasoning_exceeds_output",
                f"usage.reasoning_tokens {usage.reasoning_tokens} exceeds output_tokens "
                f"{usage.output_tokens or 0}, yet reasoning_already_counted says the output "
                "includes them",
            )
        if usage.request_counts or usage.cache_storage_token_seconds is not None:
            for problem in fees.usage_problems(usage):
                raise StreamOrderError(
                    index, f"stream.{problem.rule}", f"{problem.path}: {problem.message}"
                )

    def _check_stop(self, index: int, stop: Stop) -> None:
        reason = int(stop.reason)
        if reason == int(StopReason.UNSPECIFIED):
            raise StreamOrderError(
                index, "stream.stop.reason_unspecified", "stop.reason must be set"
            )
        if reason not in _STOP_REASONS:
            raise StreamOrderError(
                index, "stream.stop.reason_unknown", f"stop.reason {reason} is not a StopReason"
            )
        if reason == int(StopReason.STOP_SEQUENCE) and not stop.matched_stop_sequence:
            raise StreamOrderError(
                index,
                "stream.stop.matched_stop_sequence_missing",
                "reason STOP_SEQUENCE needs matched_stop_sequence",
            )
        if reason != int(StopReason.STOP_SEQUENCE) and stop.matched_stop_sequence is not None:
            raise StreamOrderError(
                index,
                "stream.stop.matched_stop_sequence_unexpected",
                "matched_stop_sequence is set only with reason STOP_SEQUENCE",
            )
        if self._open:
            raise StreamOrderError(
                index,
                "stream.tool_call.unclosed",
                f"stop while tool call(s) {', '.join(sorted(self._open))} are still open",
            )
