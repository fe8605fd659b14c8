"""The reference gRPC server adapter: one :class:`~protocol_py.provider.Provider` as ModelService.

The adapter (grpclib) owns everything generic so that a provider only translates (spec: "The
wire protocol"; docs/decisions.md#d10 to docs/decisions.md#d16):

* start-up: the provider's Capabilities are validated (every violation listed; the server
  refuses to start) and ``protocol_version`` is filled in;
* StreamCompletion: the request is validated against the requested model's ModelSpec before the
  provider sees it (for an unknown ``model_id``, against every rule that needs no ModelSpec,
  :func:`~protocol_py.rules.request.validate_request_shape`, besides
  ``request.model_id.unknown``);
  an unknown ``model_id`` or any error-severity violation is answered with
  exactly one in-band ``error`` event (``ERROR_KIND_INVALID_REQUEST``; the message names each
  field path and rule id) and the provider is never called. What the provider yields is checked
  against the event-order rules (docs/decisions.md#d12): a provider that breaks them has its stream
  ended with a classified ``error`` event instead of a malformed stream. Provider exceptions become
  the final ``error`` event: :class:`~protocol_py.provider.ProviderError` carries its own
  ModelError; ``httpx`` transport errors, ``OSError`` and timeouts are TRANSIENT (retryable);
  anything else is PERMANENT with a message that names only the exception type. Events already sent
  are kept. A stream is never ended with a bare gRPC ``UNKNOWN``;
* cancellation: when the client cancels or its deadline passes, the provider's async generator
  is closed at once (its ``finally`` runs, closing upstream I/O) and nothing is logged as an
  error (grpclib logs the cancellation at INFO);
* Configure: the config is validated against the provider's config schema (JSON Schema draft
  2020-12 with format checking; ``uri`` is RFC 3986 syntax, any scheme) and rejected with
  ``INVALID_ARGUMENT`` listing the errors with their JSON paths (as many as fit, with the
  total count) and any number beyond 2^53 (docs/decisions.md#d5); a rejected config leaves the
  previous one in force. Values are never echoed in error messages or logs, so secret-like keys
  (names containing ``key``, ``token``, ``secret`` or ``password``) cannot leak;
* bounded error text (:mod:`protocol_py.bounded_text`): every status message, in-band error
  message and log detail is at most 1 KiB once percent-encoded, an echoed caller value is cut
  with a marker and its length; a malformed ``grpc-timeout`` is INVALID_ARGUMENT and an
  already-expired deadline DEADLINE_EXCEEDED, before dispatch
  (:mod:`~protocol_py.server.grpc_layer.admission`); a server bug is INTERNAL, never a bare UNKNOWN;
* StreamCompletion counts the input (:meth:`Provider.count_input_tokens`) and ends a request
  above the model's ``context_window`` with one CONTEXT_OVERFLOW error
  (:mod:`~protocol_py.server.context_window`) before the provider is called;
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
  values). :class:`LogFormatter` prints such a record as the bare JSON object;
  :class:`RecordLimit` bounds the records of calls that did not end ``ok`` (at most
  ``RPC_RECORD_BURST`` per ``RPC_RECORD_INTERVAL`` seconds, the rest counted in a summary).

The package is split by concept, each rule in one place:
:mod:`~protocol_py.server.grpc_layer.limits`
(transport limits: message sizes, well-formed bodies), :mod:`~protocol_py.server.config_schema`
(Configure's JSON Schema and redaction), :mod:`~protocol_py.server.status` (exceptions to
ModelErrors and gRPC statuses), :mod:`~protocol_py.server.records` (the per-RPC log record),
:mod:`~protocol_py.server.reflection` (the descriptor image), :mod:`~protocol_py.server.lifecycle`
(listening, health, drain), :mod:`~protocol_py.server.grpc_layer.connections` (cancellation
checkpoints,
flow control, memory release, receive and idle timeouts, streams reset before their handler ran:
https://github.com/vmagamedov/grpclib/issues/217),
:mod:`~protocol_py.server.grpc_layer.admission` (calls refused before dispatch),
:mod:`~protocol_py.server.grpc_layer.cardinality` (exactly one request message),
:mod:`~protocol_py.server.context_window` (the context-window check) and
:mod:`~protocol_py.server.handlers` (the RPCs).
"""

from __future__ import annotations

from protocol_py.server.config_schema import (
    SECRET_KEY_RE,
    config_format_checker,
    fill_missing_values,
    json_pointer,
    loose_objects,
    redact,
    validate_config,
)
from protocol_py.server.grpc_layer.cardinality import HALF_CLOSE_WAIT
from protocol_py.server.grpc_layer.connections import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RECEIVE_TIMEOUT,
    LARGE_CALL_BYTES,
    MEMORY_TRIM_INTERVAL,
    SEND_CHECKPOINT_INTERVAL,
    MemoryTrimmer,
    TransportHandler,
    TransportProtocol,
    close_connection,
    send_events,
)
from protocol_py.server.grpc_layer.limits import (
    DEFAULT_MAX_MESSAGE_SIZE,
    PROTOBUF_MAX_DEPTH,
    REQUEST_TYPES,
    EncodedReply,
    LimitedCodec,
    decode_request,
    encode_reply,
    parse_size,
    receive_message,
    strict_request_classes,
)
from protocol_py.server.grpc_layer.reply_budget import (
    HELD_COPIES,
    LARGE_REPLY_BYTES,
    REPLY_BUDGET_BYTES,
    ReplyBudget,
)
from protocol_py.server.handlers import (
    SERVICE_NAME,
    ModelServer,
)
from protocol_py.server.lifecycle import (
    CANCEL_REDELIVERY_S,
    DEFAULT_GRACE_PERIOD,
    FINAL_EVENT_TIMEOUT,
    SHUTDOWN_LINGER,
    DrainableStatus,
    ServerLifecycle,
)
from protocol_py.server.records import (
    RPC_RECORD_ATTR,
    RPC_RECORD_BURST,
    RPC_RECORD_INTERVAL,
    LogFormatter,
    RecordLimit,
    RpcRecord,
)
from protocol_py.server.reflection import (
    build_descriptor_pool,
    find_descriptor_image,
)
from protocol_py.server.status import (
    classify_exception,
    invalid_request_event,
    unary_error,
    unknown_model,
)
from protocol_py.transport.addresses import DEFAULT_HOST, DEFAULT_PORT

__all__ = [
    "CANCEL_REDELIVERY_S",
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_HOST",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_PORT",
    "DEFAULT_RECEIVE_TIMEOUT",
    "FINAL_EVENT_TIMEOUT",
    "HALF_CLOSE_WAIT",
    "HELD_COPIES",
    "LARGE_CALL_BYTES",
    "LARGE_REPLY_BYTES",
    "MEMORY_TRIM_INTERVAL",
    "PROTOBUF_MAX_DEPTH",
    "REPLY_BUDGET_BYTES",
    "REQUEST_TYPES",
    "RPC_RECORD_ATTR",
    "RPC_RECORD_BURST",
    "RPC_RECORD_INTERVAL",
    "SECRET_KEY_RE",
    "SEND_CHECKPOINT_INTERVAL",
    "SERVICE_NAME",
    "SHUTDOWN_LINGER",
    "DrainableStatus",
    "EncodedReply",
    "LimitedCodec",
    "LogFormatter",
    "MemoryTrimmer",
    "ModelServer",
    "RecordLimit",
    "ReplyBudget",
    "RpcRecord",
    "ServerLifecycle",
    "TransportHandler",
    "TransportProtocol",
    "build_descriptor_pool",
    "classify_exception",
    "close_connection",
    "config_format_checker",
    "decode_request",
    "encode_reply",
    "fill_missing_values",
    "find_descriptor_image",
    "invalid_request_event",
    "json_pointer",
    "loose_objects",
    "parse_size",
    "receive_message",
    "redact",
    "send_events",
    "strict_request_classes",
    "unary_error",
    "unknown_model",
    "validate_config",
]
