"""A grpclib client for ModelService: the kernel side of the protocol, for tools and tests.

:class:`ModelClient` connects to ``host:port`` (or ``unix:PATH``; TLS optional), validates the
provider's Capabilities (:func:`protocol_py.rules.capabilities.validate_capabilities`), streams raw
events
(:meth:`ModelClient.stream`) or folds a whole completion (:meth:`ModelClient.complete`) into the
canonical assistant Message with its usage, stop and exact cost: the usage event is priced with
the tier matching its receipt time and prompt size (:func:`protocol_py.rules.cost.cost`).
Deadlines
are per call (``timeout`` in seconds); cancelling the awaiting task, or leaving ``stream()``
early, cancels the RPC, which closes the provider's upstream request.

Every request :meth:`ModelClient.stream` sends states the kernel's protocol version
(``kernel_protocol_version``, :data:`~protocol_py.version.PROTOCOL_VERSION` unless the request sets
one) and, once GetCapabilities has answered, carries nothing the plugin's version cannot decode
(:func:`protocol_py.rules.version_gate.request_for_plugin`; docs/decisions.md#d30).

Transport failures raise :class:`grpclib.exceptions.GRPCError` (or ``OSError`` /
``ConnectionError`` when the server cannot be reached, ``ssl.SSLError`` on a TLS mismatch);
:meth:`ModelClient.connection_hint` names the likely cause of such a failure. In-band failures
arrive as the ``error`` of a :class:`Completion`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from ssl import SSLContext
from types import TracebackType
from typing import Any

from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.exceptions import StreamTerminatedError

from protocol_py import _compat
from protocol_py._compat import grpclib_private
from protocol_py.client.hints import connection_hint
from protocol_py.client.message_reader import MessageReader
from protocol_py.codec import wire
from protocol_py.codec.structs import to_struct
from protocol_py.codec.wire import WireCodec
from protocol_py.errors import InvalidValueError, ValidationError, errors_only
from protocol_py.rules.accumulate import AccumulatedResponse, StreamAccumulator
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py.rules.cost import CostBreakdown, cost
from protocol_py.rules.version_gate import request_for_plugin
from protocol_py.transport.addresses import unix_socket_path
from protocol_py.transport.tls import ALPN_PROTOCOLS, CERT_SAN_DNS
from protocol_py.version import PROTOCOL_MAJOR, PROTOCOL_VERSION
from protocol_py_gen.common.v1 import ProducerRef
from protocol_py_gen.content.v1 import Message
from protocol_py_gen.model.v1 import (
    Capabilities,
    ConfigureRequest,
    CountTokensRequest,
    CountTokensResponse,
    DescribeRequest,
    GetCapabilitiesRequest,
    ModelError,
    ModelServiceStub,
    ModelSpec,
    RenderRequest,
    RenderResponse,
    Stop,
    StreamCompletionRequest,
    StreamEvent,
    Usage,
)

log = logging.getLogger(__name__)

_HOST_RE = re.compile(r"[A-Za-z0-9._-]+")
_PORT_RE = re.compile(r"[0-9]{1,5}")


def parse_address(address: str, *, default_port: int = 50051) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6; a bare host takes ``default_port``).

    The host is a DNS name or IPv4 address (ASCII letters, digits, ``.``, ``-``, ``_``) or, in
    brackets, an IPv6 address (an unbracketed IPv6 address is refused: its colons are ambiguous).
    The port is ASCII digits, 1-65535 (0, "any free port", means nothing to a client).

    Returns:
        ``(host, port)``; the host without brackets.

    Raises:
        InvalidValueError: the address is not a string, or its host or port is malformed; the
            message quotes the address.
    """
    if not isinstance(address, str):
        raise InvalidValueError(
            f"invalid address {address!r}: expected a string 'host:port'", rule="address.type"
        )

    def bad(rule: str, why: str) -> InvalidValueError:
        return InvalidValueError(f"invalid address {address!r}: {why}", rule=f"address.{rule}")

    text = address.strip()
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed:
            raise bad("host", "IPv6 address without a closing ']'")
        if rest and not rest.startswith(":"):
            raise bad("host", "unexpected text after ']' (expected ':port')")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad("host", "not an IPv6 address in brackets") from None
        port_text: str | None = rest[1:] if rest else None
    else:
        if text.count(":") > 1:
            raise bad("host", "an IPv6 address must be written in brackets, e.g. [::1]:50051")
        host, colon, after = text.partition(":")
        port_text = after if colon else None
        if not host:
            raise bad("host", "empty host")
        if _HOST_RE.fullmatch(host) is None:
            raise bad("host", "the host may hold only ASCII letters, digits, '.', '-' and '_'")
    if port_text is None:
        return host, default_port
    if _PORT_RE.fullmatch(port_text) is None or not 0 < int(port_text) < 65536:
        raise bad("port", "port must be ASCII digits, an integer in 1..65535")
    return host, int(port_text)


def buffered_events(call: Any, taken: bytes = b"") -> list[StreamEvent]:
    """The complete StreamEvent messages a grpclib client stream received but had not yet
    delivered when its connection was terminated (read from grpclib 0.4's stream buffer, after
    ``taken``: bytes a :class:`~protocol_py.client.message_reader.MessageReader` already took from
    it;
    empty when there are none or the buffer cannot be read). A partial message is dropped."""
    try:
        buffer = grpclib_private.call_h2_stream(call).buffer
        data = taken + b"".join(bytes(chunk.data) for chunk in grpclib_private.buffer_acked(buffer))
        unacked = grpclib_private.buffer_unacked(buffer)
        while not unacked.empty():
            data += unacked.get_nowait().data
    except Exception:  # grpclib internals changed: nothing to salvage
        return []
    events: list[StreamEvent] = []
    offset = 0
    while len(data) - offset >= 5:
        length = int.from_bytes(data[offset + 1 : offset + 5], "big")
        if data[offset] != 0 or len(data) - offset - 5 < length:
            break
        try:
            events.append(wire.decode(StreamEvent, data[offset + 5 : offset + 5 + length]))
        except Exception:  # a corrupt message: stop, keep what decoded
            break
        offset += 5 + length
    return events


def _require(request: object, kind: type[Any], what: str) -> None:
    """Raise InvalidValueError unless ``request`` is a ``kind`` message."""
    if not isinstance(request, kind):
        raise InvalidValueError(
            f"{what}: expected a {kind.__name__}, got {type(request).__name__}",
            rule="request.type",
        )


@dataclass(slots=True)
class Completion:
    """One accumulated completion.

    Attributes:
        message: The canonical assistant Message (a new ULID as id, docs/decisions.md#d16).
        usage: The usage event, or None.
        stop: The stop event, or None (a failed or incomplete stream).
        error: The in-band ModelError, or None.
        cost: The exact cost of ``usage`` (tier matched at receipt time), or None without
            usage or without the model's pricing.
        received_at: When the usage event arrived (UTC), the time the cost was priced at.
        response: The full accumulation (metadata, safety notices, completeness, ...).
        events: Number of events received.
    """

    message: Message
    usage: Usage | None
    stop: Stop | None
    error: ModelError | None
    cost: CostBreakdown | None
    received_at: datetime | None
    response: AccumulatedResponse
    events: int


class ModelClient:
    """A ModelService client over one HTTP/2 connection (grpclib ``Channel``).

    Use as an async context manager, or call :meth:`close`::

        async with ModelClient.connect("127.0.0.1:50051") as client:
            caps = await client.get_capabilities()
            result = await client.complete(request, timeout=30)
    """

    def __init__(self, channel: Channel) -> None:
        _compat.install()  # the dependency patches (protocol_py._compat), once per process
        self.channel = channel
        self.stub = ModelServiceStub(channel)
        self._capabilities: Capabilities | None = None
        self._provider_name: str | None = None
        self.address = ""
        """The address given to :meth:`connect` (empty for a client made from a channel)."""
        self.tls = False
        """Whether the connection uses TLS."""

    def connection_hint(self, exc: BaseException) -> str | None:
        """The likely cause of ``exc``, a failure of this client's connection, in one sentence
        (TLS against a plaintext server, an untrusted certificate, nothing listening, a
        connection lost before any answer), or None
        (:func:`protocol_py.client.hints.connection_hint`)."""
        answered = self._capabilities is not None or self._provider_name is not None
        return connection_hint(exc, self.address, tls=self.tls, answered=answered)

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        ssl: SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ModelClient:
        """A client for ``host:port`` or a unix socket ``unix:PATH`` / ``unix:///ABS/PATH``
        (the connection opens lazily, on the first call).

        Args:
            address: Where the server listens.
            ssl: Connect with TLS using this client context (see :mod:`protocol_py.transport.tls`);
                ALPN ``h2`` is set on it. None: plaintext.
            server_hostname: The name checked against the server's certificate (default: the
                host; ``localhost`` over a unix socket).

        Raises:
            InvalidValueError: a malformed address.
        """
        path = unix_socket_path(address)
        config = None
        if ssl is not None:
            ssl.set_alpn_protocols(list(ALPN_PROTOCOLS))
            name = server_hostname or (CERT_SAN_DNS if path is not None else None)
            config = Configuration(ssl_target_name_override=name)
        if path is not None:
            client = cls(Channel(path=path, ssl=ssl, config=config, codec=WireCodec()))
        else:
            host, port = parse_address(address)
            client = cls(Channel(host, port, ssl=ssl, config=config, codec=WireCodec()))
        client.address, client.tls = address, ssl is not None
        return client

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.channel.close()

    async def get_capabilities(self, *, timeout: float | None = None) -> Capabilities:  # noqa: ASYNC109
        """GetCapabilities, validated (and cached for :meth:`complete`'s pricing).

        Raises:
            ValidationError: the provider's Capabilities break one or more rules.
            GRPCError: a transport-level failure.
        """
        response = await self.stub.get_capabilities(GetCapabilitiesRequest(), timeout=timeout)
        caps = response.capabilities or Capabilities()
        violations = errors_only(validate_capabilities(caps))
        if violations:
            raise ValidationError(violations, "provider capabilities")
        self._capabilities = caps
        return caps

    def _peer_is_newer(self) -> bool:
        """Whether the plugin's Capabilities.protocol_version is a newer minor of our major:
        its streams are then read by the forward-compatibility rules (an unknown stop reason
        is END_TURN not affirmed, an unknown error kind goes by its retryable flag, an unknown
        event kind is ignored; docs/forward-compatibility.md)."""
        caps = self._capabilities
        if caps is None:
            return False
        major, _, minor = caps.protocol_version.partition(".")
        ours = PROTOCOL_VERSION.partition(".")[2]
        return major == str(PROTOCOL_MAJOR) and minor.isdigit() and int(minor) > int(ours)

    async def describe(self, *, timeout: float | None = None) -> ProducerRef:  # noqa: ASYNC109
        """Describe: the plugin build's identity with its protocol version."""
        response = await self.stub.describe(DescribeRequest(), timeout=timeout)
        producer = response.producer or ProducerRef()
        self._provider_name = producer.name
        return producer

    async def configure(self, config: Mapping[str, Any], *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Configure with a JSON object (``GRPCError(INVALID_ARGUMENT)`` lists every error)."""
        await self.stub.configure(ConfigureRequest(config=to_struct(config)), timeout=timeout)

    async def count_tokens(
        self,
        request: CountTokensRequest,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> CountTokensResponse:
        """CountTokens: input tokens and how they were counted.

        Raises:
            InvalidValueError: ``request`` is not a CountTokensRequest.
        """
        _require(request, CountTokensRequest, "count_tokens")
        return await self.stub.count_tokens(request, timeout=timeout)

    async def render(
        self,
        request: RenderRequest,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> RenderResponse:
        """Render one of the plugin's payloads.

        Raises:
            InvalidValueError: ``request`` is not a RenderRequest.
        """
        _require(request, RenderRequest, "render")
        return await self.stub.render(request, timeout=timeout)

    async def model_spec(self, model_id: str) -> ModelSpec | None:
        """The ModelSpec of ``model_id`` from the (cached) Capabilities, or None."""
        caps = self._capabilities or await self.get_capabilities()
        return next((m for m in caps.models if m.id == model_id), None)

    async def stream(
        self,
        request: StreamCompletionRequest,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> AsyncIterator[StreamEvent]:
        """StreamCompletion's raw events. Leaving the loop early cancels the RPC.

        A stream that ended in-band (its last event a ``stop`` or an ``error``,
        docs/decisions.md#d12) is reported as it was sent even when the connection goes right after
        it: the server's GOAWAY at shutdown makes grpclib fail every open stream at once, dropping
        events it had already received; those are read from the stream's buffer and yielded, so a
        shutdown shows as the server's in-band TRANSIENT "server shutting down" error, not as a
        lost connection.

        Raises:
            GRPCError: a transport-level failure (DEADLINE_EXCEEDED when ``timeout`` passes).
            StreamTerminatedError: the connection was lost before the stream ended in-band.
            asyncio.TimeoutError: the deadline passed while waiting for an event.
            InvalidValueError: ``request`` is not a StreamCompletionRequest.
        """
        _require(request, StreamCompletionRequest, "stream")
        request = self._outgoing(request)
        last: StreamEvent | None = None
        salvaged: list[StreamEvent] = []
        try:
            async with self.stub.channel.request(
                "/model.v1.ModelService/StreamCompletion",
                Cardinality.UNARY_STREAM,
                StreamCompletionRequest,
                StreamEvent,
                timeout=timeout,
            ) as call:
                await call.send_message(request, end=True)
                reader = MessageReader(call)  # whole messages received, in bulk
                try:
                    while events := await reader.batch():
                        for event in events:
                            last = event
                            yield event
                except StreamTerminatedError:
                    salvaged = buffered_events(call, reader.leftover)
                    raise
        except StreamTerminatedError:
            for event in salvaged:
                last = event
                yield event
            if last is None or (last.stop is None and last.error is None):
                raise

    def _outgoing(self, request: StreamCompletionRequest) -> StreamCompletionRequest:
        """The request as sent: ``kernel_protocol_version`` filled in when absent, and, when the
        plugin's Capabilities are known, vendor blocks removed for a plugin below 1.2 (a
        shallow copy either way; the caller's request is not modified)."""
        if request.kernel_protocol_version is None:
            request = dataclasses.replace(request, kernel_protocol_version=PROTOCOL_VERSION)
        caps = self._capabilities
        if caps is not None:
            request, removed = request_for_plugin(request, caps.protocol_version)
            if removed:
                log.warning(
                    "removed %d vendor block(s) from the request: the plugin speaks protocol "
                    "%.16r, which cannot carry them",
                    removed,
                    caps.protocol_version,
                )
        return request

    async def complete(
        self,
        request: StreamCompletionRequest,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        message_id: str | None = None,
    ) -> Completion:
        """Run one completion and fold it (see :class:`Completion`).

        The cost uses the model's pricing from GetCapabilities (fetched once) and the tier that
        matches (the usage event's receipt time, its prompt size).

        Raises:
            StreamOrderError: the server broke the event order (docs/decisions.md#d12).
            GRPCError / asyncio.TimeoutError: as :meth:`stream`.
            InvalidValueError: ``request`` is not a StreamCompletionRequest.
        """
        _require(request, StreamCompletionRequest, "complete")
        spec = await self.model_spec(request.model_id)
        provider = self._provider_name
        accumulator = StreamAccumulator(
            message_id=message_id,
            produced_by_model_id=request.model_id,
            produced_by_provider=provider,
            forward_compatible=self._peer_is_newer(),
        )
        received_at: datetime | None = None
        events = 0
        async for event in self.stream(request, timeout=timeout):
            events += 1
            if event.usage is not None:
                received_at = datetime.now(UTC)
            accumulator.feed(event)
        result = accumulator.result()
        breakdown: CostBreakdown | None = None
        if result.usage is not None and spec is not None and spec.pricing is not None:
            breakdown = cost(spec.pricing, result.usage, received_at or datetime.now(UTC))
        return Completion(
            message=result.message,
            usage=result.usage,
            stop=result.stop,
            error=result.error,
            cost=breakdown,
            received_at=received_at,
            response=result,
            events=events,
        )


__all__ = ["Completion", "ModelClient", "parse_address"]
