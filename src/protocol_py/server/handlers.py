"""The ModelService RPC handlers of the reference server (see :mod:`protocol_py.server`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import time
import traceback
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import betterproto2
import grpclib.const
import grpclib.server
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from grpclib.health.service import OVERALL, Health
from grpclib.metadata import Deadline
from grpclib.reflection.service import ServerReflection

from protocol_py._compat import grpclib_private
from protocol_py.bounded_text import listed
from protocol_py.codec import wire
from protocol_py.codec.structs import from_struct
from protocol_py.codec.wire_gen import State
from protocol_py.errors import StreamOrderError, ValidationError, Violation, errors_only
from protocol_py.provider import NotImplementedRPC, Provider, ProviderError
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py.rules.json_schema import validate_config_schema
from protocol_py.rules.request import (
    tool_schemas_exceed,
    validate_request,
    validate_request_shape,
)
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.rules.version_gate import EventGate
from protocol_py.server.config_schema import (
    MAX_CONFIG_ENTRIES,
    config_entries_within,
    fill_missing_values,
    inexact_numbers,
    loose_objects,
    shown_name,
    validate_config,
)
from protocol_py.server.context_window import checked_request
from protocol_py.server.go_plugin import GoPluginServices
from protocol_py.server.grpc_layer.cardinality import SingleRequest, receive_single
from protocol_py.server.grpc_layer.connections import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RECEIVE_TIMEOUT,
    cancel_outcome,
    reset_at_deadline,
    send_events,
    wait_for_start_turn,
)
from protocol_py.server.grpc_layer.limits import (
    DEFAULT_MAX_MESSAGE_SIZE,
    decode_request,
    encode_reply,
    reply_too_large,
    strict_request_classes,
    top_level_text_is_ascii,
    top_level_text_length,
)
from protocol_py.server.grpc_layer.memory_budget import (
    CallMemory,
    MemoryBudget,
    MemoryBudgetError,
    default_memory_budget,
)
from protocol_py.server.grpc_layer.progress import DEFAULT_WRITE_TIMEOUT
from protocol_py.server.grpc_layer.reply_budget import LARGE_REPLY_BYTES, ReplyBudget
from protocol_py.server.lifecycle import DEFAULT_GRACE_PERIOD, FINAL_EVENT_TIMEOUT, ServerLifecycle
from protocol_py.server.offload import (
    CPU_OWNER,
    OFFLOAD_MIN_BYTES,
    release_dict_in_steps,
    release_large,
    run_cpu,
)
from protocol_py.server.provider_log import (
    capped,
    log_provider_exception,
    log_server_exception,
    warn_if_more_events,
)
from protocol_py.server.records import MAX_LOGGED_CONFIG_KEYS, RpcRecord
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py.server.status import (
    bounded_model_error,
    bounded_status,
    classify_exception,
    internal_error,
    invalid_request_event,
    unary_error,
    unknown_model,
)
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext
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

_Checked = tuple[list[Violation], StreamEvent | None]
"""What :func:`checked_request` returns: the request's errors and its context-window event."""

_Req = TypeVar("_Req", bound=betterproto2.Message)

_RENDER_FORMATS: Final = frozenset(RenderFormat)

CONFIG_INLINE_KEYS: Final = 64
"""Configure configs of more keys than this are converted, checked and their logged key
names picked in a worker thread (:func:`~protocol_py.server.offload.run_cpu`); smaller ones
inline, where the work takes well under a millisecond."""


TOOL_SCHEMA_INLINE_VALUES: Final = 64
"""Most JSON values (object members and array elements at any depth, counted together) the
tool input schemas of a StreamCompletion request may hold for its validation to run inline
when the request is small; with more, the validation runs in a worker thread whatever the
request's size (:func:`~protocol_py.server.offload.run_cpu`). Checking a schema against the
JSON Schema metaschema costs far more per byte than the rest of a request: about 0.6 ms for
each property's subschema (jsonschema, draft 2020-12), so a 61 KB request declaring one tool
of 1,050 string properties held the event loop 0.66 s."""


def _check_size(request: StreamCompletionRequest) -> int:
    """The size :func:`run_cpu` decides by for validating ``request``: the bytes it was decoded
    from, or at least :data:`~protocol_py.server.offload.OFFLOAD_MIN_BYTES` when its tool
    schemas hold more than :data:`TOOL_SCHEMA_INLINE_VALUES` values (so it runs in a worker)."""
    size = wire.wire_size(request)
    return OFFLOAD_MIN_BYTES if size < OFFLOAD_MIN_BYTES and _heavy_schemas(request) else size


def _heavy_schemas(request: StreamCompletionRequest) -> bool:
    """Whether the tool schemas of ``request`` hold more than :data:`TOOL_SCHEMA_INLINE_VALUES`
    values: checking them is worker-thread work whatever the request's size."""
    return tool_schemas_exceed(request.tools, TOOL_SCHEMA_INLINE_VALUES)


def _config_within_bound(message: ConfigureRequest) -> None:
    """Refuse a Configure whose config holds more than ``MAX_CONFIG_ENTRIES`` object members
    and array elements (docs/decisions.md#d35), before upb's parse of its body and before any
    conversion.

    Raises:
        GRPCError: INVALID_ARGUMENT ``config: more than 10000 object members ...``.
    """
    if not config_entries_within(message.config):
        raise GRPCError(
            Status.INVALID_ARGUMENT,
            f"config: more than {MAX_CONFIG_ENTRIES} object members and array elements "
            "(bound MAX_CONFIG_ENTRIES, docs/decisions.md#d35); nothing was applied",
        )


class ModelServer(ServerLifecycle, ModelServiceBase):
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
        receive_timeout: Time a unary-request call gets to complete its request, seconds.
        idle_timeout: Time a connection may stay without an open stream, seconds.
        max_connections: Most connections open at once (None: from ``RLIMIT_NOFILE``; see
            :class:`~protocol_py.server.lifecycle.ServerLifecycle`).
        memory_budget: Bytes of requests being received and decoded, decoded requests alive
            and large replies held, for the whole server
            (:mod:`protocol_py.server.grpc_layer.memory_budget`, docs/decisions.md#d32);
            None (default): a quarter of the machine's memory, 256 MiB..8 GiB
            (:func:`~protocol_py.server.grpc_layer.memory_budget.default_memory_budget`);
            0: off (counted, never refused).
        write_timeout: Time a stream's flow-control window may stay closed before the stream
            is reset, seconds (:mod:`protocol_py.server.grpc_layer.progress`).
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
        receive_timeout: float = DEFAULT_RECEIVE_TIMEOUT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        memory_budget: int | None = None,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
        descriptor_image: Path | None = None,
        max_connections: int | None = None,
    ) -> None:
        super().__init__(
            max_message_size=max_message_size,
            grace_period=grace_period,
            receive_timeout=receive_timeout,
            idle_timeout=idle_timeout,
            max_connections=max_connections,
        )
        if memory_budget is not None and memory_budget < 0:
            raise ValueError(
                f"memory_budget: must be a number of bytes (0: off), got {memory_budget!r}"
            )
        if not write_timeout > 0:
            raise ValueError(
                f"write_timeout: must be a positive number of seconds, got {write_timeout!r}"
            )
        self.write_timeout = write_timeout
        limit = default_memory_budget() if memory_budget is None else memory_budget or None
        self.memory = MemoryBudget(limit)
        """The server's memory budget
        (:class:`~protocol_py.server.grpc_layer.memory_budget.MemoryBudget`)."""
        self.provider = provider
        self.descriptor_image = descriptor_image
        self._capabilities: Capabilities | None = None
        self._models: dict[str, ModelSpec] = {}
        self._schema: Mapping[str, Any] | None = None
        self._configure_lock = asyncio.Lock()
        self._pool: Any | None = None
        self._pool_loaded = False
        self._strict_classes: dict[type[betterproto2.Message], Any] = {}
        self.reply_budget = ReplyBudget(memory=self.memory)
        """Bytes of large unary replies held at once (:data:`REPLY_BUDGET_BYTES`), also
        charged to :attr:`memory`."""
        self.go_plugin: GoPluginServices | None = None
        """hashicorp/go-plugin's controller, broker and stdio services and its ``plugin``
        health name (:mod:`protocol_py.server.go_plugin`), served when set before
        :meth:`start` (by :func:`~protocol_py.server.serve.serve_async` when a kernel built on
        go-plugin launched the server)."""

    def provider_name(self) -> str:
        """The served provider's ``name``."""
        return self.provider.name

    def _reraise_swallowed_cancellation(self, ended: Callable[[], bool] | None) -> None:
        """Raise CancelledError when the call was cancelled and its provider caught that and
        went on (returned, or yielded again): its task still counts the cancellation
        (``Task.cancelling``) and the call was ended (``ended()``: from outside, or by a second
        request message; or the grace period expired). A count alone is not enough: a provider
        may cancel its own task for a timeout of its own and catch that without taking it
        back (``Task.uncancel``), and its call must go on. ``ended`` None (a call not served
        over gRPC): the count alone."""
        task = asyncio.current_task()
        if task is None or not task.cancelling():
            return
        if ended is None or self.grace_expired or ended():
            raise asyncio.CancelledError()

    # -- preparation ----------------------------------------------------------------------------

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
        """The grpclib services to serve: this one, health, reflection when available, and
        :attr:`go_plugin`'s when set (not listed by reflection: they are go-plugin's)."""
        checks: dict[Any, list[Any]] = {self: [self.health_status], OVERALL: [self.health_status]}
        if self.go_plugin is not None:
            checks[self.go_plugin.health_key] = [self.health_status]
        services: list[Any] = [self, Health(checks)]
        pool = self.descriptor_pool()
        if pool is not None:
            services = ServerReflection.extend(services, pool=pool)
        if self.go_plugin is not None:
            services.append(self.go_plugin)
        return services

    @property
    def prepared(self) -> bool:
        """True once :meth:`prepare` has validated and installed the Capabilities."""
        return self._capabilities is not None

    async def close_provider(self) -> None:
        """Close the provider (the last step of :meth:`shutdown`)."""
        await self.provider.aclose()

    async def _recv(
        self, stream: grpclib.server.Stream[Any, Any], kind: type[_Req], memory: CallMemory
    ) -> _Req:
        """Read and decode the single request message within the size limit, charged to the
        server's memory budget (``memory``: the body from its length prefix on, then the
        decoded request)."""
        data = await receive_single(stream, self.max_message_size, memory.reserve_body)
        strict = self._strict_classes.get(kind)
        precheck = _config_within_bound if kind is ConfigureRequest else None
        return await memory.decode(data, kind, strict, precheck=precheck)

    async def _send_large(
        self, stream: grpclib.server.Stream[Any, Any], box: list[betterproto2.Message]
    ) -> None:
        """Send the large reply taken out of ``box``: the length of its top-level text is
        counted in the reply budget at once, then its exact encoded size (found without
        copying ASCII text), then it is encoded in a worker
        thread (a 60 MiB encoding held the event loop for about 0.1 s), sent, and its bytes
        released as for any large reply (docs/decisions.md#d35).

        Raises:
            GRPCError: RESOURCE_EXHAUSTED when the reply exceeds the maximum message size or
                the reply budget has no room for it, before it is encoded.
        """
        hint = top_level_text_length(box[0])
        try:
            # exact at once for ASCII text (nothing copied), else after a pass in a worker
            exact = wire.encoded_size(box[0]) if top_level_text_is_ascii(box[0]) else None
            if exact is not None and exact > self.max_message_size:
                raise reply_too_large(exact, self.max_message_size)
            # counted at once, on the loop: a finished reply never waits uncounted
            reserved = hint if exact is None else exact
            with self.reply_budget.reserve(reserved, exact=exact is not None) as reservation:
                if exact is None:
                    encoded = await run_cpu(hint, wire.encoded_size, box[0])
                    if encoded > self.max_message_size:
                        raise reply_too_large(encoded, self.max_message_size)
                    reservation.grow(encoded)
                else:
                    encoded = exact
                reply = [await run_cpu(encoded, encode_reply, box[0], self.max_message_size)]
                box.clear()  # only the encoded reply is held while the client reads it
                await self.reply_budget.send_reserved(stream, reply)
        finally:
            box.clear()  # a refused reply is freed before the error travels on

    def _unary(
        self, rpc: str, kind: type[_Req], func: Callable[[Any, RpcRecord], Any]
    ) -> Callable[[grpclib.server.Stream[Any, Any]], Any]:
        async def handle(stream: grpclib.server.Stream[Any, Any]) -> None:
            h2_stream = grpclib_private.server_h2_stream(stream)
            wrapper = h2_stream.wrapper
            CPU_OWNER.set(id(h2_stream.connection))  # its CPU steps take this connection's turns
            ones: list[SingleRequest] = []  # the call's one-message check, once it runs
            ended = functools.partial(_call_ended, wrapper, ones)
            with self.redelivering(rpc, ended), self.memory.call(stream.deadline) as memory:
                await run(stream, memory, ones)

        async def run(
            stream: grpclib.server.Stream[Any, Any], memory: CallMemory, ones: list[SingleRequest]
        ) -> None:
            record = RpcRecord(rpc=rpc)
            # the decoded request, freed a step at a time off the loop once answered or
            # refused (a Configure of a million keys was one cascade of frees on the loop)
            held: list[Any] = []
            size = 0
            try:
                self.check_accepting()
                request = await self._recv(stream, kind, memory)
                size, held = wire.wire_size(request), [request]
                del request
                one = SingleRequest(stream)
                ones.append(one)
                await one.start()
                async with one:
                    try:
                        response = await func(held[0], record)
                    except GRPCError as exc:
                        # the finished frames' locals would keep the request alive
                        traceback.clear_frames(exc.__traceback__)
                        raise
                    except Exception as exc:
                        traceback.clear_frames(exc.__traceback__)
                        error = unary_error(exc)
                        if not isinstance(exc, ValueError | NotImplementedRPC | ProviderError):
                            log_provider_exception(self.provider.name, rpc, exc)
                        raise error from None
                    if top_level_text_length(response) >= LARGE_REPLY_BYTES:
                        large = [response]
                        del response  # held by ``large`` alone, cleared once encoded
                        await self._send_large(stream, large)
                    else:
                        # Encoded on the loop, right after the provider returned: replies
                        # being encoded in worker threads would not be counted by the reply
                        # budget until encoded (20 unread 60 MiB replies held 1.5 GB).
                        reply = [encode_reply(response, self.max_message_size)]
                        del response  # only the encoded reply is held while the client reads
                        await self.reply_budget.send(stream, reply)
                await release_large(size, held)
            except GRPCError as exc:
                error = bounded_status(exc)
                record.outcome = "error"
                record.error_kind = error.status.name
                record.detail = error.message
                await release_large(size, held)
                if error is exc:
                    raise
                raise error from None
            except (asyncio.CancelledError, GeneratorExit):
                record.outcome, record.detail = cancel_outcome(stream, record.started)
                raise
            except Exception as exc:  # a server bug: INTERNAL, never grpclib's bare UNKNOWN
                log_server_exception(rpc, exc)
                error = internal_error(exc)
                record.outcome = "error"
                record.error_kind = error.status.name
                record.detail = error.message
                raise error from None
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
        self, request: GetCapabilitiesRequest, record: RpcRecord
    ) -> GetCapabilitiesResponse:
        return GetCapabilitiesResponse(capabilities=self._caps())

    async def get_capabilities(self, message: GetCapabilitiesRequest) -> GetCapabilitiesResponse:
        """The validated Capabilities, with ``protocol_version``."""
        return GetCapabilitiesResponse(capabilities=self._caps())

    async def _describe(self, request: DescribeRequest, record: RpcRecord) -> DescribeResponse:
        return await self.describe(request)

    async def describe(self, message: DescribeRequest) -> DescribeResponse:
        """The provider's ProducerRef, with ``protocol_version``."""
        producer = self.provider.describe()
        producer.protocol_version = PROTOCOL_VERSION
        return DescribeResponse(producer=producer)

    async def _configure(self, request: ConfigureRequest, record: RpcRecord) -> ConfigureResponse:
        keys = request.config.fields if request.config is not None else {}
        # the record names a bounded number of keys (records.py cuts them further): a config
        # of a million keys is never sorted, nor its smallest keys picked, on the event loop
        size = OFFLOAD_MIN_BYTES if len(keys) > CONFIG_INLINE_KEYS else 0
        smallest = await run_cpu(size, heapq.nsmallest, MAX_LOGGED_CONFIG_KEYS, keys)
        record.config_keys = [shown_name(k) for k in smallest]
        record.config_keys_count = len(keys)
        return await self.configure(request)

    def _checked_config(self, message: ConfigureRequest) -> dict[str, Any]:
        """The config of ``message`` as JSON values, checked against the config schema
        (raises the GRPCError :meth:`configure` documents)."""
        _config_within_bound(message)
        try:
            config = from_struct(fill_missing_values(message.config), path="config")
        except ValueError as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, str(exc)) from None
        try:
            return self._checked_json_config(config)
        except GRPCError:
            # a refused config of a million keys: freed here, in steps, in the worker thread
            release_dict_in_steps(config)
            raise

    def _checked_json_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` (Configure's config as JSON values), checked against the config schema
        (raises the GRPCError :meth:`configure` documents)."""
        inexact = inexact_numbers(config)
        if inexact:
            raise GRPCError(Status.INVALID_ARGUMENT, listed("invalid config", "error", inexact))
        schema = self._schema
        if schema is None:
            if config:
                raise GRPCError(Status.INVALID_ARGUMENT, "this provider takes no configuration")
            return config
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
            raise GRPCError(Status.INVALID_ARGUMENT, listed("invalid config", "error", problems))
        return config

    async def configure(self, message: ConfigureRequest) -> ConfigureResponse:
        """Validate the config against the config schema, then apply it atomically.

        Raises:
            GRPCError: INVALID_ARGUMENT for a config of more than ``MAX_CONFIG_ENTRIES``
                object members and array elements (``config: more than ...``), or listing
                the schema errors (JSON Pointer paths; as
                many as fit in ``MAX_ERROR_MESSAGE_BYTES``, with the total count) or the
                numbers beyond 2^53 (docs/decisions.md#d5, ``inexact_numbers``), or the provider's
                own rejection; FAILED_PRECONDITION when the provider's config schema fails while
                checking the config (never INTERNAL; start-up already refuses a schema that is not
                valid JSON Schema with its formats checked). The previous configuration stays in
                force.
        """
        # converting and checking a config is CPU work proportional to its size (a million
        # keys took seconds): it runs in a worker thread, never on the event loop
        fields = message.config.fields if message.config is not None else {}
        size = OFFLOAD_MIN_BYTES if len(fields) > CONFIG_INLINE_KEYS else 0
        config = await run_cpu(size, self._checked_config, message)
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
            raise GRPCError(Status.INVALID_ARGUMENT, str(unknown_model(model_id, self._models)))
        return spec

    async def _count_tokens(
        self, request: CountTokensRequest, record: RpcRecord
    ) -> CountTokensResponse:
        record.model = request.model_id
        self._model(request.model_id)
        return await self.provider.count_tokens(request)

    async def count_tokens(self, message: CountTokensRequest) -> CountTokensResponse:
        """The provider's count for a known model (INVALID_ARGUMENT for an unknown one)."""
        self._model(message.model_id)
        return await self.provider.count_tokens(message)

    async def _render(self, request: RenderRequest, record: RpcRecord) -> RenderResponse:
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
        h2_stream = grpclib_private.server_h2_stream(stream)
        wrapper = h2_stream.wrapper
        CPU_OWNER.set(id(h2_stream.connection))  # its CPU steps take this connection's turns
        ones: list[SingleRequest] = []  # the call's one-message check, once it runs
        ended = functools.partial(_call_ended, wrapper, ones)
        started = time.monotonic()  # the record's duration covers reading and checking too
        with self.in_flight(ended) as task, self.memory.call(stream.deadline) as memory:
            admitted = await self._admit(stream, memory)
            if admitted is None:  # refused in-band (the memory budget)
                await stream.send_trailing_metadata()
                return
            request, one, checked = admitted
            ones.append(one)
            del admitted
            handler = functools.partial(
                self._completion,
                deadline=stream.deadline,
                one=one,
                checked=checked,
                ended=ended,
                started=started,
            )
            del checked
            try:
                async with one:
                    await self._call_rpc_handler_server_stream(handler, stream, request)
            except asyncio.CancelledError:
                if not (self.grace_expired and task is not None and task.cancelling()):
                    raise
                # our own cancellation at grace expiry (with its redeliveries, d46): end the
                # stream in-band
                while task.cancelling():
                    task.uncancel()
                await self._send_shutdown_error(stream)
                if _call_ended(wrapper, []):
                    # its connection went meanwhile: ended as cancelled (returning would make
                    # grpclib log "Failed to handle cancellation" with a traceback)
                    raise asyncio.CancelledError() from None
                return
            # Trailers are sent here, not after return, so a draining shutdown that waits for
            # in-flight streams never closes the connection before the stream's status.
            await stream.send_trailing_metadata()
            # freeing a large request's objects is CPU work too: done in a worker thread
            size, held = wire.wire_size(request), [request]
            del request
            await release_large(size, held)

    async def _admit(
        self, stream: grpclib.server.Stream[Any, Any], memory: CallMemory
    ) -> tuple[StreamCompletionRequest, SingleRequest, tuple[ModelSpec, _Checked] | None] | None:
        """Admit and read a StreamCompletion request (and check it is the only one), with its
        check when it ran with the decode (:meth:`_recv_completion`); a call
        refused here (draining, oversized, malformed, a second message) or cancelled while its
        request is read gets its one log record here, since :meth:`_completion` never runs for
        it. A call the memory budget has no room for gets the in-band ``error`` event
        (OVERLOADED, retryable; the budget's message) and None is returned; one that needs more
        than the whole budget ends with the RESOURCE_EXHAUSTED status (no retry can succeed)."""
        record = RpcRecord(rpc="StreamCompletion")
        try:
            self.check_accepting()
            # the decode, validation and token count share the loop turn's budget with the
            # other starts and the sends: a storm of new streams cannot hold the loop
            await wait_for_start_turn()
            request, checked = await self._recv_completion(stream, memory)
            one = SingleRequest(stream)
            await one.start()
            return request, one, checked
        except MemoryBudgetError as exc:
            memory.release()  # nothing of the request is kept while the event is sent
            error = bounded_status(exc)
            traceback.clear_frames(exc.__traceback__)  # the frames held the request body
            if exc.never_fits:  # over the whole budget: no retry can succeed here
                record.outcome = "error"
                record.error_kind = error.status.name
                record.detail = error.message
                record.emit()
                raise error from None
            record.outcome = "error"
            record.error_kind = ErrorKind.OVERLOADED.name
            record.detail = error.message
            record.events = 1
            record.emit()
            event = StreamEvent(
                error=ModelError(
                    kind=ErrorKind.OVERLOADED, message=error.message or "", retryable=True
                )
            )
            await stream.send_message(event)
            return None
        except GRPCError as exc:
            error = bounded_status(exc)
            record.outcome = "error"
            record.error_kind = error.status.name
            record.detail = error.message
            record.emit()
            raise error from None
        except (asyncio.CancelledError, GeneratorExit):
            record.outcome, record.detail = cancel_outcome(stream, record.started)
            record.emit()
            raise

    async def _recv_completion(
        self, stream: grpclib.server.Stream[Any, Any], memory: CallMemory
    ) -> tuple[StreamCompletionRequest, tuple[ModelSpec, _Checked] | None]:
        """Read a StreamCompletion request; decode it and, for a known model, validate it and
        count it against the context window (:func:`checked_request`) in one worker-thread
        step (:func:`run_cpu`): a large request crosses to a worker and back once per turn.
        The second item is ``(spec, checked)``, or None when the model is unknown or the check
        raised (then :meth:`_completion` runs it again, with the same outcome). The body and
        the decoded request are charged to the server's memory budget (``memory``,
        :meth:`~protocol_py.server.grpc_layer.memory_budget.CallMemory.decode_with`)."""
        data = await receive_single(stream, self.max_message_size, memory.reserve_body)
        strict = self._strict_classes.get(StreamCompletionRequest)
        return await memory.decode_with(
            data, functools.partial(self._decode_and_check, data, strict)
        )

    def _decode_and_check(
        self, data: bytes, strict: Any, state: State | None
    ) -> tuple[StreamCompletionRequest, tuple[ModelSpec, _Checked] | None]:
        request = decode_request(data, StreamCompletionRequest, strict, None, state)
        spec = self._models.get(request.model_id)
        if spec is None:
            return request, None
        if len(data) < OFFLOAD_MIN_BYTES and _heavy_schemas(request):
            return request, None  # run inline: its schemas are checked in a worker instead
        try:
            return request, (spec, checked_request(self.provider, request, spec, validate_request))
        except Exception:  # raised again, and reported, where the check always ran
            return request, None

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
        """Send the handler's events with cancellation checkpoints
        (:func:`~protocol_py.server.grpc_layer.connections.send_events`): when the client cancels
        or the
        deadline passes, the handler (and the provider's generator) is closed at once."""
        await send_events(stream, handler(request))

    def stream_completion(self, message: StreamCompletionRequest) -> AsyncIterator[StreamEvent]:
        """Validate, run the provider, check event order, classify failures (see the module)."""
        return self._completion(message)

    async def _completion(
        self,
        request: StreamCompletionRequest,
        deadline: Deadline | None = None,
        one: SingleRequest | None = None,
        checked: tuple[ModelSpec, _Checked] | None = None,
        ended: Callable[[], bool] | None = None,
        *,
        started: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        context = request.call_context or CallContext()
        record = RpcRecord(
            rpc="StreamCompletion",
            session_id=context.session_id or None,  # unset: omitted from the record
            turn_id=context.turn_id or None,
            model=request.model_id,
            events=0,
            started=time.monotonic() if started is None else started,
        )
        try:
            spec = self._models.get(request.model_id)
            if spec is None:
                # Unknown model: still report every rule that needs no ModelSpec.
                size = _check_size(request)
                violations = errors_only(await run_cpu(size, validate_request_shape, request))
                if not any(v.path == "model_id" for v in violations):
                    violations.insert(0, unknown_model(request.model_id, self._models))
            # validation, then token counting (CPU work on the whole prompt): one step
            # off the event loop, done with the decode when the request came in that way
            elif checked is not None and checked[0] is spec:
                violations, overflow = checked[1]
            else:
                size = _check_size(request)
                violations, overflow = await run_cpu(
                    size, checked_request, self.provider, request, spec, validate_request
                )
            if violations or spec is None:
                event = invalid_request_event(violations)
                record.error_kind = ErrorKind.INVALID_REQUEST.name
                record.outcome = "invalid_request"
                record.detail = capped(event.error.message) if event.error else None
                record.events = 1
                yield event
                return
            if overflow is not None:
                record.error_kind = ErrorKind.CONTEXT_OVERFLOW.name
                record.outcome = "error"
                record.detail = capped(overflow.error.message) if overflow.error else None
                record.events = 1
                yield overflow
                return
            checker = StreamOrderChecker()
            gate = EventGate(request.kernel_protocol_version)
            upstream: AsyncIterator[StreamEvent] | None = None
            failure: ModelError | None = None
            try:
                upstream = self.provider.stream(request, context)
                async for event in upstream:
                    # a provider that caught its call's cancellation and went on yielding:
                    # the call ends here, as cancelled, not at a send on a reset stream
                    self._reraise_swallowed_cancellation(ended)
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
                    if gate.filters and not gate.admits(event):
                        continue  # an older kernel cannot read it (docs/decisions.md#d30)
                    record.events = (record.events or 0) + 1
                    if event.stop is not None:
                        record.stop = event.stop.reason.name
                        yield event
                        await warn_if_more_events(upstream, self.provider.name)
                        return
                    if event.error is not None:
                        record.error_kind = event.error.kind.name
                        record.outcome = "error"
                        bounded_model_error(event.error)
                        record.detail = capped(event.error.message)
                        yield event
                        await warn_if_more_events(upstream, self.provider.name)
                        return
                    yield event
                else:
                    self._reraise_swallowed_cancellation(ended)
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
                self._reraise_swallowed_cancellation(ended)
                failure = classify_exception(exc)
                if not isinstance(exc, ProviderError):
                    log_provider_exception(self.provider.name, "StreamCompletion", exc)
            finally:
                if (note := gate.dropped_note()) is not None:
                    log.warning("provider %s: %s", self.provider.name, note)
                aclose = getattr(upstream, "aclose", None)
                if aclose is not None:
                    await aclose()
            if failure is not None:
                record.error_kind = failure.kind.name
                record.outcome = "error"
                record.detail = capped(failure.message)
                record.events = (record.events or 0) + 1
                yield StreamEvent(error=bounded_model_error(failure))
        except (asyncio.CancelledError, GeneratorExit):
            expired = reset_at_deadline(deadline, record.started)
            if one is not None and one.error is not None:  # a second request message
                record.outcome = "error"
                record.error_kind = one.error.status.name
                record.detail = one.error.message
            elif self.grace_expired and not (ended is not None and ended()):
                # the shutdown error goes out in-band (a call ended from outside, its client
                # gone, gets none: recorded as cancelled below)
                record.outcome = "error"
                record.error_kind = ErrorKind.TRANSIENT.name
                record.detail = f"server shutting down ({self.stop_reason})"
                record.events = (record.events or 0) + 1
            else:
                record.outcome = "deadline_exceeded" if expired else "cancelled"
                # an in-band error produced as the call was cancelled is not its outcome
                record.error_kind = None
                record.detail = one.cancel_reason() if one is not None else None
            raise
        except GRPCError as exc:
            record.outcome = "error"
            record.error_kind = exc.status.name
            record.detail = exc.message
            raise
        except Exception as exc:  # a server bug: INTERNAL, never grpclib's bare UNKNOWN
            log_server_exception("StreamCompletion", exc)
            error = internal_error(exc)
            record.outcome = "error"
            record.error_kind = error.status.name
            record.detail = error.message
            raise error from None
        finally:
            record.emit()


def _call_ended(wrapper: Any, ones: list[SingleRequest]) -> bool:
    """Whether the call was ended from outside its handler: by grpclib (``wrapper``: its
    cancellation wrapper; the client reset the stream, the deadline passed or the connection
    was lost) or by a second request message (``ones``: the call's one-message check)."""
    return grpclib_private.wrapper_error(wrapper) is not None or any(one.ended for one in ones)
