"""Events a provider yields at once leave the server in one HTTP/2 write
(protocol_py.server.grpc_layer.batching): every event still arrives, equal and in order, to
grpclib's and (via the console-script interop tests) grpcio's clients; a slow reader of a stream
larger than the HTTP/2 flow-control window gets everything; a client that leaves mid-burst leaves
the server serving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from grpclib.events import SendMessage, listen

from protocol_py.client.client import ModelClient
from protocol_py.providers.http import events as ev
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.grpc_layer import batching
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import Stop as StopEvent
from protocol_py_gen.model.v1 import (
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
)

from ...support.servers import make_request, start_server


class BurstProvider(ReferenceProvider):
    """Yields ``count`` text deltas of ``size`` characters without waiting, then a stop."""

    name = "burst"

    def __init__(self, count: int, size: int = 8) -> None:
        super().__init__()
        self.count = count
        self.size = size

    async def stream(  # type: ignore[override]
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        yield ev.start("req_burst")
        for i in range(self.count):
            yield ev.text(f"{i:0{self.size}d}")
        yield StreamEvent(stop=StopEvent(reason=StopReason.END_TURN))


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text_delta.text for e in events if e.text_delta is not None]


async def collect(address: str) -> list[StreamEvent]:
    client = ModelClient.connect(address)
    try:
        return [e async for e in client.stream(make_request("go"), timeout=60)]
    finally:
        client.close()


async def test_burst_arrives_complete_in_order_in_few_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[int] = []
    take = batching.EventWriter._take

    def counting_take(self: batching.EventWriter) -> bytes:
        data = take(self)
        writes.append(len(data))
        return data

    monkeypatch.setattr(batching.EventWriter, "_take", counting_take)
    provider = BurstProvider(3000)
    run = await start_server(provider)
    try:
        events = await collect(run.address)
        again = await collect(run.address)  # still serving
    finally:
        await run.server.shutdown(grace_period=0)
    assert texts(events) == [f"{i:08d}" for i in range(3000)]
    assert events[0].stream_start is not None
    assert events[-1].stop is not None and events[-1].stop.reason == StopReason.END_TURN
    assert texts(again) == texts(events)
    # 3001 messages after the first one (sent by grpclib with the headers), per stream
    per_stream = len(writes) / 2
    print(f"writes per 3001-message burst: {per_stream:g}")
    # One write per event would be 3001; a loaded machine may flush a few more times than an
    # idle one (the writer drains whenever the loop gets a turn), never anywhere near that.
    assert 1 <= per_stream <= 100


async def test_slow_reader_of_a_stream_beyond_the_flow_control_window_gets_everything() -> None:
    # 600 events of 4 KiB: 2.4 MB, far beyond HTTP/2's 64 KiB initial stream window
    provider = BurstProvider(600, size=4096)
    run = await start_server(provider)
    client = ModelClient.connect(run.address)
    try:
        got: list[StreamEvent] = []
        async for event in client.stream(make_request("go"), timeout=60):
            got.append(event)
            if len(got) % 100 == 0:
                await asyncio.sleep(0.05)  # a slow reader
        served = await collect(run.address)
    finally:
        client.close()
        await run.server.shutdown(grace_period=0)
    assert texts(got) == [f"{i:04096d}" for i in range(600)]
    assert len(texts(served)) == 600


async def test_client_leaving_mid_burst_leaves_the_server_serving() -> None:
    provider = BurstProvider(20000, size=64)
    run = await start_server(provider)
    client = ModelClient.connect(run.address)
    try:
        seen = 0
        async for _event in client.stream(make_request("go"), timeout=60):
            seen += 1
            if seen == 50:
                break
        provider.count = 10
        served = await collect(run.address)
    finally:
        client.close()
        await run.server.shutdown(grace_period=0)
    assert seen == 50
    assert texts(served) == [f"{i:064d}" for i in range(10)]


def test_limits_are_named_positive_bounds() -> None:
    bounds: dict[str, Any] = {
        "MAX_PENDING_BYTES": batching.MAX_PENDING_BYTES,
        "MAX_PENDING_EVENTS": batching.MAX_PENDING_EVENTS,
    }
    assert bounds == {"MAX_PENDING_BYTES": 262144, "MAX_PENDING_EVENTS": 1024}


async def test_flow_control_window_is_read_once_per_write_not_per_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    writes: list[int] = []
    window, take = batching.EventWriter._window, batching.EventWriter._take

    def counting_window(self: batching.EventWriter) -> int:
        reads.append(window(self))
        return reads[-1]

    def counting_take(self: batching.EventWriter) -> bytes:
        data = take(self)
        writes.append(len(data))
        return data

    monkeypatch.setattr(batching.EventWriter, "_window", counting_window)
    monkeypatch.setattr(batching.EventWriter, "_take", counting_take)
    run = await start_server(BurstProvider(3000))
    try:
        events = await collect(run.address)
    finally:
        await run.server.shutdown(grace_period=0)
    assert texts(events) == [f"{i:08d}" for i in range(3000)]
    print(f"window reads: {len(reads)}, writes: {len(writes)} for 3001 messages")
    assert 1 <= len(reads) <= len(writes) + 1
    assert all(r > 0 for r in reads)


async def test_send_message_listeners_still_see_every_event() -> None:
    seen: list[Any] = []

    async def on_send(event: SendMessage) -> None:
        seen.append(event.message)

    run = await start_server(BurstProvider(500))
    assert run.server._server is not None
    listen(run.server._server, SendMessage, on_send)
    try:
        events = await collect(run.address)
    finally:
        await run.server.shutdown(grace_period=0)
    assert len(events) == 502
    assert [e.text_delta.text for e in seen if e.text_delta is not None] == texts(events)
