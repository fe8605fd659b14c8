"""Transport limits of the reference server: message sizes and well-formed request bodies.

Every size bound the server enforces on the wire lives here (spec: "The wire protocol"; server
case C06): the maximum message size in both directions, the length-prefix check that refuses an
oversized request before its body is read, and the strict (upb) well-formedness check that runs
before betterproto2's lenient decoder.
"""

from __future__ import annotations

import logging
import re
import struct
from typing import Any, Final, TypeVar

import betterproto2
import grpclib.const
import grpclib.server
from google.protobuf import (  # type: ignore[import-untyped]
    message_factory,
)
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py import wire
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


def parse_size(text: str) -> int:
    """Parse a byte size: a plain integer (``1048576``) or one with a unit (``1MiB``, ``64MB``).

    Units: ``B``; ``KB``/``MB``/``GB`` (powers of 1000); ``KiB``/``MiB``/``GiB`` (powers of
    1024); case-insensitive.

    Raises:
        ValueError: not a size, zero, or above 4 GiB - 1 (the gRPC length prefix's maximum).
    """
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"invalid size {text!r}: expected bytes such as 1048576 or 1MiB")
    value = int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]
    if not 0 < value <= _MAX_LENGTH_PREFIX:
        raise ValueError(f"invalid size {text!r}: must be between 1 and {_MAX_LENGTH_PREFIX} bytes")
    return value


def _too_large(what: str, size: int, limit: int) -> GRPCError:
    return GRPCError(
        Status.RESOURCE_EXHAUSTED,
        f"{what} of {size} bytes exceeds the maximum message size of {limit} bytes",
    )


class LimitedCodec(wire.WireCodec):
    """The fast protobuf codec (:class:`protocol_py.wire.WireCodec`) with a maximum message
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
        """Serialize ``message``; RESOURCE_EXHAUSTED when it exceeds ``max_send``."""
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


async def receive_message(stream: grpclib.server.Stream[Any, Any], max_size: int) -> bytes:
    """Read the single request message body of a unary-request RPC.

    The 5-byte gRPC message prefix is read first, so an oversized request is refused from its
    length prefix before its body is read.

    Raises:
        GRPCError: INVALID_ARGUMENT for a missing or truncated message; UNIMPLEMENTED for a
            compressed one; RESOURCE_EXHAUSTED when the prefix announces more than
            ``max_size`` bytes.
    """
    raw = stream._stream
    meta = await raw.recv_data(5)
    if len(meta) < 5:
        raise GRPCError(Status.INVALID_ARGUMENT, "request message missing or truncated")
    compressed, length = struct.unpack(">?I", meta)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")
    if length > max_size:
        raise _too_large("request message", length, max_size)
    data = await raw.recv_data(length) if length else b""
    if len(data) != length:
        raise GRPCError(Status.INVALID_ARGUMENT, "request message truncated")
    return data


def decode_request(data: bytes, kind: type[_Req], strict: Any | None) -> _Req:
    """Decode one request body, refusing any that is not well-formed protobuf.

    betterproto2's parser is lenient (it reads corrupt bytes as a partly empty message), so
    the body is first parsed with ``strict``, protobuf's upb class for the same message (see
    :func:`strict_request_classes`); a ``DecodeError`` there (corrupt wire format, truncated
    field, invalid UTF-8 in a string, nesting beyond :data:`PROTOBUF_MAX_DEPTH` message levels,
    which is about 33 JSON levels inside a Struct since each object or array level costs
    three) is INVALID_ARGUMENT and nothing is applied. Unknown fields stay legal (forward
    compatibility).

    Raises:
        GRPCError: INVALID_ARGUMENT ``"malformed request: <Message> could not be decoded
            (<n> bytes)"``.
    """
    try:
        if strict is not None:
            strict.FromString(data)
        message, clean = wire.decode_checked(kind, data)
    except Exception as exc:  # DecodeError from upb, anything from the lenient parser
        why = ""
        if "MaxDepth" in str(exc):
            why = f": nested deeper than protobuf's limit of {PROTOBUF_MAX_DEPTH} message levels"
        raise GRPCError(
            Status.INVALID_ARGUMENT,
            f"malformed request: {kind.__name__} could not be decoded ({len(data)} bytes){why}",
        ) from None
    # clean and well-formed: well-typed by construction, so validation skips its type walk
    wire.mark_decoded(message, len(data), clean and strict is not None)
    return message
