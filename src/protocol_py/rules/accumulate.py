"""The stream accumulator (spec: "StreamEvent", "Canonical message & content-block schema").

:class:`StreamAccumulator` (or the :func:`accumulate` shortcut) folds a stream's events into one
canonical assistant ``content.v1.Message`` plus the stream's usage, stop, error, metadata and
safety notices, checking each event's order first
(:class:`~protocol_py.rules.stream_order.StreamOrderChecker`, docs/decisions.md#d12).

Accumulation: consecutive text deltas form one text block, unless a delta sets ``new_block``
(protocol 1.2), which starts a new one; a delta's ``vendor_data`` is appended to the text block
it lands on, and a block of empty text is kept when it carries vendor data (a Gemini part that
holds only its signature); ``vendor_block`` is its own block, verbatim, and closes an open text
or thinking block (protocol 1.2); consecutive thinking deltas form one
thinking block, closed by ``thinking_signature`` (the signature is assigned, not appended); a
signature with no open thinking block becomes its own thinking block with empty text (an
Anthropic signature-only block is legal); ``redacted_thinking`` is its own block, verbatim; a
tool call is a ``tool_use`` block placed where it started, its arguments parsed once, at
``tool_call_done``, from the concatenated fragments (none, or only whitespace, is ``{}``); its
``vendor_data`` is the start's entries then the done's, verbatim (protocol 1.1). Tool
arguments that are not a JSON object, or hold an integer beyond 2^53 (docs/decisions.md#d5),
do not raise: the block keeps ``{}`` as input, and the call id and the reason are recorded in
:attr:`AccumulatedResponse.tool_call_errors` (the raw text stays in ``tool_arguments``) so the
kernel can answer the call with an error result instead of losing the turn. Time is linear in
the number of events: fragments are collected in lists and joined once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import betterproto2
from ulid import ULID

from protocol_py.codec import protojson
from protocol_py.codec.structs import parse_json_object, to_struct
from protocol_py.errors import InvalidValueError
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    VendorBlock,
    VendorData,
)
from protocol_py_gen.google.protobuf import Struct
from protocol_py_gen.model.v1 import (
    ModelError,
    SafetyKind,
    SafetyNotice,
    Stop,
    StreamEvent,
    StreamMetadata,
    Usage,
)

__all__ = [
    "AccumulatedResponse",
    "StreamAccumulator",
    "accumulate",
]

_SAFETY_KINDS = frozenset(int(k) for k in SafetyKind if k != SafetyKind.UNSPECIFIED)


class _TextBuilder:
    __slots__ = ("parts", "vendor_data")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.vendor_data: list[VendorData] = []

    def build(self) -> ContentBlock:
        return ContentBlock(
            text=TextBlock(
                text="".join(self.parts),
                vendor_data=[
                    VendorData(location=v.location, value=bytes(v.value)) for v in self.vendor_data
                ],
            )
        )


class _ThinkingBuilder:
    __slots__ = ("parts", "signature")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.signature = b""

    def build(self) -> ContentBlock:
        return ContentBlock(
            thinking=ThinkingBlock(text="".join(self.parts), signature=self.signature)
        )


class _VendorBlockBuilder:
    __slots__ = ("block",)

    def __init__(self, block: VendorBlock) -> None:
        self.block = VendorBlock(
            vendor=block.vendor, block_type=block.block_type, data=bytes(block.data)
        )

    def build(self) -> ContentBlock:
        return ContentBlock(vendor_block=self.block)


class _RedactedBuilder:
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def build(self) -> ContentBlock:
        return ContentBlock(redacted_thinking=RedactedThinkingBlock(data=self.data))


class _ToolBuilder:
    __slots__ = ("call_id", "done", "error", "input", "name", "parts", "vendor_data")

    def __init__(self, call_id: str, name: str, vendor_data: list[VendorData]) -> None:
        self.call_id = call_id
        self.name = name
        self.vendor_data = list(vendor_data)
        self.parts: list[str] = []
        self.input: Struct | None = None
        self.error: str | None = None
        self.done = False

    def finish(self) -> None:
        self.done = True
        try:
            parsed = parse_json_object(
                "".join(self.parts), path=f"tool_call[{self.call_id}].arguments"
            )
            self.input = to_struct(parsed)
        except InvalidValueError as exc:
            self.error = f"tool call {self.call_id!r} ({self.name}): {exc}"

    def build(self) -> ContentBlock:
        return ContentBlock(
            tool_use=ToolUseBlock(
                id=self.call_id,
                name=self.name,
                input=self.input if self.input is not None else Struct(fields={}),
                vendor_data=[
                    VendorData(location=v.location, value=bytes(v.value)) for v in self.vendor_data
                ],
            )
        )


_Builder = _TextBuilder | _ThinkingBuilder | _RedactedBuilder | _ToolBuilder | _VendorBlockBuilder


@dataclass
class AccumulatedResponse:
    """One stream folded into its canonical form.

    Attributes:
        message: The assistant ``content.v1.Message``: role ASSISTANT, blocks in production
            order, ``id`` a new ULID unless one was given (docs/decisions.md#d16),
            ``produced_by_model_id`` / ``produced_by_provider`` when given.
        usage: The ``usage`` event, or None.
        stop: The ``stop`` event, or None.
        error: The ``error`` event, or None.
        metadata: Every ``metadata`` event merged (later values win field by field; ``attrs``
            merged key by key; a non-empty ``rate_limits`` replaces the earlier list), or None.
        safety_notices: The ``safety_notice`` events of a known kind, in order.
        ignored_safety_notices: How many notices of an unknown kind were ignored
            (docs/decisions.md#d12).
        provider_request_id: From ``stream_start``, or None.
        complete: True when ``stop`` or ``error`` arrived.
        unreplayable_blocks: Indices into ``message.content`` of thinking blocks without a
            signature (a vendor that signs thinking rejects them on replay).
        tool_arguments: Raw argument text of every tool call, by call id.
        tool_call_errors: Tool calls whose arguments could not be parsed, by call id, with the
            reason (their block's input is ``{}``).
        open_tool_calls: Ids of tool calls started but never done (incomplete streams only);
            their blocks carry the arguments only if what arrived parses.
    """

    message: Message
    usage: Usage | None = None
    stop: Stop | None = None
    error: ModelError | None = None
    metadata: StreamMetadata | None = None
    safety_notices: list[SafetyNotice] = field(default_factory=list)
    ignored_safety_notices: int = 0
    provider_request_id: str | None = None
    complete: bool = False
    unreplayable_blocks: list[int] = field(default_factory=list)
    tool_arguments: dict[str, str] = field(default_factory=dict)
    tool_call_errors: dict[str, str] = field(default_factory=dict)
    open_tool_calls: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The proto3-JSON form used by ``testdata/conformance/accumulate.json``: ``message``,
        ``usage``, ``stop``, ``error``, ``metadata`` (proto3 JSON or null),
        ``safety_notices`` (list), ``provider_request_id``, ``complete``,
        ``unreplayable_blocks``, ``tool_call_errors`` (sorted list of call ids),
        ``open_tool_calls``."""

        def opt(msg: betterproto2.Message | None) -> Any:
            return None if msg is None else protojson.encode(msg)

        return {
            "message": protojson.encode(self.message),
            "usage": opt(self.usage),
            "stop": opt(self.stop),
            "error": opt(self.error),
            "metadata": opt(self.metadata),
            "safety_notices": [protojson.encode(n) for n in self.safety_notices],
            "provider_request_id": self.provider_request_id,
            "complete": self.complete,
            "unreplayable_blocks": list(self.unreplayable_blocks),
            "tool_call_errors": sorted(self.tool_call_errors),
            "open_tool_calls": list(self.open_tool_calls),
        }


def _merge_metadata(old: StreamMetadata | None, new: StreamMetadata) -> StreamMetadata:
    if old is None:
        return StreamMetadata(
            actual_model=new.actual_model,
            system_fingerprint=new.system_fingerprint,
            service_tier=new.service_tier,
            rate_limits=list(new.rate_limits),
            live_context_window=new.live_context_window,
            live_max_output_tokens=new.live_max_output_tokens,
            catalog_etag=new.catalog_etag,
            sticky_turn_token=new.sticky_turn_token,
            attrs=dict(new.attrs),
        )
    for name in (
        "actual_model",
        "system_fingerprint",
        "service_tier",
        "live_context_window",
        "live_max_output_tokens",
        "catalog_etag",
        "sticky_turn_token",
    ):
        value = getattr(new, name)
        if value is not None:
            setattr(old, name, value)
    if new.rate_limits:
        old.rate_limits = list(new.rate_limits)
    old.attrs.update(new.attrs)
    return old


class StreamAccumulator:
    """Folds a StreamEvent sequence into an :class:`AccumulatedResponse`, checking the event order
    as it goes. Linear time and memory in the size of the stream.

    Args:
        message_id: The message id to use; default a new ULID (docs/decisions.md#d16).
        produced_by_model_id: ``ModelSpec.id`` of the producing model, when known.
        produced_by_provider: ``ProducerRef.name`` of the producing provider, when known.
    """

    def __init__(
        self,
        *,
        message_id: str | None = None,
        produced_by_model_id: str | None = None,
        produced_by_provider: str | None = None,
    ) -> None:
        for what, given in (
            ("message_id", message_id),
            ("produced_by_model_id", produced_by_model_id),
            ("produced_by_provider", produced_by_provider),
        ):
            if given is not None and not isinstance(given, str):
                raise InvalidValueError(
                    f"{what}: expected a str or None, got {type(given).__name__}",
                    path=what,
                    rule="value.wrong_type",
                )
        self._checker = StreamOrderChecker()
        self._message_id = message_id if message_id is not None else str(ULID())
        self._model_id = produced_by_model_id
        self._provider = produced_by_provider
        self._blocks: list[_Builder] = []
        self._open: _TextBuilder | _ThinkingBuilder | None = None
        self._calls: dict[str, _ToolBuilder] = {}
        self._usage: Usage | None = None
        self._stop: Stop | None = None
        self._error: ModelError | None = None
        self._metadata: StreamMetadata | None = None
        self._notices: list[SafetyNotice] = []
        self._ignored_notices = 0
        self._request_id: str | None = None

    @property
    def terminated(self) -> bool:
        """True once ``stop`` or ``error`` has been fed."""
        return self._checker.terminated

    def feed(self, event: StreamEvent) -> None:
        """Fold the next event in.

        Raises:
            StreamOrderError: the event breaks an order rule (see the module docstring); the
                accumulated state is left as it was before the event.
        """
        name, value = self._checker._check(event)
        if name == "text_delta":
            if not isinstance(self._open, _TextBuilder) or value.new_block:
                self._open = _TextBuilder()
                self._blocks.append(self._open)
            if value.text:
                self._open.parts.append(value.text)
            if value.vendor_data:
                self._open.vendor_data.extend(value.vendor_data)
        elif name == "thinking_delta":
            if not isinstance(self._open, _ThinkingBuilder):
                self._open = _ThinkingBuilder()
                self._blocks.append(self._open)
            self._open.parts.append(value.text)
        elif name == "thinking_signature":
            if isinstance(self._open, _ThinkingBuilder):
                self._open.signature = bytes(value.signature)
            else:
                block = _ThinkingBuilder()
                block.signature = bytes(value.signature)
                self._blocks.append(block)
            self._open = None
        elif name == "redacted_thinking":
            self._blocks.append(_RedactedBuilder(bytes(value.data)))
            self._open = None
        elif name == "vendor_block":
            self._blocks.append(_VendorBlockBuilder(value))
            self._open = None
        elif name == "tool_call_start":
            call = _ToolBuilder(value.id, value.name, value.vendor_data)
            self._calls[value.id] = call
            self._blocks.append(call)
            self._open = None
        elif name == "tool_call_delta":
            self._calls[value.id].parts.append(value.arguments_fragment)
        elif name == "tool_call_done":
            self._calls[value.id].vendor_data.extend(value.vendor_data)
            self._calls[value.id].finish()
        elif name == "usage":
            self._usage = value
        elif name == "stop":
            self._stop = value
        elif name == "error":
            self._error = value
        elif name == "stream_start":
            self._request_id = value.provider_request_id
        elif name == "metadata":
            self._metadata = _merge_metadata(self._metadata, value)
        elif name == "safety_notice":
            if int(value.kind) in _SAFETY_KINDS:
                self._notices.append(value)
            else:
                self._ignored_notices += 1

    def result(self) -> AccumulatedResponse:
        """The response accumulated so far; may be called at any point and more than once.

        A stream that has not ended with ``stop`` or ``error`` gives ``complete=False`` and keeps
        every block that arrived; an open text or thinking block is included as it stands.
        """
        content: list[ContentBlock] = []
        unreplayable: list[int] = []
        errors: dict[str, str] = {}
        arguments: dict[str, str] = {}
        open_calls: list[str] = []
        for builder in self._blocks:
            if isinstance(builder, _ThinkingBuilder) and not builder.signature:
                unreplayable.append(len(content))
            if isinstance(builder, _ToolBuilder):
                arguments[builder.call_id] = "".join(builder.parts)
                if not builder.done:
                    open_calls.append(builder.call_id)
                    _try_partial(builder)
                elif builder.error is not None:
                    errors[builder.call_id] = builder.error
            content.append(builder.build())
        message = Message(
            role=Role.ASSISTANT,
            content=content,
            id=self._message_id,
            produced_by_model_id=self._model_id,
            produced_by_provider=self._provider,
        )
        return AccumulatedResponse(
            message=message,
            usage=self._usage,
            stop=self._stop,
            error=self._error,
            metadata=self._metadata,
            safety_notices=list(self._notices),
            ignored_safety_notices=self._ignored_notices,
            provider_request_id=self._request_id,
            complete=self._checker.terminated,
            unreplayable_blocks=unreplayable,
            tool_arguments=arguments,
            tool_call_errors=errors,
            open_tool_calls=open_calls,
        )


def _try_partial(builder: _ToolBuilder) -> None:
    """Parse the arguments of a call that was never closed, if what arrived parses."""
    try:
        builder.input = to_struct(parse_json_object("".join(builder.parts)))
    except InvalidValueError:
        builder.input = None


def accumulate(
    events: Iterable[StreamEvent],
    *,
    message_id: str | None = None,
    produced_by_model_id: str | None = None,
    produced_by_provider: str | None = None,
) -> AccumulatedResponse:
    """Fold a whole StreamEvent sequence (see :class:`StreamAccumulator`).

    Raises:
        StreamOrderError: an event breaks an order rule (naming its index and rule id).
        InvalidValueError: ``events`` is not iterable, or ``message_id`` /
            ``produced_by_model_id`` / ``produced_by_provider`` is not a string or None (rule
            ``value.wrong_type``).
    """
    if isinstance(events, (str, bytes)) or not hasattr(events, "__iter__"):
        raise InvalidValueError(
            f"events: expected an iterable of model.v1.StreamEvent, got {type(events).__name__}",
            rule="value.wrong_type",
        )
    acc = StreamAccumulator(
        message_id=message_id,
        produced_by_model_id=produced_by_model_id,
        produced_by_provider=produced_by_provider,
    )
    for event in events:
        acc.feed(event)
    return acc.result()
