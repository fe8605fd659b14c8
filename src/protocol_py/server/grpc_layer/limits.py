"""Transport limits of the reference server: message sizes and well-formed request bodies.

Every size bound the server enforces on the wire lives here (spec: "The wire protocol"): the
maximum message size in both directions, the length-prefix check that refuses an oversized
request before its body is read, and the strict (upb) well-formedness check that runs before
betterproto2's lenient decoder.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import struct
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

import betterproto2
import grpclib.const
import grpclib.server
from google.protobuf import (  # type: ignore[import-untyped]
    message_factory,
    unknown_fields,
)
from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py._compat import grpclib_private
from protocol_py.bounded_text import MAX_LISTED_ITEM_CHARS, bounded_message
from protocol_py.codec import metadata, wire, wire_gen
from protocol_py.codec.decode_memo import DecodeMemo, ListMatch, decode_messages_memo
from protocol_py.codec.field_merge import MAX_MERGE_FIELDS, MergeBudgetError
from protocol_py.codec.wire_gen import State
from protocol_py.rules.request_memo import (
    MAX_IMAGE_BYTES,
    keep_request_images,
    request_images,
)
from protocol_py.server.config_schema import fill_missing_values
from protocol_py.server.grpc_layer.large_body import receive_body
from protocol_py.server.grpc_layer.strict_parse import strict_parse
from protocol_py.server.offload import JobCancelled, release_in_steps
from protocol_py_gen.google.protobuf import Struct
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    CountTokensRequest,
    DescribeRequest,
    GetCapabilitiesRequest,
    RenderRequest,
    StreamCompletionRequest,
)

log = logging.getLogger("protocol_py.server")

DEFAULT_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
"""Default maximum message size in both directions, in bytes (64 MiB). grpcio's own default
receive limit is 4 MiB; clients expecting larger replies must raise theirs."""

_SIZE_RE: Final = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "ki": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "mi": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "gi": 1024**3,
}
_MAX_LENGTH_PREFIX: Final = 2**32 - 1

_Req = TypeVar("_Req", bound=betterproto2.Message)


def parse_size(text: str, *, maximum: int = _MAX_LENGTH_PREFIX) -> int:
    """Parse a byte size: a plain integer (``1048576``) or one with a unit (``1MiB``, ``64MB``).

    Units: ``B``; ``KB``/``MB``/``GB`` (powers of 1000); ``KiB``/``MiB``/``GiB`` (powers of
    1024); case-insensitive.

    Raises:
        ValueError: not a size, zero, or above ``maximum`` (default 4 GiB - 1, the gRPC
            length prefix's maximum).
    """
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"invalid size {text!r}: expected bytes such as 1048576 or 1MiB")
    value = int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]
    if not 0 < value <= maximum:
        raise ValueError(f"invalid size {text!r}: must be between 1 and {maximum} bytes")
    return value


def _too_large(what: str, size: int, limit: int) -> GRPCError:
    return GRPCError(
        Status.RESOURCE_EXHAUSTED,
        f"{what} of {size} bytes exceeds the maximum message size of {limit} bytes "
        "(bound --max-message-size)",
    )


@dataclass(frozen=True, slots=True)
class EncodedReply:
    """A reply already serialized (protobuf wire bytes): :class:`LimitedCodec` sends ``data``
    as is."""

    data: bytes


def encode_reply(message: betterproto2.Message, max_send: int) -> EncodedReply:
    """``message`` serialized ahead of sending, so its size is known (for
    :class:`protocol_py.server.grpc_layer.reply_budget.ReplyBudget`) and the message can be dropped.

    Raises:
        GRPCError: RESOURCE_EXHAUSTED when it exceeds ``max_send`` bytes.
    """
    data = wire.encode(message)
    if len(data) > max_send:
        raise _too_large("reply message", len(data), max_send)
    return EncodedReply(data)


def reply_too_large(size: int, limit: int) -> GRPCError:
    """The RESOURCE_EXHAUSTED error of a reply of ``size`` bytes over ``limit`` (bytes), as
    :func:`encode_reply` raises it."""
    return _too_large("reply message", size, limit)


def top_level_text_length(message: betterproto2.Message) -> int:
    """Characters and bytes of ``message``'s top-level ``string`` and ``bytes`` fields (a
    Render reply's text), a lower bound of its encoded size found without walking nested
    messages: a reply this large has its exact size taken before it is encoded
    (:meth:`protocol_py.server.grpc_layer.reply_budget.ReplyBudget.reserve`)."""
    total = 0
    for field in dataclasses.fields(cast(Any, message)):
        value = getattr(message, field.name, None)
        if isinstance(value, str | bytes):
            total += len(value)
    return total


def top_level_text_is_ascii(message: betterproto2.Message) -> bool:
    """Whether every top-level ``string`` field of ``message`` is ASCII (a constant-time check
    per string): then :func:`protocol_py.codec.wire.encoded_size` copies none of them."""
    return all(
        value.isascii()
        for field in dataclasses.fields(cast(Any, message))
        if isinstance(value := getattr(message, field.name, None), str)
    )


class LimitedCodec(wire.WireCodec):
    """The fast protobuf codec (:class:`protocol_py.codec.wire.WireCodec`) with a maximum message
    size in both directions.

    Args:
        max_receive: Largest accepted incoming message, in bytes.
        max_send: Largest outgoing message, in bytes.

    ``encode`` raises ``GRPCError(RESOURCE_EXHAUSTED)`` instead of producing an oversized reply
    (nothing is sent, so a reply is never truncated); ``decode`` raises it for an oversized
    request (the message was already buffered: the adapter's own RPCs check the length prefix
    earlier, see :class:`ModelServer`).
    """

    def __init__(self, max_receive: int, max_send: int) -> None:
        self.max_receive = max_receive
        self.max_send = max_send

    def encode(self, message: Any, message_type: Any) -> bytes:
        """Serialize ``message`` (an :class:`EncodedReply` is sent as is); RESOURCE_EXHAUSTED
        when it exceeds ``max_send``."""
        if isinstance(message, EncodedReply):
            data = message.data
        else:
            data = super().encode(message, message_type)
        if len(data) > self.max_send:
            raise _too_large("reply message", len(data), self.max_send)
        return data

    def decode(self, data: bytes, message_type: Any) -> Any:
        """Parse ``data``; RESOURCE_EXHAUSTED when it exceeds ``max_receive``."""
        if len(data) > self.max_receive:
            raise _too_large("request message", len(data), self.max_receive)
        return super().decode(data, message_type)


# -- config validation -----------------------------------------------------------------------

PROTOBUF_MAX_DEPTH: Final = 100
"""protobuf's (upb's) default recursion limit when parsing, in message levels."""

REQUEST_TYPES: Final[tuple[type[betterproto2.Message], ...]] = (
    GetCapabilitiesRequest,
    ConfigureRequest,
    StreamCompletionRequest,
    CountTokensRequest,
    RenderRequest,
    DescribeRequest,
)
"""The ModelService request messages (package ``model.v1``) checked for well-formedness."""


def strict_request_classes(pool: Any) -> dict[type[betterproto2.Message], Any]:
    """Map each of :data:`REQUEST_TYPES` to protobuf's (upb) class for the same message in
    ``pool``; a message missing from the pool is left out (and logged)."""
    classes: dict[type[betterproto2.Message], Any] = {}
    for kind in REQUEST_TYPES:
        name = f"model.v1.{kind.__name__}"
        try:
            classes[kind] = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        except KeyError:
            log.warning("descriptor image has no %s: its requests are decoded leniently", name)
    return classes


async def receive_message(
    stream: grpclib.server.Stream[Any, Any],
    max_size: int,
    on_length: Callable[[int], Awaitable[None]] | None = None,
) -> bytes:
    """Read the single request message body of a unary-request RPC.

    The 5-byte gRPC message prefix is read first, so an oversized request is refused from its
    length prefix before its body is read; ``on_length`` (optional) is then awaited with the
    announced length in bytes before the body is read (the server's memory budget reserves
    the body there, and its exception refuses the call).

    Raises:
        GRPCError: INVALID_ARGUMENT for a missing or truncated message; UNIMPLEMENTED for a
            compressed one; RESOURCE_EXHAUSTED when the prefix announces more than
            ``max_size`` bytes.
    """
    raw = grpclib_private.server_h2_stream(stream)
    meta = await _recv_exactly(raw, 5, "request message missing or truncated")
    compressed, length = struct.unpack(">?I", meta)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")
    if length > max_size:
        raise _too_large("request message", length, max_size)
    if on_length is not None:
        await on_length(length)
    if not length:
        return b""
    return await _recv_exactly(
        raw, length, f"request message truncated: the length prefix announces {length} bytes"
    )


async def _recv_exactly(raw: Any, size: int, problem: str) -> bytes:
    """``size`` bytes of the request body (a large one assembled piece by piece as it
    arrives: :func:`~protocol_py.server.grpc_layer.large_body.receive_body`); INVALID_ARGUMENT
    ``problem`` when the stream ends first (grpclib's buffer raises AssertionError "Received
    less data than expected")."""
    try:
        data = await receive_body(raw.recv_data, size)
    except AssertionError:
        data = b""
    if len(data) != size:
        raise GRPCError(Status.INVALID_ARGUMENT, problem)
    return data


_WIRE_TYPES: Final = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "group", 5: "32-bit"}


def _expected_wire_type(field: Any) -> str:
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING) or (
        field.type == FieldDescriptor.TYPE_BYTES
    ):
        return "length-delimited"
    if field.type in (
        FieldDescriptor.TYPE_DOUBLE,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return "64-bit"
    if field.type in (
        FieldDescriptor.TYPE_FLOAT,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return "32-bit"
    return "varint"


def wrong_wire_type(message: Any) -> str | None:
    """The first field of a parsed upb ``message`` (at any depth) that arrived with a wire
    type its declaration does not allow, as ``"<path> has wire type <x>, expected <y>"``;
    None when there is none.

    upb keeps such a field as an unknown field (with a known field number), where
    betterproto2 would read it as a value of the wrong Python type (``model_id`` as an int).
    Truly unknown field numbers stay legal (forward compatibility). Costs one copy of the
    message in C when nothing is unknown; walks the message tree only otherwise.
    """
    copy = type(message)()
    copy.CopyFrom(message)
    copy.DiscardUnknownFields()
    if copy.ByteSize() == message.ByteSize():
        return None
    stack: list[tuple[str, Any]] = [(message.DESCRIPTOR.name, message)]
    while stack:
        path, current = stack.pop()
        known = current.DESCRIPTOR.fields_by_number
        for unknown in unknown_fields.UnknownFieldSet(current):
            field = known.get(unknown.field_number)
            if field is not None:
                got = _WIRE_TYPES.get(unknown.wire_type, str(unknown.wire_type))
                return f"{path}.{field.name} has wire type {got}, expected " + (
                    f"{_expected_wire_type(field)}"
                )
        for field, value in current.ListFields():
            if field.type != FieldDescriptor.TYPE_MESSAGE:
                continue
            where = f"{path}.{field.name}"
            if field.message_type.GetOptions().map_entry:
                if field.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                    stack.extend((f"{where}[{k!r}]", v) for k, v in value.items())
            elif field.is_repeated:
                stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
            else:
                stack.append((where, value))
    return None


_STRUCT_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(cls: type) -> dict[str, type]:
    """Field name -> message class of the message fields of ``cls`` (for a map field, its value
    class when that is a message)."""
    if not (isinstance(cls, type) and issubclass(cls, betterproto2.Message)):
        return {}
    children: dict[str, type] = {}
    for field in metadata.fields(cls).values():
        child = field.cls if field.map_value is None else field.map_value.cls
        if isinstance(child, type) and issubclass(child, betterproto2.Message):
            children[field.name] = child
    return children


def _struct_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` whose values can hold a ``google.protobuf.Struct`` (directly or
    at any depth; cycles such as ContentBlock -> ToolResultBlock -> ContentBlock included)."""
    cached = _STRUCT_FIELDS.get(cls)
    if cached is not None:
        return cached
    reachable: set[type] = set()
    pending = [cls]
    while pending:
        current = pending.pop()
        if current not in reachable:
            reachable.add(current)
            pending.extend(_children(current).values())
    holds: set[type] = {Struct}
    changed = True
    while changed:
        changed = False
        for current in reachable - holds:
            if any(child in holds for child in _children(current).values()):
                holds.add(current)
                changed = True
    fields = tuple(name for name, child in _children(cls).items() if child in holds)
    _STRUCT_FIELDS[cls] = fields
    return fields


def fill_struct_gaps(message: betterproto2.Message) -> None:
    """Give every Struct map entry decoded without a value an empty Value, at any depth of
    ``message``, in place (:func:`~protocol_py.server.config_schema.fill_missing_values`).

    betterproto2 decodes such an entry (legal protobuf: protobuf's JSON mapping reads it as
    null) as None, which it then cannot re-encode (TypeError). Only fields that can hold a
    Struct are walked (for a StreamCompletionRequest: each content block's tool use and tool
    result, the tools' input schemas, ``provider_options``).
    """
    stack: list[Any] = [message]
    while stack:
        current = stack.pop()
        if isinstance(current, Struct):
            fill_missing_values(current)
            continue
        for name in _struct_fields(type(current)):
            value = getattr(current, name, None)
            if isinstance(value, list):
                stack.extend(v for v in value if v is not None)
            elif value is not None:
                stack.append(value)


def decode_request(
    data: bytes,
    kind: type[_Req],
    strict: Any | None,
    precheck: Callable[[Any], None] | None = None,
    state: State | None = None,
) -> _Req:
    """Decode one request body, refusing any that is not well-formed protobuf.

    ``precheck``, when given, is called with the fast decoder's message before upb's parse
    (it raises ``GRPCError`` to refuse the request): upb's parse is one C call, and for a map
    of a million entries it held the interpreter for seconds, so a bound on the decoded
    message (Configure's ``MAX_CONFIG_ENTRIES``, docs/decisions.md#d35) is applied first.

    betterproto2's parser is lenient (it reads corrupt bytes as a partly empty message), so
    the body is first parsed with ``strict``, protobuf's upb class for the same message (see
    :func:`strict_request_classes`; a large body without one long hold of the interpreter:
    :func:`~protocol_py.server.grpc_layer.strict_parse.strict_parse`); a ``DecodeError`` there
    (corrupt
    wire format, truncated field, invalid UTF-8 in a string, nesting beyond
    :data:`PROTOBUF_MAX_DEPTH` message levels, which is about 33 JSON levels inside a Struct
    since each object or array level costs three) is INVALID_ARGUMENT and nothing is applied;
    so is a known field sent with the wrong wire type (:func:`wrong_wire_type`). Unknown
    fields stay legal (forward compatibility). A Struct map entry without a value becomes
    JSON null (:func:`fill_struct_gaps`). The fast decoder creates at most
    :data:`protocol_py.codec.wire.MAX_DECODED_OBJECTS` repeated elements and map entries
    (RESOURCE_EXHAUSTED past it, as for an oversized message: the body is well-formed but
    exceeds a size bound), before upb's parse; a body it does not cover is parsed by upb and
    betterproto2 (after the wire-type check) only up to :data:`MAX_FALLBACK_BYTES`.

    ``state`` (optional) is the fast decode's state: a smaller budget of elements (the server's
    memory budget sets one, :mod:`protocol_py.server.grpc_layer.memory_budget`), and afterwards
    the count of elements created. Past a budget below
    :data:`~protocol_py.codec.wire.MAX_DECODED_OBJECTS`, ``wire.DecodeBudgetError`` propagates
    (the caller names its own bound).

    Raises:
        GRPCError: INVALID_ARGUMENT ``"malformed request: <Message> could not be decoded
            (<n> bytes)"``, followed by the reason where known; RESOURCE_EXHAUSTED ``"request
            too large: <Message> (<n> bytes) holds more than <N> repeated elements ..."``.
    """
    what = f"malformed request: {kind.__name__} could not be decoded ({len(data)} bytes)"
    failure: Exception | None = None
    fell_back = False
    images: list[bytes | None] | None = None
    listed: ListMatch | None = None
    unchecked: bytes | None = None  # the body upb checks, when not all of ``data``
    try:  # first: the budget bounds upb's parse too (about 40 bytes per tiny message)
        # messages seen before are not decoded again; under a reduced element budget (the
        # server's memory budget is short of room) the body is decoded whole, which stops at
        # the budget without first splitting every message out of it. A budget of at least
        # what the body can hold (an element takes 2 bytes or more: the memory budget's own
        # bound for a body under 2 MB) is not reduced.
        if kind is StreamCompletionRequest and (
            state is None or state.limit >= min(wire.MAX_DECODED_OBJECTS, len(data) // 2 + 1)
        ):
            pieces: list[bytes] = []  # the body outside its messages, from the same scan
            # a body that starts with its conversation's kept messages is scanned after them
            images = MESSAGE_MEMO.images(data, _MESSAGES_FIELD, MAX_IMAGE_BYTES, pieces)
            rest = b"".join(pieces) if images else None
            del pieces
            keys: list[bytes] = []
            listed = ListMatch()
            message, clean, exact = decode_messages_memo(
                kind,
                data,
                "messages",
                MESSAGE_MEMO,
                images,
                keys=keys,
                state=state,
                rest=rest,
                listed=listed,
            )
            if strict is not None and exact and listed.run and images is not None and rest:
                # upb checks what no earlier body that passed it holds (see _unchecked)
                unchecked = _unchecked(rest, images, listed.run)
            del rest
            if images is not None:  # the content keys go along for the translation cache
                images = wire.MessageImages(images, keys)
        else:
            message, clean, exact = wire.decode_report(kind, data, fallback=False, state=state)
    except MergeBudgetError:
        raise GRPCError(Status.RESOURCE_EXHAUSTED, _too_many_to_merge(kind, len(data))) from None
    except wire.DecodeBudgetError as exc:
        if exc.limit < wire.MAX_DECODED_OBJECTS:
            raise
        raise GRPCError(Status.RESOURCE_EXHAUSTED, _too_many(kind, len(data))) from None
    except (wire.FallbackError, UnicodeDecodeError) as exc:
        if len(data) > MAX_FALLBACK_BYTES:  # no unbudgeted parse of a large body, even upb's
            raise GRPCError(Status.INVALID_ARGUMENT, what + _not_canonical(exc)) from None
        fell_back = True
    if precheck is not None and not fell_back:
        try:
            precheck(message)
        except GRPCError as exc:
            # refused: the decoded message is freed here, a step at a time (it would
            # otherwise go with the exception's frames, wherever that is dropped)
            traceback.clear_frames(exc.__traceback__)
            held = [message]
            del message
            release_in_steps(held)
            raise
    try:
        # after an exact fast decode nothing reads upb's result (no wrong wire type to look
        # for), so large runs of small entries may be parsed apart, in pieces
        runs = not fell_back and exact
        parsed = None
        if strict is not None and unchecked is not None:  # set only after an exact decode
            try:
                strict_parse(strict, unchecked, runs=runs)  # of a part: nothing reads it
            except JobCancelled:
                raise
            except Exception:  # refused: the error upb gives for the whole body, below
                unchecked = None
        if strict is not None and unchecked is None:
            parsed = strict_parse(strict, data, runs=runs)
    except JobCancelled:  # the worker step was cancelled between pieces
        raise
    except Exception as exc:  # DecodeError from upb
        raise GRPCError(Status.INVALID_ARGUMENT, what + _why(exc)) from None
    if listed is not None:  # the body passed: its list (if any) is the conversation's last
        listed.keep()
    if fell_back:  # checks the wire types itself, before any parse
        message, clean, exact, failure = _fallback_decode(data, kind, parsed, what)
        parsed = None
    # a wrong wire type is reported first; it can only be there when the fast decode was not
    # exact (every field known, with its wire type), so an exact decode skips the walk
    mismatch = wrong_wire_type(parsed) if parsed is not None and not exact else None
    if mismatch is not None:
        raise GRPCError(
            Status.INVALID_ARGUMENT, f"{what}: {bounded_message(mismatch, MAX_LISTED_ITEM_CHARS)}"
        )
    if failure is not None:
        raise GRPCError(Status.INVALID_ARGUMENT, what + _why(failure)) from None
    if not clean:  # a clean decode met no map entry without its value: no Struct gaps
        fill_struct_gaps(message)
    elif exact and isinstance(message, StreamCompletionRequest):
        # one scan, shared: translation cache keys (adapters) and validation memo keys (only a
        # clean request's are used); an image over MAX_IMAGE_BYTES is None, never copied
        if images is None:
            images = request_images(data)
        wire.keep_images(message, "messages", data, images)
        if strict is not None:
            keep_request_images(message, data, images)
    # clean and well-formed: well-typed by construction, so validation skips its type walk
    wire.mark_decoded(message, len(data), clean and strict is not None)
    return message


def _unchecked(rest: bytes, images: Sequence[bytes | None], run: int) -> bytes | None:
    """The part of a StreamCompletionRequest body that upb must still check when its first
    ``run`` messages were matched by the decode memo's list index: the body outside its
    messages (``rest``) plus every message after the run, each under its shortest tag and
    length. A matched message equals, outside its id value, a message of an earlier body that
    passed upb's check, and its id decoded as UTF-8 (the only rule upb applies to a string), so
    the whole body passes exactly when this part does (protobuf fields are checked one by
    one, in any order; a message's nesting depth is the same here). None when an image is
    missing (the whole body is checked)."""
    tag = wire_gen.varint_bytes(_MESSAGES_NUMBER << 3 | 2)
    parts = [rest]
    for image in images[run:]:
        if image is None:
            return None
        parts += (tag, wire_gen.varint_bytes(len(image)), image)
    return b"".join(parts)


_MESSAGES_NUMBER: Final = metadata.field_number(StreamCompletionRequest, "messages")


MESSAGE_MEMO: Final = DecodeMemo()
"""The server's decoded StreamCompletionRequest messages, keyed by their wire image without
the id (:mod:`protocol_py.codec.decode_memo`; ``decode_memo.MAX_ENTRIES`` messages,
``decode_memo.MAX_BYTES`` accounted bytes): a conversation resent turn after turn, under the
same or new message ids, decodes only its new messages."""

_MESSAGES_FIELD: Final = metadata.field_number(StreamCompletionRequest, "messages")
"""Field number of ``StreamCompletionRequest.messages``."""


MAX_FALLBACK_BYTES: Final = 64 * 1024
"""Largest request body, in bytes (64 KiB), parsed by upb and betterproto2 when the fast
decoder does not cover it (malformed, a known field with the wrong wire type, or legal protobuf
no ordinary encoder writes for a large request: an over-long tag, a group, nesting beyond
:data:`protocol_py.codec.wire.MAX_FAST_DEPTH` levels). Neither parser has an object budget
(:data:`protocol_py.codec.wire.MAX_DECODED_OBJECTS`; upb takes about 40 bytes per two-byte empty
message): a larger such body is refused (INVALID_ARGUMENT) without being parsed."""


def _too_many(kind: type[betterproto2.Message], size: int) -> str:
    return (
        f"request too large: {kind.__name__} ({size} bytes) holds more than "
        f"{wire.MAX_DECODED_OBJECTS} repeated elements and map entries (messages, content "
        "blocks, Struct fields and list values, strings, unknown fields; bound "
        "MAX_DECODED_OBJECTS)"
    )


def _too_many_to_merge(kind: type[betterproto2.Message], size: int) -> str:
    return (
        f"request too large: {kind.__name__} ({size} bytes) sends a singular message field or "
        f"a oneof more than once and holds more than {MAX_MERGE_FIELDS} fields to merge "
        "(bound MAX_MERGE_FIELDS)"
    )


def _fallback_decode(
    data: bytes, kind: type[_Req], parsed: Any | None, what: str
) -> tuple[_Req, bool, bool, Exception | None]:
    """``(message, clean, exact, failure)`` of a body of at most :data:`MAX_FALLBACK_BYTES`
    the fast decoder does not cover: a known field with a wrong wire type is refused first
    (from upb's parse), betterproto2 parses the rest (after protobuf's merge of a singular
    message field or oneof sent more than once, :func:`protocol_py.codec.wire.parse_merged`)."""
    mismatch = wrong_wire_type(parsed) if parsed is not None else None
    if mismatch is not None:
        raise GRPCError(
            Status.INVALID_ARGUMENT, f"{what}: {bounded_message(mismatch, MAX_LISTED_ITEM_CHARS)}"
        )
    try:
        return wire.parse_merged(kind, data), False, False, None
    except MergeBudgetError:
        raise GRPCError(Status.RESOURCE_EXHAUSTED, _too_many_to_merge(kind, len(data))) from None
    except Exception as exc:  # anything from the lenient parser
        return kind(), False, False, exc


def _not_canonical(exc: Exception) -> str:
    found = (
        "invalid UTF-8 in a string field"
        if isinstance(exc, UnicodeDecodeError)
        else (
            "a truncated field, a known field with the wrong wire type, an over-long tag, a group "
            f"or nesting deeper than {wire.MAX_FAST_DEPTH} message levels"
        )
    )
    return (
        f": not canonical well-formed protobuf ({found}); a body over {MAX_FALLBACK_BYTES} "
        "bytes must be (bound MAX_FALLBACK_BYTES)"
    )


def _why(exc: Exception) -> str:
    if "MaxDepth" in str(exc):
        return f": nested deeper than protobuf's limit of {PROTOBUF_MAX_DEPTH} message levels"
    return ""
