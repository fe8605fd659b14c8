"""The server adapter: start-up validation, request validation before the provider, event-order
checking, exception classification, Configure (case C12), Describe/GetCapabilities, unary
errors, logging."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.client.client import ModelClient
from protocol_py.codec.structs import to_struct
from protocol_py.errors import ValidationError
from protocol_py.provider import Provider, ProviderError
from protocol_py.providers.reference import CONFIG_SCHEMA, ReferenceProvider
from protocol_py.server import (
    ModelServer,
    classify_exception,
    handlers,
    loose_objects,
    parse_size,
    redact,
    validate_config,
)
from protocol_py.server.offload import OFFLOAD_MIN_BYTES
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    Capabilities,
    CountTokensRequest,
    ErrorKind,
    GenerationParams,
    ModelError,
    RenderRequest,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolDeclaration,
    Usage,
)

from ..support.servers import Running, load_case, make_request, start_server


class ScriptedProvider(ReferenceProvider):
    """The reference declarations with a scripted stream (records whether it was called)."""

    def __init__(self, events: list[StreamEvent], raise_after: BaseException | None = None) -> None:
        super().__init__()
        self.events = events
        self.raise_after = raise_after
        self.calls = 0
        self.closed = False

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        try:
            for event in self.events:
                yield event
            if self.raise_after is not None:
                raise self.raise_after
        finally:
            self.closed = True


async def collect(running: Running, request: StreamCompletionRequest) -> list[StreamEvent]:
    client = ModelClient.connect(running.address)
    try:
        return [e async for e in client.stream(request, timeout=10)]
    finally:
        client.close()


@pytest.fixture
def secret_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


# -- start-up --------------------------------------------------------------------------------


class BrokenCaps(ReferenceProvider):
    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        caps.models[0].context_window = 0
        caps.models[1].id = caps.models[0].id
        return caps


async def test_refuses_to_start_listing_every_violation() -> None:
    server = ModelServer(BrokenCaps())
    with pytest.raises(ValidationError) as info:
        await server.start("127.0.0.1", 0)
    rules = {v.rule for v in info.value.violations}
    assert len(info.value.violations) >= 2
    assert any("context_window" in v.path for v in info.value.violations)
    assert any("id" in r for r in rules)
    assert server.port is None


async def test_capabilities_and_describe_carry_the_protocol_version(
    running: Running, client: ModelClient
) -> None:
    caps = await client.get_capabilities()
    assert caps.protocol_version == PROTOCOL_VERSION
    assert [m.id for m in caps.models] == ["reference-large", "reference-medium", "reference-small"]
    producer = await client.describe()
    assert (producer.name, producer.protocol_version) == ("reference", PROTOCOL_VERSION)
    assert producer.category.name == "MODEL"


# -- request validation ----------------------------------------------------------------------


async def test_unknown_model_gets_one_in_band_invalid_request() -> None:
    provider = ScriptedProvider([])
    running = await start_server(provider)
    try:
        events = await collect(running, make_request(model="no-such-model"))
    finally:
        await running.server.shutdown(grace_period=0)
    assert len(events) == 1
    error = events[0].error
    assert error is not None and error.kind is ErrorKind.INVALID_REQUEST
    assert "model_id: request.model_id.unknown" in error.message
    assert provider.calls == 0


async def test_violations_are_named_and_the_provider_is_never_called() -> None:
    provider = ScriptedProvider([])
    running = await start_server(provider)
    bad = make_request(
        model="reference-small",
        params=GenerationParams(thinking_effort="high", max_output_tokens=999_999),
    )
    try:
        events = await collect(running, bad)
    finally:
        await running.server.shutdown(grace_period=0)
    assert len(events) == 1
    error = events[0].error
    assert error is not None and error.kind is ErrorKind.INVALID_REQUEST
    assert "params.thinking_effort" in error.message
    assert "params.max_output_tokens" in error.message
    assert error.retryable is False
    assert provider.calls == 0


# -- provider output -------------------------------------------------------------------------

TEXT = StreamEvent(text_delta=TextDelta(text="partial"))
STOP = StreamEvent(stop=Stop(reason=StopReason.END_TURN))


async def test_order_violation_ends_stream_with_classified_error_keeping_content() -> None:
    provider = ScriptedProvider(
        [
            TEXT,
            StreamEvent(tool_call_delta=ToolCallDelta(id="never-opened", arguments_fragment="{")),
        ]
    )
    running = await start_server(provider)
    try:
        events = await collect(running, make_request())
    finally:
        await running.server.shutdown(grace_period=0)
    assert [e.text_delta for e in events[:1]] == [TextDelta(text="partial")]
    assert len(events) == 2
    error = events[1].error
    assert error is not None and error.kind is ErrorKind.PERMANENT
    assert "event 1" in error.message and "stream.tool_call.unknown_id" in error.message
    assert provider.closed


async def test_events_after_stop_are_not_forwarded() -> None:
    provider = ScriptedProvider([TEXT, STOP, TEXT])
    running = await start_server(provider)
    try:
        events = await collect(running, make_request())
    finally:
        await running.server.shutdown(grace_period=0)
    assert events == [TEXT, STOP]
    assert provider.closed


async def test_stream_without_terminal_event_gets_an_error() -> None:
    running = await start_server(ScriptedProvider([TEXT]))
    try:
        events = await collect(running, make_request())
    finally:
        await running.server.shutdown(grace_period=0)
    assert events[0] == TEXT
    assert events[1].error is not None and events[1].error.kind is ErrorKind.PERMANENT
    assert "without a stop or error" in events[1].error.message


@pytest.mark.parametrize(
    ("exc", "kind", "retryable"),
    [
        (
            ProviderError(
                ModelError(kind=ErrorKind.RATE_LIMITED, message="slow down", retryable=True)
            ),
            ErrorKind.RATE_LIMITED,
            True,
        ),
        (ConnectionResetError("peer reset"), ErrorKind.TRANSIENT, True),
        (TimeoutError(), ErrorKind.TRANSIENT, True),
        (KeyError("sk-secret-value"), ErrorKind.PERMANENT, False),
    ],
)
async def test_provider_exceptions_become_error_events(
    exc: Exception, kind: ErrorKind, retryable: bool, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_server(ScriptedProvider([TEXT], raise_after=exc))
    try:
        events = await collect(running, make_request())
    finally:
        await running.server.shutdown(grace_period=0)
    assert events[0] == TEXT  # content already sent is kept
    error = events[-1].error
    assert error is not None
    assert (error.kind, error.retryable) == (kind, retryable)
    assert "sk-secret-value" not in error.message
    if isinstance(exc, ProviderError):
        assert error.message == "slow down"


def test_classify_httpx_errors() -> None:
    request = httpx.Request("POST", "https://api.example.test/v1")
    assert (
        classify_exception(httpx.ConnectTimeout("t", request=request)).kind is ErrorKind.TRANSIENT
    )
    response = httpx.Response(429, request=request)
    status_error = httpx.HTTPStatusError("x", request=request, response=response)
    error = classify_exception(status_error)
    assert (error.kind, error.http_status, error.retryable) == (ErrorKind.RATE_LIMITED, 429, True)


# -- unary RPCs ------------------------------------------------------------------------------


async def test_count_tokens_exact_and_unknown_model(client: ModelClient) -> None:
    request = make_request("count these words please")
    counted = await client.count_tokens(
        CountTokensRequest(model_id="reference-large", messages=request.messages)
    )
    result = await client.complete(request, timeout=10)
    assert result.usage is not None
    total = (
        result.usage.input_tokens
        + (result.usage.cache_read_tokens or 0)
        + (result.usage.cache_write_tokens or 0)
    )
    assert counted.input_tokens == total
    assert counted.method.name == "TOKENIZER"
    with pytest.raises(GRPCError) as info:
        await client.count_tokens(CountTokensRequest(model_id="nope"))
    assert info.value.status is Status.INVALID_ARGUMENT
    assert "request.model_id.unknown" in (info.value.message or "")


class Minimal(Provider):
    def capabilities(self) -> Capabilities:
        return ReferenceProvider().capabilities()

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        yield STOP


async def test_unimplemented_rpcs_answer_unimplemented() -> None:
    running = await start_server(Minimal())
    client = ModelClient.connect(running.address)
    try:
        for call in (
            client.count_tokens(CountTokensRequest(model_id="reference-small")),
            client.render(RenderRequest(payload_type="x")),
        ):
            with pytest.raises(GRPCError) as info:
                await call
            assert info.value.status is Status.UNIMPLEMENTED
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)


async def test_render_bad_payload_is_invalid_argument(client: ModelClient) -> None:
    with pytest.raises(GRPCError) as info:
        await client.render(RenderRequest(payload_type="reference.unknown"))
    assert info.value.status is Status.INVALID_ARGUMENT


# -- Configure (case C12) --------------------------------------------------------------------

C12_KEYS = {"model": None, "temprature": "temprature", "retry": "simulate_error"}


def c12_payload(name: str) -> dict[str, Any]:
    """The case's payloads mapped onto the reference provider's schema: ``model`` (not a
    reference key) is dropped, ``retry.max_attemps`` becomes ``simulate_error.max_attemps``."""
    case = load_case("C12")
    payload: dict[str, Any] = dict(case["input"]["configure_payloads"][name])
    payload.pop("model")
    if "retry" in payload:
        payload["simulate_error"] = {"kind": "transient", **payload.pop("retry")}
    if name == "f":
        payload["base_url"] = "http://127.0.0.1:9/v1"
    return payload


async def configure_error(client: ModelClient, config: Mapping[str, Any]) -> GRPCError:
    with pytest.raises(GRPCError) as info:
        await client.configure(config)
    assert info.value.status is Status.INVALID_ARGUMENT
    return info.value


async def test_config_validation(client: ModelClient, secret_log: pytest.LogCaptureFixture) -> None:
    case = load_case("C12")
    assert set(case["expected"]) >= {"a", "b", "c", "d", "e", "atomicity"}
    # a: unknown property named
    err = await configure_error(client, c12_payload("a"))
    assert "/temprature: unknown property" in (err.message or "")
    # b: the uri format is checked
    err = await configure_error(client, c12_payload("b"))
    assert "/base_url: is not a valid 'uri'" in (err.message or "")
    # d: a boolean is not an integer
    err = await configure_error(client, c12_payload("d"))
    assert '/max_tokens: must be of type "integer"' in (err.message or "")
    # e: nested unknown property named with its JSON path
    err = await configure_error(client, c12_payload("e"))
    assert "/simulate_error/max_attemps: unknown property" in (err.message or "")
    # c: 1024.0 is accepted: Struct numbers are doubles, the provider receives the integer 1024
    await client.configure(c12_payload("c"))
    # every error listed at once
    err = await configure_error(client, {"api_key": "K", "temprature": 1, "max_tokens": True})
    assert "/temprature" in (err.message or "") and "/max_tokens" in (err.message or "")
    # the secret value never appears in errors or logs
    secret = "sk-live-SECRET-123"
    err = await configure_error(client, {"api_key": secret, "max_tokens": secret})
    assert secret not in (err.message or "")
    await client.configure({"api_key": secret, "max_tokens": 7})
    assert secret not in secret_log.text
    describe = await client.describe()
    caps = await client.get_capabilities()
    assert secret not in str(describe) and secret not in caps.to_json()


async def test_configure_is_atomic(client: ModelClient) -> None:
    await client.configure(c12_payload("f"))  # max_tokens 64
    await configure_error(client, c12_payload("a"))
    result = await client.complete(make_request("word " * 100, model="reference-small"), timeout=10)
    assert result.stop is not None and result.stop.reason is StopReason.MAX_TOKENS
    assert result.usage is not None and result.usage.output_tokens == 64
    assert result.response.metadata is not None
    assert result.response.metadata.attrs["base_url"] == "http://127.0.0.1:9/v1"


async def test_integer_reaches_provider_as_int() -> None:
    seen: list[Any] = []

    class Recording(ReferenceProvider):
        async def configure(self, config: Mapping[str, Any]) -> None:
            seen.append(dict(config))
            await super().configure(config)

    running = await start_server(Recording())
    client = ModelClient.connect(running.address)
    try:
        await client.configure({"max_tokens": 1024.0})
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)
    assert seen == [{"max_tokens": 1024}]
    assert type(seen[0]["max_tokens"]) is int


def test_loose_config_schema_is_reported() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "a": {"type": "object"},
            "b": {"type": "object", "additionalProperties": True},
        },
    }
    assert loose_objects(schema) == ["#/properties/a", "#/properties/b"]
    assert loose_objects(CONFIG_SCHEMA) == []


def test_validate_config_and_redact_helpers() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"u": {"format": "uri"}},
    }
    assert validate_config(schema, {"u": "https://example.com/x"}) == []
    assert validate_config(schema, {"u": "no scheme"}) == ["/u: is not a valid 'uri'"]
    assert redact({"API_Key": "x", "nested": {"auth_token": "y", "n": 1}, "Password": "z"}) == {
        "API_Key": "***",
        "nested": {"auth_token": "***", "n": 1},
        "Password": "***",
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1048576", 1048576),
        ("1MiB", 1048576),
        ("64MiB", 67108864),
        ("2kb", 2000),
        ("1 GiB", 1 << 30),
    ],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "0", "-1", "1.5MiB", "5TB", "8GiB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


# -- logging ---------------------------------------------------------------------------------


async def test_one_structured_log_line_per_rpc(
    client: ModelClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="protocol_py.server")
    await client.complete(
        make_request("hi", params=GenerationParams(stop_sequences=["wrote"])), timeout=10
    )
    await asyncio.sleep(0.05)
    lines = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "protocol_py.server" and r.getMessage().startswith("{")
    ]
    completions = [line for line in lines if line["rpc"] == "StreamCompletion"]
    assert len(completions) == 1
    line = completions[0]
    assert line["session_id"] == "sess-1" and line["turn_id"] == "turn-1"
    assert line["model"] == "reference-large"
    assert line["stop"] == "STOP_SEQUENCE"
    assert line["events"] > 3 and line["duration_s"] >= 0
    assert [entry["rpc"] for entry in lines].count("GetCapabilities") == 1
    assert Usage  # imported for type context


async def test_oversized_stream_event_fails_with_resource_exhausted() -> None:
    big = StreamEvent(text_delta=TextDelta(text="x" * 5000))
    running = await start_server(ScriptedProvider([TEXT, big, STOP]), max_message_size=4096)
    client = ModelClient.connect(running.address)
    received: list[StreamEvent] = []
    try:
        with pytest.raises(GRPCError) as info:
            async for event in client.stream(make_request(), timeout=10):
                received.append(event)
        assert info.value.status is Status.RESOURCE_EXHAUSTED
        assert "4096 bytes" in (info.value.message or "")
        assert received == [TEXT]  # never a truncated message
        caps = await client.get_capabilities()  # still serving
        assert caps.protocol_version == PROTOCOL_VERSION
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)


# -- where validation runs ---------------------------------------------------------------


def _string_properties_tool(count: int) -> ToolDeclaration:
    properties = {f"p{i}": {"type": "string"} for i in range(count)}
    schema = {"type": "object", "properties": properties}
    return ToolDeclaration(name="wide", description="many strings", input_schema=to_struct(schema))


@pytest.mark.parametrize(
    ("properties", "on_loop"),
    [(30, True), (handlers.TOOL_SCHEMA_INLINE_VALUES, False), (1050, False)],
)
async def test_a_small_request_is_validated_on_the_loop_unless_its_tool_schemas_are_large(
    running: Running,
    client: ModelClient,
    monkeypatch: pytest.MonkeyPatch,
    properties: int,
    on_loop: bool,
) -> None:
    """A request under OFFLOAD_MIN_BYTES is validated inline, unless its tool schemas hold
    more than TOOL_SCHEMA_INLINE_VALUES values (each property here is two: its subschema and
    that subschema's type): the metaschema check of 1,050 properties took 0.66 s of the event
    loop. The answer is the same either way, and the server serves afterwards."""
    threads: list[bool] = []
    validate = handlers.validate_request

    def recorded(request: StreamCompletionRequest, spec: Any) -> Any:
        threads.append(threading.current_thread() is threading.main_thread())
        return validate(request, spec)

    monkeypatch.setattr(handlers, "validate_request", recorded)
    request = make_request("use tool", tools=[_string_properties_tool(properties)])
    assert len(bytes(request)) < OFFLOAD_MIN_BYTES
    events = [event async for event in client.stream(request, timeout=60)]
    assert events[-1].stop is not None and events[-1].stop.reason is StopReason.TOOL_USE
    assert threads == [on_loop]
    assert (await client.describe()).name == "reference"


async def test_a_base_url_over_the_format_bound_is_refused_unchecked_and_the_server_serves(
    running: Running, client: ModelClient
) -> None:
    """An 8 MB ``base_url`` is refused naming MAX_FORMAT_CHARS, not checked as a URI (the
    check took about 120 bytes of memory per character), and nothing is applied: the stream
    that follows reports no base_url; one of 8,192 characters is applied and reported."""
    err = await configure_error(client, {"base_url": "https://example.com/" + "a" * 8_000_000})
    assert err.message == (
        "invalid config: 1 error(s): /base_url: is not a valid 'uri': longer than 8192 "
        "characters (bound MAX_FORMAT_CHARS), not checked"
    )
    events = [event async for event in client.stream(make_request("hi"), timeout=30)]
    metadata = [event.metadata for event in events if event.metadata is not None]
    assert metadata and all("base_url" not in (m.attrs or {}) for m in metadata)
    assert events[-1].stop is not None
    at_bound = "https://example.com/" + "a" * (8192 - len("https://example.com/"))
    await client.configure({"base_url": at_bound})
    events = [event async for event in client.stream(make_request("hi"), timeout=30)]
    shown = {m.attrs.get("base_url") for e in events if (m := e.metadata) is not None and m.attrs}
    assert shown == {at_bound}


async def test_one_connections_queued_requests_do_not_hold_back_another_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five 80 KB requests queued on one connection, each held 0.2 s in its worker step, then
    one from another connection: the slot takes the connections in turn, so the other
    connection's step runs after at most two of the five (it came sixth), and every request is
    answered."""
    check = handlers.ModelServer._decode_and_check
    steps: list[str] = []

    def slow(self: handlers.ModelServer, data: bytes, strict: Any, state: Any) -> Any:
        steps.append("b" if b"y y y" in data else "a")
        time.sleep(0.2)
        return check(self, data, strict, state)

    monkeypatch.setattr(handlers.ModelServer, "_decode_and_check", slow)
    flooding_request, other_request = make_request("x " * 40_000), make_request("y " * 40_000)
    assert len(bytes(flooding_request)) >= OFFLOAD_MIN_BYTES

    async def turn(client: ModelClient, request: StreamCompletionRequest) -> None:
        events = [event async for event in client.stream(request, timeout=60)]
        assert events[-1].stop is not None

    run = await start_server()
    try:
        async with (
            ModelClient.connect(run.address) as flooding,
            ModelClient.connect(run.address) as other,
        ):
            flood = [asyncio.create_task(turn(flooding, flooding_request)) for _ in range(5)]
            await asyncio.sleep(0.1)  # the five are read, four queued behind the first
            await turn(other, other_request)
            await asyncio.gather(*flood)
            assert (await other.describe()).name == "reference"
    finally:
        await run.server.shutdown(grace_period=0)
    assert sorted(steps) == ["a"] * 5 + ["b"]
    assert steps.index("b") <= 2, steps
