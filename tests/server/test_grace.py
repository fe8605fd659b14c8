"""Grace-period expiry: a StreamCompletion still running when the grace
period ends gets a final in-band ``error`` event (TRANSIENT, retryable, "server shutting
down") and a normal end of stream, not a bare transport failure."""

from __future__ import annotations

import asyncio
import time

from protocol_py.client.client import ModelClient
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ..support.servers import make_request, start_server


async def test_grace_expiry_ends_in_flight_streams_with_an_in_band_transient_error() -> None:
    run = await start_server(grace_period=0.3)
    client = ModelClient.connect(run.address)
    events: list[StreamEvent] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for event in client.stream(make_request("word " * 60), timeout=30):
            events.append(event)
            first.set()

    try:
        await client.configure({"pace_tokens_per_second": 20}, timeout=5)
        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(first.wait(), 5)
        started = time.monotonic()
        await run.server.shutdown()
        await asyncio.wait_for(task, 5)  # ends normally: no transport error
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert 0.3 <= elapsed < 3
    last = events[-1]
    assert last.error is not None, events[-3:]
    assert last.error.kind == ErrorKind.TRANSIENT
    assert last.error.retryable is True
    assert last.error.message == "server shutting down"
    assert all(e.stop is None for e in events)
    assert sum(1 for e in events if e.error is not None) == 1
