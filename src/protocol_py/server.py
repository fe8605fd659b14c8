"""The reference gRPC server adapter: one :class:`~protocol_py.provider.Provider` as ModelService.

The adapter (grpclib) owns everything generic so that a provider only translates (spec: "The
wire protocol"; DESIGN D10-D16):

* start-up: the provider's Capabilities are validated (every violation listed; the server
  refuses to start) and ``protocol_version`` is filled in;
* StreamCompletion: the request is validated against the requested model's ModelSpec before the
  provider sees it (for an unknown ``model_id``, against every rule that needs no ModelSpec,
  :func:`~protocol_py.validation.validate_request_shape`, besides ``request.model_id.unknown``);
  an unknown ``model_id`` or any error-severity violation is answered with
  exactly one in-band ``error`` event (``ERROR_KIND_INVALID_REQUEST``; the message names each
  field path and rule id) and the provider is never called. What the provider yields is checked
  against the event-order rules (D12): a provider that breaks them has its stream ended with a
  classified ``error`` event instead of a malformed stream. Provider exceptions become the final
  ``error`` event: :class:`~protocol_py.provider.ProviderError` carries its own ModelError;
  ``httpx`` transport errors, ``OSError`` and timeouts are TRANSIENT (retryable); anything else
  is PERMANENT with a message that names only the exception type. Events already sent are kept.
  A stream is never ended with a bare gRPC ``UNKNOWN``;
* cancellation: when the client cancels or its deadline passes, the provider's async generator
  is closed at once (its ``finally`` runs, closing upstream I/O) and nothing is logged as an
  error (grpclib logs the cancellation at INFO);
* Configure: the config is validated against the provider's config schema (JSON Schema draft
  2020-12 with format checking; ``uri`` is RFC 3986 syntax, any scheme) and rejected with
  ``INVALID_ARGUMENT`` listing every error with its JSON path; a rejected config leaves the
  previous one in force. Values are never echoed in error messages or logs, so secret-like keys
  (names containing ``key``, ``token``, ``secret`` or ``password``) cannot leak;
* Describe and GetCapabilities carry the protocol version;
* gRPC health checking (``grpc.health.v1.Health``: ``""`` and ``model.v1.ModelService``; NOT
  SERVING before the server is ready and while draining) and server reflection (v1 and
  v1alpha, from the buf image ``gen/descriptor/protocol.binpb``);
* a maximum message size (default :data:`DEFAULT_MAX_MESSAGE_SIZE`, 64 MiB) enforced on both
  directions: a request whose length prefix announces more is refused with RESOURCE_EXHAUSTED
  before its body is read (the adapter's own RPCs) or after buffering (health and reflection,
  through :class:`LimitedCodec`); a reply that would exceed it fails with RESOURCE_EXHAUSTED and
  is never sent truncated;
* graceful shutdown (:meth:`ModelServer.shutdown`): health goes NOT_SERVING, the listener
  closes, new calls get UNAVAILABLE, in-flight StreamCompletions may finish within the grace
  period; a StreamCompletion still running when it expires has its provider closed and ends
  with a final in-band ``error`` event (TRANSIENT, retryable, "server shutting down") and OK
  trailers where the connection allows; then remaining calls (including health Watch streams)
  are cancelled and every connection is closed, so an idle client cannot keep the process
  alive;
* one structured log record (a JSON object) per RPC on the ``protocol_py.server`` logger: rpc,
  session_id, turn_id, model, duration_s, events, stop reason or error kind, outcome, detail
  (an error's message), and for Configure ``config_keys`` (the top-level keys set, never their
  values). :class:`LogFormatter` prints such a record as the bare JSON object.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import struct
import sys
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import betterproto2
import grpclib.const
import grpclib.server
import jsonschema
from google.protobuf import (  # type: ignore[import-untyped]
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)
from grpclib.const import Cardinality, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError
from grpclib.health.check import ServiceStatus
from grpclib.health.service import OVERALL, Health
from grpclib.health.v1 import health_pb2
from grpclib.metadata import Deadline
from grpclib.protocol import H2Protocol
from grpclib.reflection.service import ServerReflection
from grpclib.reflection.v1 import reflection_pb2
from rfc3986_validator import validate_rfc3986  # type: ignore[import-untyped]

import protocol_py_gen
from protocol_py.accumulate import StreamOrderChecker
from protocol_py.errors import StreamOrderError, ValidationError, Violation, errors_only
from protocol_py.provider import NotImplementedRPC, Provider, ProviderError
from protocol_py.structs import from_struct
from protocol_py.validation import (
    validate_capabilities,
    validate_config_schema,
    validate_request,
    validate_request_shape,
)
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import (
    Capabilities,
    ConfigureRequest,
    ConfigureResponse,
    CountTokensRequest,
    CountTokensResponse,
    DescribeRequest,
    DescribeResponse,
    ErrorKind,
    GetCapabilitiesRequest,
    GetCapabilitiesResponse,
    ModelError,
    ModelServiceBase,
    ModelSpec,
    RenderFormat,
    RenderRequest,
    RenderResponse,
    StreamCompletionRequest,
    StreamEvent,
)

log = logging.getLogger("protocol_py.server")

SERVICE_NAME: Final = "model.v1.ModelService"
"""The fully qualified gRPC service name served."""

DEFAULT_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
"""Default maximum message size in both directions, in bytes (64 MiB). grpcio's own default
receive limit is 4 MiB; clients expecting larger replies must raise theirs."""

DEFAULT_GRACE_PERIOD: Final = 10.0
"""Default time in-flight StreamCompletions get to finish on shutdown, in seconds."""

FINAL_EVENT_TIMEOUT: Final = 1.0
"""Seconds allowed, at grace expiry, for the final in-band error events to be sent."""

SHUTDOWN_LINGER: Final = 0.25
"""Seconds connections stay open after the last in-flight stream finished during a drain."""

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 50051

SECRET_KEY_RE: Final = re.compile(r"key|token|secret|password", re.IGNORECASE)
"""A config key whose name matches this (anywhere, any case) holds a secret."""

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

_RENDER_FORMATS: Final = frozenset(RenderFormat)


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


class LimitedCodec(ProtoCodec):
    """grpclib's protobuf codec with a maximum message size in both directions.

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


def _is_uri(value: object) -> bool:
    """RFC 3986 ``absolute-URI`` syntax (any scheme: ``https:``, ``file:``, ``urn:``, ...),
    checked by ``rfc3986-validator``; non-strings pass (``format`` applies to strings only)."""
    if not isinstance(value, str):
        return True
    return validate_rfc3986(value, rule="URI") is not None


def config_format_checker() -> jsonschema.FormatChecker:
    """jsonschema's draft 2020-12 format checker with ``uri`` always checked (RFC 3986 syntax,
    through ``rfc3986-validator``), whichever optional URI packages are installed."""
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    checker = jsonschema.FormatChecker(list(checker.checkers))
    checker.checks("uri")(_is_uri)
    return checker


def json_pointer(path: Any) -> str:
    """Render a jsonschema error path (a deque of keys and indices) as a JSON Pointer."""
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts) if parts else "/"


def _describe_schema_error(error: jsonschema.ValidationError) -> str:
    """A message for one schema error that never includes the offending value."""
    where = json_pointer(error.absolute_path)
    validator = str(error.validator)
    expected = error.validator_value
    instance = error.instance
    if validator == "additionalProperties" and isinstance(instance, Mapping):
        allowed = (
            set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        )
        extra = sorted(str(k) for k in instance if k not in allowed)
        names = ", ".join(json_pointer([*error.absolute_path, k]) for k in extra)
        return f"{names}: unknown property (additionalProperties is false)"
    if validator == "required" and isinstance(instance, Mapping):
        missing = [k for k in expected if k not in instance] if isinstance(expected, list) else []
        return f"{where}: missing required property {', '.join(map(str, missing))}"
    if validator == "type":
        return f"{where}: must be of type {json.dumps(expected)}"
    if validator == "format":
        return f"{where}: is not a valid {expected!r}"
    if validator in ("enum", "const"):
        return f"{where}: must be one of {json.dumps(expected)}"
    return f"{where}: fails {validator} {json.dumps(expected, default=str)}"


def validate_config(schema: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """Validate ``config`` against a JSON Schema (draft 2020-12, formats checked).

    Returns:
        One message per error, ``"<JSON Pointer>: <rule>"``, sorted by path; empty when valid.
        Messages name paths and schema rules only, never the values, so secrets cannot leak.

    Raises:
        ValueError: the schema itself is invalid or unusable (metaschema or format errors such
            as a ``pattern`` that is no regular expression, or a failure while applying it such
            as an unresolvable ``$ref``).
    """
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid config schema: {exc.message}") from None
    validator = jsonschema.Draft202012Validator(schema, format_checker=config_format_checker())
    try:
        errors = sorted(
            validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path]
        )
    except Exception as exc:  # an unresolvable $ref, a regex the engine rejects, ...
        raise ValueError(f"unusable config schema: {type(exc).__name__}: {exc}") from None
    return [_describe_schema_error(e) for e in errors]


def loose_objects(schema: Any, path: str = "#") -> list[str]:
    """JSON Pointer fragments of every object-typed subschema of ``schema`` that does not set
    ``additionalProperties: false`` (a misspelt key would then validate and be dropped)."""
    found: list[str] = []
    if isinstance(schema, Mapping):
        if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
            found.append(path)
        for key, value in schema.items():
            found.extend(loose_objects(value, f"{path}/{key}"))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            found.extend(loose_objects(value, f"{path}/{index}"))
    return found


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``config`` with the value of every secret-like key (:data:`SECRET_KEY_RE`) replaced
    by ``"***"``, at any depth."""

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: ("***" if SECRET_KEY_RE.search(str(k)) else walk(v)) for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    result = walk(config)
    return result if isinstance(result, dict) else {}


# -- exception classification ----------------------------------------------------------------


def classify_exception(exc: BaseException) -> ModelError:
    """Turn a provider exception into the ModelError that ends its stream (DESIGN D10).

    :class:`ProviderError` keeps its own ModelError; ``httpx`` transport errors, ``OSError``
    and timeouts are TRANSIENT (retryable); an ``httpx.HTTPStatusError`` is classified by its
    status code; anything else is PERMANENT, naming only the exception type (the exception's
    text may hold secrets or request data and is logged, not sent).
    """
    if isinstance(exc, ProviderError):
        return exc.error
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.HTTPStatusError):
        status = int(exc.response.status_code)
        return _error_for_http_status(status)
    if (httpx is not None and isinstance(exc, httpx.TransportError)) or isinstance(
        exc, OSError | TimeoutError | asyncio.TimeoutError
    ):
        return ModelError(
            kind=ErrorKind.TRANSIENT,
            message=f"upstream connection failed ({type(exc).__name__})",
            retryable=True,
        )
    return ModelError(
        kind=ErrorKind.PERMANENT,
        message=f"internal provider error ({type(exc).__name__})",
        retryable=False,
    )


def _error_for_http_status(status: int) -> ModelError:
    kinds = {
        400: ErrorKind.INVALID_REQUEST,
        422: ErrorKind.INVALID_REQUEST,
        401: ErrorKind.AUTHENTICATION,
        403: ErrorKind.PERMISSION_DENIED,
        404: ErrorKind.NOT_FOUND,
        402: ErrorKind.QUOTA_EXHAUSTED,
        429: ErrorKind.RATE_LIMITED,
        529: ErrorKind.OVERLOADED,
    }
    kind = kinds.get(status, ErrorKind.TRANSIENT if status >= 500 else ErrorKind.PERMANENT)
    retryable = kind in (ErrorKind.RATE_LIMITED, ErrorKind.OVERLOADED, ErrorKind.TRANSIENT)
    return ModelError(
        kind=kind, message=f"upstream HTTP {status}", retryable=retryable, http_status=status
    )


_GRPC_STATUS_FOR_KIND: Final = {
    ErrorKind.INVALID_REQUEST: Status.INVALID_ARGUMENT,
    ErrorKind.AUTHENTICATION: Status.UNAUTHENTICATED,
    ErrorKind.PERMISSION_DENIED: Status.PERMISSION_DENIED,
    ErrorKind.NOT_FOUND: Status.NOT_FOUND,
    ErrorKind.RATE_LIMITED: Status.RESOURCE_EXHAUSTED,
    ErrorKind.QUOTA_EXHAUSTED: Status.RESOURCE_EXHAUSTED,
    ErrorKind.CONTEXT_OVERFLOW: Status.INVALID_ARGUMENT,
    ErrorKind.OVERLOADED: Status.UNAVAILABLE,
    ErrorKind.TRANSIENT: Status.UNAVAILABLE,
    ErrorKind.PERMANENT: Status.INTERNAL,
}


def _unary_error(exc: Exception) -> GRPCError:
    """Status for a unary RPC's exception (unary RPCs have no in-band error event)."""
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, NotImplementedRPC):
        return GRPCError(Status.UNIMPLEMENTED, f"not implemented by this provider: {exc}")
    if isinstance(exc, ValueError) and not isinstance(exc, ProviderError):
        return GRPCError(Status.INVALID_ARGUMENT, str(exc))
    error = classify_exception(exc)
    status = _GRPC_STATUS_FOR_KIND.get(error.kind, Status.INTERNAL)
    return GRPCError(status, f"{error.kind.name}: {error.message}")


def _invalid_request_event(violations: list[Violation]) -> StreamEvent:
    text = "; ".join(str(v) for v in violations)
    return StreamEvent(
        error=ModelError(
            kind=ErrorKind.INVALID_REQUEST,
            message=f"invalid request: {len(violations)} violation(s): {text}",
            retryable=False,
        )
    )


# -- logging ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _RpcRecord:
    rpc: str
    started: float = field(default_factory=time.monotonic)
    session_id: str | None = None
    turn_id: str | None = None
    model: str | None = None
    events: int | None = None
    stop: str | None = None
    error_kind: str | None = None
    outcome: str = "ok"
    detail: str | None = None
    config_keys: list[str] | None = None

    def emit(self) -> None:
        line = {
            "rpc": self.rpc,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "model": self.model,
            "duration_s": round(time.monotonic() - self.started, 6),
            "events": self.events,
            "stop": self.stop,
            "error_kind": self.error_kind,
            "outcome": self.outcome,
            "detail": self.detail,
            "config_keys": self.config_keys,
        }
        log.info(
            json.dumps({k: v for k, v in line.items() if v is not None}, sort_keys=False),
            extra={RPC_RECORD_ATTR: True},
        )


RPC_RECORD_ATTR: Final = "protocol_py_rpc"
"""LogRecord attribute set on the per-RPC JSON records of the ``protocol_py.server`` logger."""


class LogFormatter(logging.Formatter):
    """The ``serve`` log format: a per-RPC record is its JSON object alone (one line, nothing
    before it, so each line parses as JSON); every other record is
    ``<YYYY-MM-DD HH:MM:SS,mmm> <LEVEL> <logger> <message>``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The JSON object for a per-RPC record, else the text line."""
        if getattr(record, RPC_RECORD_ATTR, False):
            return record.getMessage()
        return super().format(record)


class DrainableStatus(ServiceStatus):
    """grpclib's ServiceStatus whose value can be flipped from a signal handler.

    :meth:`mark` only assigns the value (safe inside a ``signal.signal`` handler, so a health
    Check answered after SIGTERM is never SERVING); :meth:`set` then notifies Watch streams.
    """

    def mark(self, value: bool | None) -> None:
        """Set the value without notifying watchers (signal-safe)."""
        self._value = value

    def set(self, value: bool | None) -> None:
        """Set the value and wake every Watch stream (also after :meth:`mark`)."""
        super().set(value)
        for event in self._events:
            event.set()


# -- the service -----------------------------------------------------------------------------


class ModelServer(ModelServiceBase):
    """ModelService for one provider, plus the health, reflection and shutdown machinery.

    Typical use::

        server = ModelServer(ReferenceProvider())
        port = await server.start("127.0.0.1", 0)
        ...
        await server.shutdown()

    Args:
        provider: The provider to serve.
        max_message_size: Maximum message size in both directions, bytes.
        grace_period: Time in-flight StreamCompletions get on shutdown, seconds.
        descriptor_image: Path of the buf image for reflection; default: found next to the
            generated package (``gen/descriptor/protocol.binpb``) or via the
            ``PROTOCOL_PY_DESCRIPTOR`` environment variable. Without it, reflection is off.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        descriptor_image: Path | None = None,
    ) -> None:
        self.provider = provider
        self.max_message_size = max_message_size
        self.grace_period = grace_period
        self.descriptor_image = descriptor_image
        self.health_status = DrainableStatus()
        self.draining = False
        self._capabilities: Capabilities | None = None
        self._models: dict[str, ModelSpec] = {}
        self._schema: Mapping[str, Any] | None = None
        self._server: grpclib.server.Server | None = None
        self._protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
        self._in_flight = 0
        self._stream_tasks: set[asyncio.Task[Any]] = set()
        self._grace_expired = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._configure_lock = asyncio.Lock()
        self._pool: Any | None = None
        self._pool_loaded = False
        self._strict_classes: dict[type[betterproto2.Message], Any] = {}
        self.port: int | None = None
        self.host: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def prepare(self) -> Capabilities:
        """Start the provider and validate its Capabilities (protocol_version filled in).

        Raises:
            ValidationError: the Capabilities break one or more rules (all are listed).
        """
        await self.provider.start()
        caps = self._checked_capabilities()
        self._install(caps)
        return caps

    def _checked_capabilities(self) -> Capabilities:
        caps = self.provider.capabilities()
        caps.protocol_version = PROTOCOL_VERSION
        violations = errors_only(validate_capabilities(caps))
        own_schema = self.provider.config_schema()
        if own_schema is not None:
            violations.extend(validate_config_schema(own_schema))
        if violations:
            raise ValidationError(violations, f"capabilities of provider {self.provider.name!r}")
        return caps

    def _install(self, caps: Capabilities) -> None:
        self._capabilities = caps
        self._models = {m.id: m for m in caps.models}
        schema = self.provider.config_schema()
        if schema is None and caps.config_schema is not None:
            schema = from_struct(caps.config_schema)
        self._schema = schema
        loose = loose_objects(schema) if schema is not None else []
        if loose:
            log.warning(
                "config schema of provider %s allows unknown keys at %s; set "
                "additionalProperties: false so misspelt keys are rejected",
                self.provider.name,
                ", ".join(loose),
            )

    def descriptor_pool(self) -> Any | None:
        """The DescriptorPool of :func:`build_descriptor_pool` (built once), or None."""
        if not self._pool_loaded:
            self._pool = build_descriptor_pool(self.descriptor_image)
            self._pool_loaded = True
            if self._pool is not None:
                self._strict_classes = strict_request_classes(self._pool)
        return self._pool

    def services(self) -> list[Any]:
        """The grpclib services to serve: this one, health, and reflection when available."""
        health = Health({self: [self.health_status], OVERALL: [self.health_status]})
        services: list[Any] = [self, health]
        pool = self.descriptor_pool()
        if pool is not None:
            services = ServerReflection.extend(services, pool=pool)
        return services

    async def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> int:
        """Prepare, listen on ``host:port`` (0: a free port) and mark health SERVING.

        Returns:
            The bound port.

        Raises:
            ValidationError: invalid Capabilities (the server does not start).
            OSError: the address cannot be bound.
        """
        if self._capabilities is None:
            await self.prepare()
        protocols = self._protocols

        class _Server(grpclib.server.Server):
            def _protocol_factory(self) -> H2Protocol:
                protocol = super()._protocol_factory()
                protocols.add(protocol)
                return protocol

        codec = LimitedCodec(self.max_message_size, self.max_message_size)
        self._server = _Server(self.services(), codec=codec)
        await self._server.start(host, port)
        listener = self._server._server
        assert listener is not None
        sockname = listener.sockets[0].getsockname()  # type: ignore[attr-defined]
        self.host, self.port = str(sockname[0]), int(sockname[1])
        self.health_status.set(True)
        return self.port

    @property
    def address(self) -> str:
        """``host:port`` the server listens on (IPv6 hosts in brackets)."""
        host = self.host or DEFAULT_HOST
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def mark_draining(self) -> None:
        """Flip health to NOT_SERVING and refuse new calls at once; safe to call from a
        ``signal.signal`` handler. :meth:`shutdown` does the rest."""
        self.draining = True
        self.health_status.mark(False)

    async def shutdown(self, grace_period: float | None = None) -> None:
        """Drain and stop: NOT_SERVING, stop listening, let in-flight completions finish.

        Within ``grace_period`` seconds (default: the constructor's) in-flight
        StreamCompletions may finish; new calls are refused with UNAVAILABLE. Then remaining
        calls, health Watch streams included, are cancelled, every connection is closed (so
        idle clients cannot keep the process alive), and the provider is closed.
        """
        grace = self.grace_period if grace_period is None else grace_period
        self.draining = True
        self.health_status.set(False)
        server = self._server
        if server is not None and server._server is not None:
            server._server.close()  # stop accepting connections; keep existing ones
        if self._in_flight:
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=grace)
            if self._in_flight:
                await self._end_in_flight_streams()
            # Let clients read the last messages and trailers before their connection goes
            # (a grpclib client fails every stream it has not finished reading on GOAWAY).
            linger = min(SHUTDOWN_LINGER, max(0.0, grace - (time.monotonic() - started)))
            await asyncio.sleep(linger)
        if server is not None:
            server.close()  # cancels remaining handlers, including health Watch streams
            await asyncio.sleep(0)
            for protocol in list(self._protocols):
                _close_connection(protocol)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
        with contextlib.suppress(Exception):
            await self.provider.aclose()

    async def _end_in_flight_streams(self) -> None:
        """Grace period expired: cancel every in-flight StreamCompletion; each one's handler
        closes its provider generator and sends a final in-band ``error`` event (TRANSIENT,
        retryable, "server shutting down") and its trailers where the connection still allows
        (waits at most :data:`FINAL_EVENT_TIMEOUT` seconds for them)."""
        self._grace_expired = True
        for task in list(self._stream_tasks):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=FINAL_EVENT_TIMEOUT)

    # -- receiving with a size limit -------------------------------------------------------------

    async def _recv(self, stream: grpclib.server.Stream[Any, Any], kind: type[_Req]) -> _Req:
        """Read the single request message, refusing an oversized one from its length prefix."""
        raw = stream._stream
        meta = await raw.recv_data(5)
        if len(meta) < 5:
            raise GRPCError(Status.INVALID_ARGUMENT, "request message missing or truncated")
        compressed, length = struct.unpack(">?I", meta)
        if compressed:
            raise GRPCError(Status.UNIMPLEMENTED, "compressed messages are not supported")
        if length > self.max_message_size:
            raise _too_large("request message", length, self.max_message_size)
        data = await raw.recv_data(length) if length else b""
        if len(data) != length:
            raise GRPCError(Status.INVALID_ARGUMENT, "request message truncated")
        return self._decode(data, kind)

    def _decode(self, data: bytes, kind: type[_Req]) -> _Req:
        """Decode one request body, refusing any that is not well-formed protobuf.

        betterproto2's parser is lenient (it reads corrupt bytes as a partly empty message), so
        the body is first parsed with protobuf's upb class for the same message (built from the
        descriptor image); a ``DecodeError`` there (corrupt wire format, truncated field,
        invalid UTF-8 in a string, nesting beyond :data:`PROTOBUF_MAX_DEPTH` message levels,
        which is about 33 JSON levels inside a Struct since each object or array level costs
        three) is INVALID_ARGUMENT and nothing is applied. Unknown fields stay legal (forward
        compatibility).

        Raises:
            GRPCError: INVALID_ARGUMENT ``"malformed request: <Message> could not be decoded
                (<n> bytes)"``.
        """
        strict = self._strict_classes.get(kind)
        try:
            if strict is not None:
                strict.FromString(data)
            return kind.parse(data)
        except Exception as exc:  # DecodeError from upb, anything from the lenient parser
            why = ""
            if "MaxDepth" in str(exc):
                why = (
                    f": nested deeper than protobuf's limit of {PROTOBUF_MAX_DEPTH} message levels"
                )
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"malformed request: {kind.__name__} could not be decoded ({len(data)} bytes){why}",
            ) from None

    def _check_accepting(self) -> None:
        if self.draining:
            raise GRPCError(Status.UNAVAILABLE, "server is shutting down")

    def _unary(
        self, rpc: str, kind: type[_Req], func: Callable[[Any, _RpcRecord], Any]
    ) -> Callable[[grpclib.server.Stream[Any, Any]], Any]:
        async def handle(stream: grpclib.server.Stream[Any, Any]) -> None:
            record = _RpcRecord(rpc=rpc)
            try:
                self._check_accepting()
                request = await self._recv(stream, kind)
                try:
                    response = await func(request, record)
                except GRPCError:
                    raise
                except Exception as exc:
                    error = _unary_error(exc)
                    if not isinstance(exc, ValueError | NotImplementedRPC | ProviderError):
                        log.error("%s failed", rpc, exc_info=exc)
                    raise error from None
                await stream.send_message(response)
            except GRPCError as exc:
                record.outcome = "error"
                record.error_kind = exc.status.name
                record.detail = exc.message
                raise
            except (asyncio.CancelledError, GeneratorExit):
                record.outcome = "cancelled"
                raise
            finally:
                record.emit()

        return handle

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        """The ModelService routes, with size-limited receiving and per-RPC logging."""

        def h(name: str, func: Any, card: Cardinality, req: Any, rep: Any) -> tuple[str, Any]:
            return f"/{SERVICE_NAME}/{name}", grpclib.const.Handler(func, card, req, rep)

        uu = Cardinality.UNARY_UNARY
        return dict(
            [
                h(
                    "GetCapabilities",
                    self._unary("GetCapabilities", GetCapabilitiesRequest, self._get_capabilities),
                    uu,
                    GetCapabilitiesRequest,
                    GetCapabilitiesResponse,
                ),
                h(
                    "Configure",
                    self._unary("Configure", ConfigureRequest, self._configure),
                    uu,
                    ConfigureRequest,
                    ConfigureResponse,
                ),
                h(
                    "StreamCompletion",
                    self._rpc_stream_completion,
                    Cardinality.UNARY_STREAM,
                    StreamCompletionRequest,
                    StreamEvent,
                ),
                h(
                    "CountTokens",
                    self._unary("CountTokens", CountTokensRequest, self._count_tokens),
                    uu,
                    CountTokensRequest,
                    CountTokensResponse,
                ),
                h(
                    "Render",
                    self._unary("Render", RenderRequest, self._render),
                    uu,
                    RenderRequest,
                    RenderResponse,
                ),
                h(
                    "Describe",
                    self._unary("Describe", DescribeRequest, self._describe),
                    uu,
                    DescribeRequest,
                    DescribeResponse,
                ),
            ]
        )

    # -- unary RPCs -------------------------------------------------------------------------------

    def _caps(self) -> Capabilities:
        if self._capabilities is None:
            raise GRPCError(Status.UNAVAILABLE, "server is not ready")
        return self._capabilities

    async def _get_capabilities(
        self, request: GetCapabilitiesRequest, record: _RpcRecord
    ) -> GetCapabilitiesResponse:
        return GetCapabilitiesResponse(capabilities=self._caps())

    async def get_capabilities(self, message: GetCapabilitiesRequest) -> GetCapabilitiesResponse:
        """The validated Capabilities, with ``protocol_version``."""
        return GetCapabilitiesResponse(capabilities=self._caps())

    async def _describe(self, request: DescribeRequest, record: _RpcRecord) -> DescribeResponse:
        return await self.describe(request)

    async def describe(self, message: DescribeRequest) -> DescribeResponse:
        """The provider's ProducerRef, with ``protocol_version``."""
        producer = self.provider.describe()
        producer.protocol_version = PROTOCOL_VERSION
        return DescribeResponse(producer=producer)

    async def _configure(self, request: ConfigureRequest, record: _RpcRecord) -> ConfigureResponse:
        response = await self.configure(request)
        record.config_keys = sorted(request.config.fields) if request.config is not None else []
        return response

    async def configure(self, message: ConfigureRequest) -> ConfigureResponse:
        """Validate the config against the config schema, then apply it atomically.

        Raises:
            GRPCError: INVALID_ARGUMENT listing every schema error (JSON Pointer paths), or the
                provider's own rejection; FAILED_PRECONDITION when the provider's config schema
                fails while checking the config (never INTERNAL; start-up already refuses a
                schema that is not valid JSON Schema with its formats checked). The previous
                configuration stays in force.
        """
        try:
            config = from_struct(fill_missing_values(message.config), path="config")
        except ValueError as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None
        schema = self._schema
        if schema is None:
            if config:
                raise GRPCError(Status.INVALID_ARGUMENT, "this provider takes no configuration")
        else:
            try:
                problems = validate_config(schema, config)
            except ValueError as exc:
                # the provider's schema is at fault, not the caller: start-up refuses such a
                # schema, so this is only reachable for a failure while applying it
                raise GRPCError(
                    Status.FAILED_PRECONDITION,
                    f"the provider's config schema cannot check this config: {exc}",
                ) from None
            if problems:
                raise GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"invalid config: {len(problems)} error(s): " + "; ".join(problems),
                )
        async with self._configure_lock:
            try:
                await self.provider.configure(config)
            except ValueError as exc:
                raise GRPCError(
                    Status.INVALID_ARGUMENT, f"config rejected by the provider: {exc}"
                ) from None
            try:
                caps = self._checked_capabilities()
            except ValidationError as exc:
                log.warning("capabilities after Configure are invalid; keeping previous: %s", exc)
            else:
                self._install(caps)
        return ConfigureResponse()

    def _model(self, model_id: str) -> ModelSpec:
        spec = self._models.get(model_id)
        if spec is None:
            raise GRPCError(Status.INVALID_ARGUMENT, str(_unknown_model(model_id, self._models)))
        return spec

    async def _count_tokens(
        self, request: CountTokensRequest, record: _RpcRecord
    ) -> CountTokensResponse:
        record.model = request.model_id
        self._model(request.model_id)
        return await self.provider.count_tokens(request)

    async def count_tokens(self, message: CountTokensRequest) -> CountTokensResponse:
        """The provider's count for a known model (INVALID_ARGUMENT for an unknown one)."""
        self._model(message.model_id)
        return await self.provider.count_tokens(message)

    async def _render(self, request: RenderRequest, record: _RpcRecord) -> RenderResponse:
        return await self.render(request)

    async def render(self, message: RenderRequest) -> RenderResponse:
        """The provider's rendering of its own payload.

        Raises:
            GRPCError: INVALID_ARGUMENT for an empty ``payload_type`` or a ``format`` that is
                not a known RenderFormat value (the message starts with the field name); a
                provider's ``ValueError`` also becomes INVALID_ARGUMENT.
        """
        if not message.payload_type:
            raise GRPCError(Status.INVALID_ARGUMENT, "payload_type: must be non-empty")
        if message.format not in _RENDER_FORMATS:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"format: unknown RenderFormat value {int(message.format)} "
                f"(known: {', '.join(str(int(f)) for f in RenderFormat)})",
            )
        return await self.provider.render(message)

    # -- StreamCompletion -----------------------------------------------------------------------

    async def _rpc_stream_completion(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        self._check_accepting()
        self._in_flight += 1
        self._idle.clear()
        task = asyncio.current_task()
        if task is not None:
            self._stream_tasks.add(task)
        try:
            request = await self._recv(stream, StreamCompletionRequest)
            handler = functools.partial(self._completion, deadline=stream.deadline)
            try:
                await self._call_rpc_handler_server_stream(handler, stream, request)
            except asyncio.CancelledError:
                if not (self._grace_expired and task is not None and task.cancelling()):
                    raise
                task.uncancel()  # our own cancellation at grace expiry: end the stream in-band
                await self._send_shutdown_error(stream)
                return
            # Trailers are sent here, not after return, so a draining shutdown that waits for
            # in-flight streams never closes the connection before the stream's status.
            await stream.send_trailing_metadata()
        finally:
            if task is not None:
                self._stream_tasks.discard(task)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _send_shutdown_error(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        """Best effort: the final ``error`` event of a stream cut at grace expiry, then OK
        trailers (the stream ended in-band)."""
        event = StreamEvent(
            error=ModelError(
                kind=ErrorKind.TRANSIENT, message="server shutting down", retryable=True
            )
        )
        with contextlib.suppress(Exception):
            async with asyncio.timeout(FINAL_EVENT_TIMEOUT):
                await stream.send_message(event)
                await stream.send_trailing_metadata()

    async def _call_rpc_handler_server_stream(
        self,
        handler: Callable[..., Any],
        stream: grpclib.server.Stream[Any, Any],
        request: Any,
    ) -> None:
        """Iterate the handler inside ``contextlib.aclosing`` so that, when the client cancels or
        the deadline passes, the handler (and the provider's generator) is closed at once."""
        events = handler(request)
        if not hasattr(events, "aclose"):
            async for event in events:
                await stream.send_message(event)
            return
        async with contextlib.aclosing(events):
            async for event in events:
                await stream.send_message(event)

    def stream_completion(self, message: StreamCompletionRequest) -> AsyncIterator[StreamEvent]:
        """Validate, run the provider, check event order, classify failures (see the module)."""
        return self._completion(message)

    async def _completion(
        self, request: StreamCompletionRequest, deadline: Deadline | None = None
    ) -> AsyncIterator[StreamEvent]:
        context = request.call_context or CallContext()
        record = _RpcRecord(
            rpc="StreamCompletion",
            session_id=context.session_id,
            turn_id=context.turn_id,
            model=request.model_id,
            events=0,
        )
        try:
            spec = self._models.get(request.model_id)
            if spec is None:
                # Unknown model: still report every rule that needs no ModelSpec.
                violations = errors_only(validate_request_shape(request))
                if not any(v.path == "model_id" for v in violations):
                    violations.insert(0, _unknown_model(request.model_id, self._models))
            else:
                violations = errors_only(validate_request(request, spec))
            if violations or spec is None:
                event = _invalid_request_event(violations)
                record.error_kind = ErrorKind.INVALID_REQUEST.name
                record.outcome = "invalid_request"
                record.events = 1
                yield event
                return
            checker = StreamOrderChecker()
            upstream: AsyncIterator[StreamEvent] | None = None
            failure: ModelError | None = None
            try:
                upstream = self.provider.stream(request, context)
                async for event in upstream:
                    try:
                        checker.check(event)
                    except StreamOrderError as exc:
                        failure = ModelError(
                            kind=ErrorKind.PERMANENT,
                            message=f"provider broke the event order at event {exc.index}: "
                            f"{exc.rule}: {exc.detail}",
                            retryable=False,
                        )
                        log.error("provider %s: %s", self.provider.name, failure.message)
                        break
                    record.events = (record.events or 0) + 1
                    if event.stop is not None:
                        record.stop = event.stop.reason.name
                        yield event
                        return
                    if event.error is not None:
                        record.error_kind = event.error.kind.name
                        record.outcome = "error"
                        yield event
                        return
                    yield event
                else:
                    _reraise_swallowed_cancellation()
                    failure = ModelError(
                        kind=ErrorKind.PERMANENT,
                        message="provider ended the stream without a stop or error event",
                        retryable=False,
                    )
                    log.error("provider %s: %s", self.provider.name, failure.message)
            except NotImplementedRPC:
                if record.events == 0:
                    raise GRPCError(Status.UNIMPLEMENTED, "StreamCompletion") from None
                failure = ModelError(kind=ErrorKind.PERMANENT, message="not implemented")
            except Exception as exc:
                _reraise_swallowed_cancellation()
                failure = classify_exception(exc)
                if not isinstance(exc, ProviderError):
                    log.error(
                        "provider %s raised %s",
                        self.provider.name,
                        type(exc).__name__,
                        exc_info=exc,
                    )
            finally:
                aclose = getattr(upstream, "aclose", None)
                if aclose is not None:
                    await aclose()
            if failure is not None:
                record.error_kind = failure.kind.name
                record.outcome = "error"
                record.events = (record.events or 0) + 1
                yield StreamEvent(error=failure)
        except (asyncio.CancelledError, GeneratorExit):
            expired = deadline is not None and deadline.time_remaining() <= 0
            if self._grace_expired:
                record.outcome = "error"
                record.error_kind = ErrorKind.TRANSIENT.name
                record.detail = "server shutting down (grace period expired)"
                record.events = (record.events or 0) + 1
            else:
                record.outcome = "deadline_exceeded" if expired else "cancelled"
            raise
        finally:
            record.emit()


def _reraise_swallowed_cancellation() -> None:
    """A provider that caught CancelledError and returned must not defeat cancellation."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError()


def _unknown_model(model_id: str, models: Mapping[str, ModelSpec]) -> Violation:
    served = ", ".join(sorted(models)) or "none"
    return Violation(
        "model_id",
        "request.model_id.unknown",
        f"model {model_id!r} is not served by this provider (served: {served})",
    )


def _close_connection(protocol: H2Protocol) -> None:
    """Send GOAWAY (best effort) and close the transport of one connection."""
    connection = getattr(protocol, "connection", None)
    if connection is None or connection.is_closing():
        return
    with contextlib.suppress(Exception):
        connection._connection.close_connection()
        connection.flush()
    with contextlib.suppress(Exception):
        protocol.processor.close("server shutting down")


# -- strict decoding -----------------------------------------------------------------------------

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


def fill_missing_values(struct: Struct | None) -> Struct | None:
    """Give every Struct map entry decoded without a value (None) an empty Value, in place.

    A map entry with no value field is legal protobuf; its Value has no kind, which protobuf's
    JSON mapping reads as null. betterproto2 leaves such entries as None.
    """
    if struct is None:
        return None
    stack: list[Struct] = [struct]
    while stack:
        current = stack.pop()
        for key, value in list(current.fields.items()):
            if value is None:
                current.fields[key] = Value()
                continue
            pending = [value]
            while pending:
                item = pending.pop()
                if item.struct_value is not None:
                    stack.append(item.struct_value)
                elif item.list_value is not None:
                    pending.extend(v for v in item.list_value.values if v is not None)
    return struct


# -- reflection --------------------------------------------------------------------------------


def find_descriptor_image() -> Path | None:
    """Locate the buf image ``protocol.binpb`` (env ``PROTOCOL_PY_DESCRIPTOR``, then the
    generated package's directory, then ``gen/descriptor`` of a source checkout)."""
    candidates = []
    env = os.environ.get("PROTOCOL_PY_DESCRIPTOR")
    if env:
        candidates.append(Path(env))
    package_dir = Path(protocol_py_gen.__file__).resolve().parent
    candidates.append(package_dir / "descriptor" / "protocol.binpb")
    candidates.append(package_dir.parent.parent / "descriptor" / "protocol.binpb")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def build_descriptor_pool(image: Path | None = None) -> Any | None:
    """A protobuf DescriptorPool holding the buf image's files plus grpclib's health and
    reflection descriptors, for ServerReflection; None when no image is found (logged)."""
    path = image or find_descriptor_image()
    if path is None:
        log.warning("descriptor image protocol.binpb not found: server reflection disabled")
        return None
    files = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    seen: set[str] = set()
    for proto in files.file:
        pool.Add(proto)
        seen.add(proto.name)
    for module in (health_pb2, reflection_pb2):
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        if proto.name not in seen:
            pool.Add(proto)
    return pool
