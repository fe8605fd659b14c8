"""Case B26: client cancellation and deadlines close the provider's upstream at once, and
nothing is logged as an error; a handler that swallows cancellation is detected."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpclib.server
import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import HALF_CLOSE_WAIT, ModelServer, lifecycle
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    ModelServiceBase,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
)

from ..support.servers import load_case, make_request, start_server

PATH = "/model.v1.ModelService/StreamCompletion"


class FakeUpstream(ReferenceProvider):
    """B26's fake upstream: one text_delta every 50 ms forever (or a stall); records closing."""

    def __init__(self, *, stall: bool = False, swallow: bool = False) -> None:
        super().__init__()
        self.stall = stall
        self.swallow = swallow
        self.upstream_closed = False
        self.closed_at: float | None = None
        self.saw: type[BaseException] | None = None
        self.closed = asyncio.Event()

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        try:
            if self.stall:
                await asyncio.sleep(3600)
            index = 0
            while True:
                yield StreamEvent(text_delta=TextDelta(text=f"t{index}"))
                index += 1
                await asyncio.sleep(0.05)
        except BaseException as exc:
            self.saw = type(exc)
            if self.swallow and isinstance(exc, asyncio.CancelledError):
                return  # a badly written provider
            raise
        finally:
            self.upstream_closed = True
            self.closed_at = time.monotonic()
            self.closed.set()


def error_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


async def wait_closed(provider: FakeUpstream, limit: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(provider.closed.wait(), timeout=limit + 0.5)


async def test_a_client_cancel_closes_the_upstream_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = load_case("B26")["expected"]["client_cancel"]
    caplog.set_level(logging.DEBUG)
    # the CLI's logging set-up may have raised grpclib's loggers to WARNING in this process
    caplog.set_level(logging.DEBUG, logger="grpclib.server")
    provider = FakeUpstream()
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        async with channel.request(
            PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent
        ) as stream:
            await stream.send_message(make_request(), end=True)
            received = []
            for _ in range(2):
                event = await stream.recv_message()
                assert event is not None and event.text_delta is not None
                received.append(event.text_delta.text)
            cancelled_at = time.monotonic()
            await stream.cancel()
        await wait_closed(provider, expected["upstream_closed_within_s"])
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert received == expected["client_received"]
    assert provider.upstream_closed is True
    assert provider.closed_at is not None
    assert provider.closed_at - cancelled_at <= expected["upstream_closed_within_s"]
    assert (provider.saw is asyncio.CancelledError) is expected["handler_saw_CancelledError"]
    infos = [r.getMessage() for r in caplog.records if r.name == "grpclib.server"]
    assert any(m.startswith("Request was cancelled") for m in infos), infos
    assert expected["no_ERROR_logs"] is True
    assert error_records(caplog) == []
    outcome = [r.getMessage() for r in caplog.records if r.name == "protocol_py.server"]
    assert any('"outcome": "cancelled"' in m for m in outcome)


async def test_a_client_deadline_closes_the_upstream_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = load_case("B26")["expected"]["deadline"]
    caplog.set_level(logging.DEBUG)
    # the CLI's logging set-up may have raised grpclib's loggers to WARNING in this process
    caplog.set_level(logging.DEBUG, logger="grpclib.server")
    provider = FakeUpstream(stall=True)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    started = time.monotonic()
    try:
        with pytest.raises((asyncio.TimeoutError, GRPCError)) as info:
            async with channel.request(
                PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent, timeout=0.3
            ) as stream:
                await stream.send_message(make_request(), end=True)
                await stream.recv_message()
        await wait_closed(provider, expected["upstream_closed_within_s"])
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    if isinstance(info.value, GRPCError):
        assert info.value.status is Status.DEADLINE_EXCEEDED
    assert provider.upstream_closed is True
    assert provider.closed_at is not None
    assert provider.closed_at - started <= expected["upstream_closed_within_s"]
    infos = [r.getMessage() for r in caplog.records if r.name == "grpclib.server"]
    # "Deadline exceeded" when the server's own deadline fires first; the client's reset can
    # win the race, which grpclib reports as a cancelled request (both at INFO).
    assert any(m == "Deadline exceeded" or m.startswith("Request was cancelled") for m in infos)
    assert expected["no_ERROR_logs"] is True
    assert error_records(caplog) == []


async def test_a_handler_that_swallows_cancellation_is_detected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plain grpclib handler that swallows CancelledError makes grpclib log an ERROR: the
    check used by the tests above would fail on it (the case's verdict)."""
    expected = load_case("B26")["expected"]["bad_handler"]
    caplog.set_level(logging.DEBUG)

    class Swallowing(ModelServiceBase):
        async def stream_completion(
            self, message: StreamCompletionRequest
        ) -> AsyncIterator[StreamEvent]:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                return
            yield StreamEvent()

    server = grpclib.server.Server([Swallowing()])
    await server.start("127.0.0.1", 0)
    assert server._server is not None
    port = server._server.sockets[0].getsockname()[1]
    channel = Channel("127.0.0.1", port)
    try:
        with pytest.raises((asyncio.TimeoutError, GRPCError)):
            async with channel.request(
                PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent, timeout=0.3
            ) as stream:
                await stream.send_message(make_request(), end=True)
                await stream.recv_message()
        await asyncio.sleep(0.3)
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
    assert expected["verdict"] == "must FAIL the test"
    messages = [r.getMessage() for r in error_records(caplog)]
    assert "Failed to handle cancellation" in messages


async def test_adapter_restores_a_swallowed_cancellation(caplog: pytest.LogCaptureFixture) -> None:
    """The same mistake inside a provider served by the adapter: the adapter re-raises the
    cancellation, so grpclib logs no error and the upstream is closed."""
    caplog.set_level(logging.DEBUG)
    provider = FakeUpstream(stall=True, swallow=True)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        with pytest.raises((asyncio.TimeoutError, GRPCError)):
            async with channel.request(
                PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent, timeout=0.3
            ) as stream:
                await stream.send_message(make_request(), end=True)
                await stream.recv_message()
        await wait_closed(provider, 0.8)
        await asyncio.sleep(0.1)
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert provider.saw is asyncio.CancelledError
    assert provider.upstream_closed is True
    assert error_records(caplog) == []


async def test_server_keeps_serving_after_cancellations() -> None:
    provider = ReferenceProvider()
    await provider.configure({"pace_tokens_per_second": 100})
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        for _ in range(5):
            async with channel.request(
                PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent
            ) as stream:
                await stream.send_message(make_request(), end=True)
                assert await stream.recv_message() is not None
                await stream.cancel()
        for _ in range(100):
            if running.server._in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert running.server._in_flight == 0
        await provider.configure({})
        client = ModelClient.connect(running.address)
        try:
            result = await client.complete(make_request(), timeout=10)
        finally:
            client.close()
        assert result.stop is not None and result.stop.reason is StopReason.END_TURN
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)


async def test_client_leaving_stream_early_cancels_upstream() -> None:
    provider = FakeUpstream()
    running = await start_server(provider)
    client = ModelClient.connect(running.address)
    try:
        received = []
        async with contextlib.aclosing(client.stream(make_request())) as events:
            async for event in events:
                assert event.text_delta is not None
                received.append(event.text_delta.text)
                if len(received) == 3:
                    break
        await wait_closed(provider, 1.0)
        assert received == ["t0", "t1", "t2"]
        assert provider.saw is asyncio.CancelledError
        # a client deadline on complete(): the stalled upstream is closed too
        stalled = FakeUpstream(stall=True)
        other = await start_server(stalled)
        other_client = ModelClient.connect(other.address)
        try:
            with pytest.raises((asyncio.TimeoutError, GRPCError)):
                await other_client.complete(make_request(), timeout=0.3)
            await wait_closed(stalled, 0.8)
            assert stalled.upstream_closed is True
        finally:
            other_client.close()
            await other.server.shutdown(grace_period=0)
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)
    assert provider.upstream_closed is True


class Misbehaving(ReferenceProvider):
    """The reference provider for turns whose turn id is ``plain``; :meth:`misbehave` (the
    subclass's) for every other turn."""

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        events = (
            super().stream(request, context)
            if request.call_context is not None and request.call_context.turn_id == "plain"
            else self.misbehave()
        )
        async for event in events:
            yield event

    def misbehave(self) -> AsyncIterator[StreamEvent]:
        raise NotImplementedError


class KeepsAwaiting(Misbehaving):
    """A provider that catches the cancellation of its call and then awaits ``after`` seconds
    more (its "cleanup"), re-raising only when that await ends normally."""

    def __init__(self, after: float) -> None:
        super().__init__()
        self.after = after
        self.second: type[BaseException] | None = None
        self.cleanup_done = False
        self.ended = asyncio.Event()
        self.ends = 0

    async def misbehave(self) -> AsyncIterator[StreamEvent]:
        try:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                try:
                    await asyncio.sleep(self.after)
                except BaseException as exc:
                    self.second = type(exc)
                    raise
                self.cleanup_done = True
                raise
            yield StreamEvent()
        finally:
            self.ends += 1
            self.ended.set()


def _records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "protocol_py.server"
        and r.getMessage().startswith('{"rpc": "StreamCompletion"')
    ]


def _redelivery_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "docs/decisions.md#d46" in r.getMessage()
    ]


async def _serves_a_plain_turn(running: Any) -> None:
    """The server still answers a whole StreamCompletion."""
    client = ModelClient.connect(running.address)
    try:
        request = make_request()
        request.call_context = CallContext(session_id="s", turn_id="plain")
        result = await client.complete(request, timeout=10)
    finally:
        client.close()
    assert result.stop is not None and result.stop.reason is StopReason.END_TURN


async def _cancelled_call(channel: Channel, after: float = 0.1) -> None:
    """A StreamCompletion on ``channel`` that its client cancels ``after`` seconds in."""
    async with channel.request(
        PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent
    ) as stream:
        await stream.send_message(make_request(), end=True)
        await asyncio.sleep(after)
        await stream.cancel()


@pytest.mark.parametrize("ended_by", ["client cancel", "deadline"])
async def test_a_provider_that_keeps_awaiting_after_its_cancellation_is_cancelled_again(
    ended_by: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/decisions.md#d46: the call's cancellation is delivered again until it ends, so
    the call gets its record, the provider's await ends and the server keeps serving."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="grpclib.server")
    provider = KeepsAwaiting(after=3600)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        timeout = 0.3 if ended_by == "deadline" else None
        with contextlib.suppress(asyncio.TimeoutError, GRPCError):
            async with channel.request(
                PATH,
                Cardinality.UNARY_STREAM,
                StreamCompletionRequest,
                StreamEvent,
                timeout=timeout,
            ) as stream:
                await stream.send_message(make_request(), end=True)
                if ended_by == "client cancel":
                    await asyncio.sleep(0.2)
                    await stream.cancel()
                else:
                    await stream.recv_message()
        ended_at = time.monotonic()
        await asyncio.wait_for(provider.ended.wait(), timeout=5)
        took = time.monotonic() - ended_at
        for _ in range(100):
            if running.server._in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert running.server._in_flight == 0
        await _serves_a_plain_turn(running)
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert provider.second is asyncio.CancelledError  # its "cleanup" await was cancelled
    assert provider.cleanup_done is False
    assert took < 1.0  # two sweeps of 0.1 s, not the provider's hour
    outcome = "cancelled" if ended_by == "client cancel" else "deadline_exceeded"
    assert sum(f'"outcome": "{outcome}"' in m for m in _records(caplog)) == 1
    warnings = _redelivery_warnings(caplog)
    if ended_by == "client cancel":  # one reset, one delivery by grpclib: the rest are ours
        assert len(warnings) == 1
    else:  # grpclib delivers a deadline and the client's reset that follows it: maybe twice
        assert len(warnings) <= 1
    for warning in warnings:
        assert warning.startswith(
            "provider reference: 1 StreamCompletion call still ran 0.1 s or more after being"
        )
    assert error_records(caplog) == []


async def test_a_cleanup_shorter_than_the_redelivery_interval_is_not_cut(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider's cleanup after its cancellation that ends within one sweep interval runs
    to its end: nothing is delivered again and nothing is logged."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.5)
    caplog.set_level(logging.DEBUG)
    provider = KeepsAwaiting(after=0.2)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        await _cancelled_call(channel, 0.1)
        await asyncio.wait_for(provider.ended.wait(), timeout=5)
        await asyncio.sleep(1.2)  # two sweeps after the end
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert provider.cleanup_done is True
    assert provider.second is None
    assert _redelivery_warnings(caplog) == []
    assert sum('"outcome": "cancelled"' in m for m in _records(caplog)) == 1


async def test_grace_expiry_ends_a_call_whose_provider_keeps_awaiting(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At grace expiry a provider that catches its cancellation is cancelled again; the call
    ends in-band with the shutdown error and grpclib logs no "Failed to handle cancellation"."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="grpclib.server")
    provider = KeepsAwaiting(after=3600)
    running = await start_server(provider)
    client = ModelClient.connect(running.address)
    events: list[StreamEvent] = []

    async def call() -> None:
        async for event in client.stream(make_request(), timeout=30):
            events.append(event)

    try:
        task = asyncio.create_task(call())
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await running.server.shutdown(grace_period=0.1)
        took = time.monotonic() - started
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=5)
    finally:
        client.close()
    assert provider.second is asyncio.CancelledError
    assert took < 1.5  # grace 0.1 s, two sweeps, the linger: not the 1 s final-event wait
    assert [e.error.message for e in events if e.error is not None] == ["server shutting down"]
    assert error_records(caplog) == []
    assert sum("server shutting down (grace period expired)" in m for m in _records(caplog)) == 1


async def test_a_call_whose_connection_went_before_grace_expiry_is_recorded_as_cancelled(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose client connection went during the grace period, its provider still
    awaiting, is ended at grace expiry without an in-band error (nobody is left to read one):
    its record says ``cancelled``, not that the shutdown error was sent."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 30.0)  # only grace expiry ends it
    caplog.set_level(logging.DEBUG)
    provider = KeepsAwaiting(after=3600)
    running = await start_server(provider)
    client = ModelClient.connect(running.address)

    async def call() -> None:
        async for _ in client.stream(make_request(), timeout=30):
            pass

    task = asyncio.create_task(call())
    await asyncio.sleep(0.3)
    shutdown = asyncio.create_task(running.server.shutdown(grace_period=0.6))
    await asyncio.sleep(0.1)
    client.close()  # the connection goes while the provider keeps awaiting
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(task, timeout=5)
    await asyncio.wait_for(shutdown, timeout=10)
    assert provider.second is asyncio.CancelledError  # ended by the grace expiry
    records = [json.loads(m) for m in _records(caplog)]
    assert len(records) == 1, records
    assert records[0]["outcome"] == "cancelled", records[0]
    assert records[0]["events"] == 0  # no shutdown error counted as sent
    assert "error_kind" not in records[0] and "detail" not in records[0], records[0]
    assert error_records(caplog) == []


async def test_a_sweep_over_more_calls_than_its_slice_reaches_every_call(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep looks at CANCEL_SWEEP_SLICE calls per loop turn and goes on at the next turn:
    with a slice of one, three stuck calls all end; one WARNING line counts them."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    monkeypatch.setattr(lifecycle, "CANCEL_SWEEP_SLICE", 1)
    caplog.set_level(logging.DEBUG)
    provider = KeepsAwaiting(after=3600)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)

    try:
        await asyncio.gather(*(_cancelled_call(channel, 0.2) for _ in range(3)))
        for _ in range(300):
            if provider.ends == 3:
                break
            await asyncio.sleep(0.01)
        await _serves_a_plain_turn(running)
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert provider.ends == 3  # the three stuck calls (the plain turn has no "finally")
    assert running.server._in_flight == 0
    # one line per interval: calls found within it are counted into the next line, written
    # when the interval ends or at shutdown
    counted = 0
    for warning in _redelivery_warnings(caplog):
        head = warning.removeprefix("provider reference: ").split(" StreamCompletion call")[0]
        counted += int(head)
    assert counted == 3
    assert sum('"outcome": "cancelled"' in m for m in _records(caplog)) == 3


class ConfigureKeepsAwaiting(ReferenceProvider):
    """A provider whose ``configure`` catches its cancellation and awaits an hour."""

    def __init__(self) -> None:
        super().__init__()
        self.second: type[BaseException] | None = None
        self.ended = asyncio.Event()

    async def configure(self, config: dict[str, Any]) -> None:
        if not config:  # the plain call
            return
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            try:
                await asyncio.sleep(3600)
            except BaseException as exc:
                self.second = type(exc)
                raise
        finally:
            self.ended.set()


async def test_a_unary_call_whose_provider_keeps_awaiting_is_cancelled_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The redelivery covers the unary RPCs too: a Configure its client cancelled ends, with
    its record, and the server keeps serving."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    provider = ConfigureKeepsAwaiting()
    running = await start_server(provider)
    client = ModelClient.connect(running.address)
    try:
        call = asyncio.create_task(client.configure({"pace_tokens_per_second": 100}))
        await asyncio.sleep(0.2)
        call.cancel()  # the client resets the stream: one delivery, by grpclib
        with contextlib.suppress(asyncio.CancelledError):
            await call
        ended_at = time.monotonic()
        await asyncio.wait_for(provider.ended.wait(), timeout=5)
        took = time.monotonic() - ended_at
        await client.configure({}, timeout=5)
        await _serves_a_plain_turn(running)
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)
    assert provider.second is asyncio.CancelledError
    assert took < 1.0
    [warning] = _redelivery_warnings(caplog)
    assert warning.startswith("provider reference: 1 Configure call still ran 0.1 s or more")
    configures = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith('{"rpc": "Configure"')
    ]
    assert len(configures) == 2
    assert (
        '"outcome": "deadline_exceeded"' in configures[0]
        or '"outcome": "cancelled"' in configures[0]
    )
    assert error_records(caplog) == []


async def test_a_call_ended_by_a_second_request_message_is_cancelled_again(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's own end of a call (a second request message: INTERNAL) is delivered again
    like an end from outside: the provider that kept awaiting is stopped and the client gets
    the INTERNAL status."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    provider = KeepsAwaiting(after=3600)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        with pytest.raises(GRPCError) as info:
            async with channel.request(
                PATH, Cardinality.STREAM_STREAM, StreamCompletionRequest, StreamEvent, timeout=10
            ) as stream:
                await stream.send_message(make_request())
                await asyncio.sleep(HALF_CLOSE_WAIT + 0.3)  # past the half-close wait: the
                # provider runs, awaiting
                await stream.send_message(make_request())
                await stream.recv_message()
        await asyncio.wait_for(provider.ended.wait(), timeout=5)
        await _serves_a_plain_turn(running)
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert info.value.status is Status.INTERNAL
    assert "more than one request message" in (info.value.message or "")
    assert provider.second is asyncio.CancelledError
    assert len(_redelivery_warnings(caplog)) == 1
    [record] = [m for m in _records(caplog) if '"turn_id": "plain"' not in m]
    assert '"error_kind": "INTERNAL"' in record
    assert error_records(caplog) == []


REDELIVERIES = [
    (1, False),
    (2, True),
    (3, True),
    (4, False),
    (5, True),
    (6, False),
    (9, True),
    (17, True),
    (18, False),
    (33, True),
    (34, False),
    (64, False),
    (65, True),
    (96, False),
    (97, True),
]
"""(sweeps that found a call ended, whether that sweep delivers its cancellation again)"""


@pytest.mark.parametrize(("sweeps", "delivers"), REDELIVERIES)
def test_redeliveries_come_at_growing_intervals(sweeps: int, delivers: bool) -> None:
    """After 1, 2, 4, ... 32 sweeps from the one that first found the call ended, then every
    32 (docs/decisions.md#d46)."""
    assert lifecycle.CANCEL_REDELIVERY_MAX_SWEEPS == 32
    assert lifecycle._redelivers(sweeps) is delivers


class CatchesSeveral(Misbehaving):
    """A provider that catches its first ``times`` cancellations, noting when each came, and
    lets the next one through."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times
        self.deliveries: list[float] = []
        self.ended = asyncio.Event()

    async def misbehave(self) -> AsyncIterator[StreamEvent]:
        try:
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    self.deliveries.append(time.monotonic())
                    if len(self.deliveries) > self.times:
                        raise
            yield StreamEvent()
        finally:
            self.ended.set()


async def test_a_provider_that_catches_cancellation_repeatedly_is_cancelled_at_growing_intervals(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each delivery after the first comes later than the one before (1, 2, 4, 8 sweeps), so
    calls of a provider that catches every cancellation cost little; the call ends at the
    delivery the provider lets through, with one WARNING."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.05)
    caplog.set_level(logging.DEBUG)
    provider = CatchesSeveral(times=4)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        await _cancelled_call(channel, 0.1)
        await asyncio.wait_for(provider.ended.wait(), timeout=10)
        await _serves_a_plain_turn(running)
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert len(provider.deliveries) == 5  # grpclib's, then four by the sweeps
    gaps = [b - a for a, b in itertools.pairwise(provider.deliveries[1:])]
    # sweeps of 0.05 s: 1, 2 and 4 sweeps apart (0.05, 0.1, 0.2 s), each at least the last
    assert gaps[2] > gaps[0] * 2
    assert gaps[2] >= 0.15
    assert len(_redelivery_warnings(caplog)) == 1
    assert sum('"outcome": "cancelled"' in m for m in _records(caplog)) == 1


async def test_calls_found_within_the_warning_interval_are_counted_in_a_later_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call found after the WARNING line of the interval is not lost: it is counted in the
    next line, written at the latest when the server shuts down."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    provider = KeepsAwaiting(after=3600)
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)

    try:
        await _cancelled_call(channel)
        await asyncio.sleep(0.5)  # its line is written
        lines_before = len(_redelivery_warnings(caplog))
        await _cancelled_call(channel)
        await asyncio.sleep(0.5)  # found and cancelled again, within the 10 s interval
        lines_within = len(_redelivery_warnings(caplog))
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert provider.ends == 2
    assert (lines_before, lines_within) == (1, 1)
    warnings = _redelivery_warnings(caplog)
    assert len(warnings) == 2
    assert all(w.startswith("provider reference: 1 StreamCompletion call still") for w in warnings)


class KeepsYielding(Misbehaving):
    """A provider that catches its call's cancellation and goes on yielding events."""

    def __init__(self) -> None:
        super().__init__()
        self.caught = 0
        self.ended = asyncio.Event()

    async def misbehave(self) -> AsyncIterator[StreamEvent]:
        try:
            index = 0
            while True:
                try:
                    await asyncio.sleep(0.02)
                except asyncio.CancelledError:
                    self.caught += 1
                yield StreamEvent(text_delta=TextDelta(text=f"t{index}"))
                index += 1
        finally:
            self.ended.set()


@pytest.mark.parametrize("ended_by", ["client cancel", "connection lost"])
async def test_a_provider_that_keeps_yielding_after_its_cancellation_ends_at_its_next_event(
    ended_by: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler ends the call at the first event after a cancellation the provider caught:
    one record, no "Failed to handle cancellation" from a send on the reset stream, and no
    stream left running for a connection that is gone."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="grpclib.server")
    provider = KeepsYielding()
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        async with channel.request(
            PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent
        ) as stream:
            await stream.send_message(make_request(), end=True)
            assert await stream.recv_message() is not None
            if ended_by == "client cancel":
                await stream.cancel()
            else:
                channel.close()
        await asyncio.wait_for(provider.ended.wait(), timeout=2)
        await _serves_a_plain_turn(running)
    finally:
        channel.close()
        await running.server.shutdown(grace_period=0)
    assert provider.caught == 1
    assert error_records(caplog) == []
    records = [m for m in _records(caplog) if '"turn_id": "plain"' not in m]
    assert len(records) == 1 and '"outcome": "cancelled"' in records[0]


class CancelsItselfForATimeout(Misbehaving):
    """A provider that times out an await of its own the way code written before Python 3.11
    does (``loop.call_later(t, task.cancel)``, then catching CancelledError), without taking
    the cancellation back (``Task.uncancel``), then streams a whole reply."""

    async def misbehave(self) -> AsyncIterator[StreamEvent]:
        task = asyncio.current_task()
        assert task is not None
        timer = asyncio.get_running_loop().call_later(0.01, task.cancel)
        try:
            await asyncio.sleep(3600)  # "the upstream", timed out
        except asyncio.CancelledError:
            pass
        finally:
            timer.cancel()
        for index in range(5):
            yield StreamEvent(text_delta=TextDelta(text=f"t{index}"))
        yield StreamEvent(stop=Stop(reason=StopReason.END_TURN))


async def test_a_provider_that_cancels_itself_for_its_own_timeout_is_not_stopped(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a call that was ended (from outside, by a second request message, or at grace
    expiry) is stopped for a cancellation its provider caught: a cancellation count the
    provider left on its own task, with nobody ending the call, changes nothing."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    running = await start_server(CancelsItselfForATimeout())
    client = ModelClient.connect(running.address)
    try:
        events = [event async for event in client.stream(make_request(), timeout=10)]
        await asyncio.sleep(0.3)  # sweeps pass
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)
    assert [e.text_delta.text for e in events if e.text_delta is not None] == [
        f"t{index}" for index in range(5)
    ]
    assert events[-1].stop is not None and events[-1].stop.reason is StopReason.END_TURN
    [record] = _records(caplog)
    assert '"outcome": "ok"' in record
    assert _redelivery_warnings(caplog) == []


async def test_a_call_whose_connection_goes_during_its_shutdown_end_logs_no_traceback(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider that catches the cancellations of the shutdown until after the server closed
    its connection: the handler's in-band end finds the connection gone and ends the call as
    cancelled, so grpclib logs no "Failed to handle cancellation" traceback."""
    monkeypatch.setattr(lifecycle, "CANCEL_REDELIVERY_S", 0.1)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="grpclib.server")
    provider = CatchesSeveral(times=6)  # its last catch about 1.7 s after the grace expiry
    running = await start_server(provider)
    channel = Channel("127.0.0.1", running.port)
    try:
        async with channel.request(
            PATH, Cardinality.UNARY_STREAM, StreamCompletionRequest, StreamEvent
        ) as stream:
            await stream.send_message(make_request(), end=True)
            await asyncio.sleep(0.2)
            await running.server.shutdown(grace_period=0.1)
            with contextlib.suppress(Exception):
                await stream.recv_message()
        await asyncio.wait_for(provider.ended.wait(), timeout=10)
        await asyncio.sleep(0.2)
    finally:
        channel.close()
    assert len(provider.deliveries) == 7
    assert error_records(caplog) == []
    assert len(_records(caplog)) == 1


async def test_the_redelivery_warning_counts_the_calls_by_rpc(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    server = ModelServer(ReferenceProvider())
    server._stuck_new = {"StreamCompletion": 1}
    server._report_stuck(now=True)
    server._stuck_new = {"StreamCompletion": 2, "Configure": 1}
    server._report_stuck(now=True)
    assert _redelivery_warnings(caplog) == [
        "provider reference: 1 StreamCompletion call still ran 1 s or more after being cancelled"
        " (the provider caught CancelledError and went on, or its cleanup takes that long);"
        " cancelling again until it ends, after 1, 2, 4 ... 32 s (docs/decisions.md#d46)",
        "provider reference: 3 calls (Configure 1, StreamCompletion 2) still ran 1 s or more"
        " after being cancelled (the provider caught CancelledError and went on, or its cleanup"
        " takes that long); cancelling again until they end, after 1, 2, 4 ... 32 s"
        " (docs/decisions.md#d46)",
    ]


class FailsAtOnce(Misbehaving):
    """A provider whose stream raises before any event: the call ends with an in-band
    TRANSIENT error."""

    async def misbehave(self) -> AsyncIterator[StreamEvent]:
        raise ConnectionError("upstream reset")
        yield StreamEvent()  # pragma: no cover - makes this an async generator


async def test_a_call_cancelled_as_its_in_band_error_goes_out_is_recorded_without_that_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The handler is closed at the yield of its in-band error (the call cancelled just then):
    the record says ``cancelled`` with no ``error_kind`` or ``detail`` of that error, which
    is counted among the events handed out."""
    caplog.set_level(logging.INFO)
    server = ModelServer(FailsAtOnce())
    await server.prepare()  # the provider's models, as start() installs them
    events = server.stream_completion(make_request())
    first = await events.__anext__()
    assert first.error is not None and first.error.kind.name == "TRANSIENT"
    await events.aclose()  # closed at that yield, as a cancelled call's handler is
    records = [json.loads(m) for m in _records(caplog)]
    assert len(records) == 1, records
    assert records[0]["outcome"] == "cancelled", records[0]
    assert "error_kind" not in records[0] and "detail" not in records[0], records[0]
    assert records[0]["events"] == 1, records[0]
