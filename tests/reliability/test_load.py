"""The load part of the reliability suite: 500 concurrent streams complete with every
event in order; 1,000 streams cancelled at random points leave no asyncio task, socket or fd
behind and no ERROR log line. benchmarks/reliability.py runs the same at any count and prints
the figures."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ..support.proc import open_fds
from ..support.servers import make_request, start_server

CONCURRENT = 500
CANCELLED = 1_000
CONNECTIONS = 10


class GatedProvider(ReferenceProvider):
    """The reference provider, holding every stream after its first event until ``gate``
    streams are open at once (so they really are concurrent)."""

    def __init__(self, gate: int) -> None:
        super().__init__()
        self.gate = gate
        self.active = 0
        self.peak = 0
        self.all_in = asyncio.Event()

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        if self.active >= self.gate:
            self.all_in.set()
        events = super().stream(request, context)
        try:
            yield await anext(events)
            await asyncio.wait_for(self.all_in.wait(), 60)
            async for event in events:
                yield event
        finally:
            self.active -= 1
            await events.aclose()


def comparable(event: StreamEvent) -> bytes:
    if event.stream_start is not None:
        event.stream_start.provider_request_id = ""
    return bytes(event)


async def collect(client: ModelClient) -> list[bytes]:
    return [comparable(e) async for e in client.stream(make_request("Hello there"), timeout=60)]


async def test_500_concurrent_streams_complete_with_every_event_in_order() -> None:
    provider = GatedProvider(CONCURRENT)
    run = await start_server(provider)
    clients = [ModelClient.connect(run.address) for _ in range(CONNECTIONS)]
    try:
        provider.gate = 1
        expected = await collect(clients[0])  # the deterministic answer, alone
        provider.all_in.clear()
        provider.gate, provider.peak = CONCURRENT, 0
        results = await asyncio.gather(
            *(collect(clients[i % CONNECTIONS]) for i in range(CONCURRENT))
        )
        print(
            f"{CONCURRENT} streams held at once (peak {provider.peak}), {len(expected)} events each"
        )
        assert provider.peak == CONCURRENT
        assert len(expected) > 5
        assert all(result == expected for result in results)
    finally:
        for client in clients:
            client.close()
        await run.server.shutdown(grace_period=0)


async def _cancel_at_random(
    client: ModelClient, rng: random.Random, limit: asyncio.Semaphore
) -> None:
    async with limit:
        if rng.random() < 0.5:
            stop_after = rng.randrange(0, 12)
            seen = 0
            async for _ in client.stream(make_request("Hello there"), timeout=60):
                seen += 1
                if seen >= stop_after:
                    break  # leaving the loop cancels the RPC (RST_STREAM)
        else:
            task = asyncio.create_task(_drain(client))
            await asyncio.sleep(rng.uniform(0, 0.02))
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _drain(client: ModelClient) -> None:
    async for _ in client.stream(make_request("Hello there"), timeout=60):
        pass


async def _settle(server: ModelServer, limit: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    assert server._server is not None
    while loop.time() < deadline:
        busy = server._in_flight or any(h._tasks for h in server._server._handlers)
        if not busy:
            return
        await asyncio.sleep(0.05)


async def test_1000_streams_cancelled_at_random_points_leave_nothing_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    provider = ReferenceProvider()
    await provider.configure({"pace_tokens_per_second": 3000})  # ~1 ms between deltas
    run = await start_server(provider)
    try:
        tasks_before = asyncio.all_tasks()
        fds_before = open_fds()
        rng = random.Random(8)
        limit = asyncio.Semaphore(100)
        clients = [ModelClient.connect(run.address) for _ in range(CONNECTIONS)]
        try:
            await asyncio.gather(
                *(_cancel_at_random(clients[i % CONNECTIONS], rng, limit) for i in range(CANCELLED))
            )
            await _settle(run.server)
            in_flight, open_streams = run.server._in_flight, _server_streams(run.server)
        finally:
            for client in clients:
                client.close()
        await _settle(run.server)
        for _ in range(100):  # the server notices the closed connections
            if open_fds() <= fds_before and asyncio.all_tasks() <= tasks_before:
                break
            await asyncio.sleep(0.05)
        left = asyncio.all_tasks() - tasks_before
        print(
            f"{CANCELLED} cancelled streams: fds {fds_before} -> {open_fds()}, "
            f"tasks left {len(left)}"
        )
        assert in_flight == 0
        assert open_streams == 0
        assert not left
        assert open_fds() <= fds_before
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not [r for r in caplog.records if "socket.send" in r.getMessage()]
        # still serving
        async with ModelClient.connect(run.address) as client:
            assert len(await _collect_plain(client)) > 5
    finally:
        await run.server.shutdown(grace_period=0)


async def _collect_plain(client: ModelClient) -> list[Any]:
    return [e async for e in client.stream(make_request("Hello there"), timeout=30)]


def _server_streams(server: ModelServer) -> int:
    return sum(len(p.processor.streams) for p in server._protocols)
