"""Cancellation reaches the work in the worker threads: a stream cancelled while its request is
being validated and counted stops that work within one slice, and after a storm of such
cancels across many connections the workers are idle and a new Describe is answered
(server/offload.py: ``checkpoint``; ``benchmarks/cancel_storm.py`` prints the figures from
outside)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer, offload
from protocol_py.server.offload import MAX_CPU_JOBS, JobCancelled
from protocol_py_gen.model.v1 import StreamCompletionRequest

from ..support.servers import make_request

PROMPT_CHARS = 4 * 1024 * 1024
"""A 4 Mi-character prompt: its token count takes seconds, hundreds of checkpointed slices."""
SETTLE_S = 2.0
"""Generous bound for the workers to go idle after the last cancel on a loaded machine (one
slice takes milliseconds; the whole count of one request takes seconds)."""


class Counting(ReferenceProvider):
    """The reference provider, recording how each context-window token count ended."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.started = 0
        self.finished = 0
        self.stopped = 0
        self.running = threading.Event()
        self.counting: dict[str, threading.Event] = {}
        """Set when the count of the request whose first message starts with the key began."""

    def count_input_tokens(self, request: StreamCompletionRequest) -> int:
        with self.lock:
            self.started += 1
            mark = self.counting.get(_mark(request))
        self.running.set()
        if mark is not None:
            mark.set()
        try:
            count = super().count_input_tokens(request)
        except JobCancelled:
            with self.lock:
                self.stopped += 1
            raise
        with self.lock:
            self.finished += 1
        return count


def _big_request(mark: str = "") -> StreamCompletionRequest:
    text = (mark + "Tell me a long story. " * (PROMPT_CHARS // 22 + 1))[:PROMPT_CHARS]
    return make_request(text)


def _mark(request: StreamCompletionRequest) -> str:
    text = request.messages[0].content[0].text
    return text.text[:6] if text is not None else ""


async def _drain(client: ModelClient, request: StreamCompletionRequest) -> None:
    async for _ in client.stream(request, timeout=60):
        pass


async def _workers_idle(limit: float) -> float | None:
    """Seconds until every CPU-job slot of this loop is free, or None after ``limit``."""
    slot = offload._slot(asyncio.get_running_loop())
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if slot.free == MAX_CPU_JOBS:
            return time.monotonic() - started
        await asyncio.sleep(0.005)
    return None


async def test_a_cancel_during_the_token_count_stops_the_worker_within_one_slice() -> None:
    provider = Counting()
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        task = asyncio.create_task(_drain(client, _big_request()))
        assert await asyncio.to_thread(provider.running.wait, 60)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        idle = await _workers_idle(SETTLE_S)
        print(f"workers idle {idle} s after the cancel")
        assert idle is not None, "the worker kept counting after the cancel"
        assert (provider.started, provider.stopped, provider.finished) == (1, 1, 0)
        assert (await client.describe(timeout=10)).name
    finally:
        client.close()
        await server.shutdown(grace_period=0)


async def test_after_a_cancel_storm_the_workers_are_idle_and_describe_answers() -> None:
    provider = Counting()
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    clients = [ModelClient.connect(f"127.0.0.1:{port}") for _ in range(10)]
    rng = random.Random(5)
    try:

        async def one(i: int) -> None:
            # half are cancelled at a random moment (queued, decoding or counting), half once
            # their own count is running (one CPU job runs at a time, docs/decisions.md#d38,
            # so a random moment mostly finds a call queued or done)
            mark = f"{i:05d}:"
            counting = provider.counting.setdefault(mark, threading.Event())
            task = asyncio.create_task(_drain(clients[i % len(clients)], _big_request(mark)))
            if i % 2:
                await asyncio.sleep(rng.uniform(0.0, 4.0))
            else:
                await asyncio.to_thread(counting.wait, 60)
                await asyncio.sleep(rng.uniform(0.0, 0.02))
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

        await asyncio.gather(*(one(i) for i in range(20)))
        idle = await _workers_idle(SETTLE_S)
        counts = (provider.started, provider.stopped, provider.finished)
        print(f"workers idle {idle} s after the last cancel; started, stopped, finished {counts}")
        assert idle is not None, "worker jobs kept running after every stream was cancelled"
        assert provider.stopped >= 1  # the storm did reach counts in progress
        assert provider.started == provider.stopped + provider.finished
        fresh = ModelClient.connect(f"127.0.0.1:{port}")
        try:
            sent = time.monotonic()
            assert (await fresh.describe(timeout=10)).name
            print(f"Describe after the storm: {(time.monotonic() - sent) * 1000:.1f} ms")
        finally:
            fresh.close()
    finally:
        for client in clients:
            client.close()
        await server.shutdown(grace_period=0)
