"""Stream starts share the loop turn's budget (protocol_py.server.grpc_layer.connections:
``wait_for_start_turn``): a start (the request's decode, validation and token count, then the
provider's first event) runs only while the turn's SEND_CHECKPOINT_INTERVAL lasts, or as the
first start after a new budget began; past it, it waits in a first-in first-out queue, woken
once, in order, when a budget has room for it. So a
Describe on another connection is answered while a storm of streams is still starting, every
stream still ends whole, and the server serves on afterwards."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncIterator

import grpc  # type: ignore[import-untyped]
import pytest

from protocol_py._compat import grpclib_private
from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.grpc_layer import connections
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ..support.servers import make_request, start_server

STREAMS = 200
"""Streams started at once: with a budget of no time each needs its own loop turn to start."""


class CountingStarts(ReferenceProvider):
    """The reference provider, counting the streams it has begun (their first advance)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0
        self.first = asyncio.Event()

    async def stream(  # type: ignore[override]
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.started += 1
        self.first.set()
        async for event in super().stream(request, context):
            yield event


@pytest.fixture
def fresh_budget(monkeypatch: pytest.MonkeyPatch) -> connections._TurnBudget:
    turn = connections._TurnBudget()
    monkeypatch.setattr(connections, "_turn_budget", turn)
    return turn


async def test_a_start_past_the_turn_budget_waits_for_a_new_one_then_counts(
    fresh_budget: connections._TurnBudget,
) -> None:
    fresh_budget.starts = 1  # one start already ran on this (spent) budget
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other callback")
    await connections.wait_for_start_turn()
    assert ran == ["other callback"]  # the loop had a turn first
    assert fresh_budget.due > time.monotonic() - connections.SEND_CHECKPOINT_INTERVAL
    assert fresh_budget.starts == 1  # this start, on the new budget


async def test_the_first_start_on_a_spent_budget_runs_at_once(
    fresh_budget: connections._TurnBudget,
) -> None:
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other callback")
    await connections.wait_for_start_turn()  # due 0.0, but no start yet: starts progress
    assert ran == []
    assert fresh_budget.starts == 1


async def test_starts_within_the_turn_budget_run_without_yielding(
    fresh_budget: connections._TurnBudget,
) -> None:
    fresh_budget.due = time.monotonic() + 60.0
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other callback")
    for _ in range(5):
        await connections.wait_for_start_turn()
    assert ran == []
    assert fresh_budget.starts == 5


async def test_a_start_cancelled_while_it_waits_never_runs_or_counts(
    fresh_budget: connections._TurnBudget,
) -> None:
    fresh_budget.starts = 1
    ran: list[str] = []

    async def start() -> None:
        await connections.wait_for_start_turn()
        ran.append("start")

    task = asyncio.create_task(start())
    await asyncio.sleep(0)  # it is waiting for the next budget
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []
    assert fresh_budget.starts in (0, 1)  # the new budget (0) or the old one: not counted


class CountingWakes(connections._TurnBudget):
    """The turn budget, counting the waiting starts it woke."""

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0

    def wake_next(self) -> None:
        before = len(self.waiting)
        super().wake_next()
        self.wakes += 1 if len(self.waiting) < before else 0


@pytest.fixture
def counting_budget(monkeypatch: pytest.MonkeyPatch) -> CountingWakes:
    turn = CountingWakes()
    monkeypatch.setattr(connections, "_turn_budget", turn)
    return turn


async def _queued_starts(
    turn: connections._TurnBudget, count: int
) -> tuple[list[asyncio.Task[None]], list[int]]:
    """``count`` starts queued behind a spent budget (in the order they were created), each
    appending its number to the list returned once it is let through."""
    turn.starts = 1  # one start already ran on this (spent) budget
    order: list[int] = []

    async def start(number: int) -> None:
        await connections.wait_for_start_turn()
        order.append(number)

    tasks = [asyncio.create_task(start(n)) for n in range(count)]
    await asyncio.sleep(0)  # each has asked once and is queued
    assert len(turn.waiting) == count
    return tasks, order


async def test_waiting_starts_are_woken_once_each_in_the_order_they_came(
    counting_budget: CountingWakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget of no time: each new budget lets exactly one start through
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 0.0)
    tasks, order = await _queued_starts(counting_budget, 50)
    await asyncio.gather(*tasks)
    assert order == list(range(50))
    # each woken by its budget, and at most once more by the start before it (finding that
    # budget spent); waiters that re-checked the budget every turn took 50 * 49 / 2 steps
    assert counting_budget.wakes <= 2 * 50
    assert not counting_budget.waiting
    await connections.wait_for_start_turn()  # later starts still get through
    assert counting_budget.starts >= 1


async def test_a_new_budget_lets_through_in_order_the_waiting_starts_that_fit_in_it(
    counting_budget: CountingWakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 60.0)  # room for all
    tasks, order = await _queued_starts(counting_budget, 5)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert counting_budget.starts == 5  # all on the one new budget
    assert counting_budget.wakes == 5


async def test_a_new_start_queues_behind_those_already_waiting(
    fresh_budget: connections._TurnBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 60.0)
    tasks, order = await _queued_starts(fresh_budget, 3)
    fresh_budget.due = time.monotonic() + 60.0  # the budget has room again, but others wait

    async def late() -> None:
        await connections.wait_for_start_turn()
        order.append(99)

    tasks.append(asyncio.create_task(late()))
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 99]


async def test_a_start_woken_then_cancelled_before_it_runs_wakes_the_next_one(
    fresh_budget: connections._TurnBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 60.0)
    tasks, order = await _queued_starts(fresh_budget, 3)
    fresh_budget.reset()  # wakes the first waiter; its task has not run yet
    tasks[0].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert order == [1, 2]  # the cancelled start never ran; the others did, in order
    assert not fresh_budget.waiting


async def test_a_start_cancelled_while_queued_is_skipped(
    fresh_budget: connections._TurnBudget,
) -> None:
    tasks, order = await _queued_starts(fresh_budget, 3)
    tasks[1].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert order == [0, 2]
    assert not fresh_budget.waiting


async def test_a_describe_is_answered_while_a_storm_of_streams_is_still_starting(
    fresh_budget: connections._TurnBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget of no time: each new budget lets exactly one start through; grpcio's C core
    # (another thread) writes all the requests at once, so they arrive in a few reads
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 0.0)
    provider = CountingStarts()
    run = await start_server(provider)
    other = ModelClient.connect(run.address)
    try:
        await other.describe(timeout=30)  # its connection is open before the storm
        body = bytes(make_request("hello"))
        with grpc.insecure_channel(run.address) as channel:
            call = channel.unary_stream("/model.v1.ModelService/StreamCompletion")
            calls = await asyncio.to_thread(
                lambda: [call(body, timeout=60) for _ in range(STREAMS)]
            )
            await provider.first.wait()
            description = await other.describe(timeout=30)
            started_at_describe = provider.started
            # each reply read in its own thread: none waits behind another's window
            with concurrent.futures.ThreadPoolExecutor(STREAMS) as pool:
                replies = await asyncio.gather(
                    *(
                        asyncio.wrap_future(
                            pool.submit(lambda c=c: [StreamEvent.parse(r) for r in c])
                        )
                        for c in calls
                    )
                )
        again = [e async for e in other.stream(make_request("hello again"), timeout=60)]
        await other.describe(timeout=30)  # still serving
    finally:
        other.close()
        await run.server.shutdown(grace_period=0)
    assert description.name  # a real answer
    assert 0 < started_at_describe < STREAMS // 2  # answered while most were still to start
    assert provider.started == STREAMS + 1
    assert all(r[0].stream_start is not None and r[-1].stop is not None for r in replies)
    assert [e.text_delta.text for e in replies[0] if e.text_delta] == [
        e.text_delta.text for e in replies[-1] if e.text_delta
    ]  # the same events, in the same order, on every stream
    assert again[-1].stop is not None


async def test_a_read_is_fed_to_h2_in_slices_in_order_across_turns_and_every_stream_ends_whole(
    fresh_budget: connections._TurnBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget of no time: each new budget feeds one slice of 512 bytes, of all connections
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 0.0)
    monkeypatch.setattr(connections, "FEED_SLICE_BYTES", 512)
    received: dict[int, list[bytes]] = {}
    fed: dict[int, list[bytes]] = {}
    real_received = connections.TransportProtocol.data_received
    real_feed = connections.TransportProtocol._feed

    def data_received(self: connections.TransportProtocol, data: bytes) -> None:
        received.setdefault(id(self), []).append(data)
        real_received(self, data)

    def feed(self: connections.TransportProtocol, data: bytes) -> None:
        fed.setdefault(id(self), []).append(data)
        real_feed(self, data)

    monkeypatch.setattr(connections.TransportProtocol, "data_received", data_received)
    monkeypatch.setattr(connections.TransportProtocol, "_feed", feed)
    provider = CountingStarts()
    run = await start_server(provider)
    try:
        body = bytes(make_request("a long prompt " * 300))  # 4 KiB: several slices each
        with grpc.insecure_channel(run.address) as channel:
            call = channel.unary_stream("/model.v1.ModelService/StreamCompletion")
            calls = await asyncio.to_thread(lambda: [call(body, timeout=60) for _ in range(20)])
            with concurrent.futures.ThreadPoolExecutor(20) as pool:
                replies = await asyncio.gather(
                    *(
                        asyncio.wrap_future(
                            pool.submit(lambda c=c: [StreamEvent.parse(r) for r in c])
                        )
                        for c in calls
                    )
                )
        other = ModelClient.connect(run.address)
        try:
            description = await other.describe(timeout=30)  # still serving, a new connection
            again = [e async for e in other.stream(make_request("hello"), timeout=60)]
        finally:
            other.close()
    finally:
        await run.server.shutdown(grace_period=0)
    slices = [piece for pieces in fed.values() for piece in pieces]
    assert max(len(piece) for piece in slices) <= 512
    assert len(slices) > sum(len(reads) for reads in received.values())  # reads were cut
    for key, reads in received.items():
        assert b"".join(fed[key]) == b"".join(reads)  # every byte, in the order it came
    assert all(r[0].stream_start is not None and r[-1].stop is not None for r in replies)
    assert [e.text_delta.text for e in replies[0] if e.text_delta] == [
        e.text_delta.text for e in replies[-1] if e.text_delta
    ]
    assert description.name
    assert again[-1].stop is not None


class QueuedReads:
    """A connection's side of the feed queue: ``slices`` slices left, each fed one logged."""

    def __init__(self, name: str, slices: int, log: list[str]) -> None:
        self.name = name
        self.left = slices
        self.log = log
        self._unfed: list[bytes] | None = [b"x"]
        self.resumed = False

    def _feed_slice(self) -> bool:
        self.log.append(f"{self.name}{self.left}")
        connections._turn_budget.feeds += 1  # as a real slice counts itself
        self.left -= 1
        return self.left > 0

    def _fed_all(self) -> None:
        self._unfed = None
        self.resumed = True


async def test_queued_connections_are_fed_one_slice_each_in_turn_and_resume_reading(
    fresh_budget: connections._TurnBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget of no time: each new turn feeds one slice
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 0.0)
    queue = connections._FeedQueue()
    log: list[str] = []
    large, medium, small = (QueuedReads(n, k, log) for n, k in (("a", 3), ("b", 2), ("c", 1)))
    for reads in (large, medium, small):
        queue.add(reads)  # type: ignore[arg-type]
    turns = 0
    while queue.queue:
        await asyncio.sleep(0)
        turns += 1
    assert log == ["a3", "b2", "c1", "a2", "b1", "a1"]  # one slice each, in turn
    assert turns == 6  # one slice per turn (each turn's budget spent at once)
    assert large.resumed and medium.resumed and small.resumed


async def test_a_queued_connection_lost_meanwhile_is_skipped(
    fresh_budget: connections._TurnBudget,
) -> None:
    queue = connections._FeedQueue()
    log: list[str] = []
    lost, other = QueuedReads("a", 2, log), QueuedReads("b", 1, log)
    queue.add(lost)  # type: ignore[arg-type]
    queue.add(other)  # type: ignore[arg-type]
    lost._unfed = None  # connection_lost drops the unfed bytes
    while queue.queue:
        await connections.checkpoint()
    assert log == ["b1"]
    assert other.resumed and not lost.resumed


async def test_bytes_still_queued_when_the_server_closes_the_connection_are_dropped(
    fresh_budget: connections._TurnBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget of no time: a read waits in the feed queue slice after slice; the server closes
    # the connection (as a GOAWAY, the write timeout or an eviction does) after its first slice
    monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 0.0)
    monkeypatch.setattr(connections, "FEED_SLICE_BYTES", 512)
    fed: list[int] = []
    closed: list[asyncio.Transport] = []
    real_feed = connections.TransportProtocol._feed

    def feed(self: connections.TransportProtocol, data: bytes) -> None:
        real_feed(self, data)
        fed.append(len(data))
        if len(fed) == 3:  # preface and SETTINGS fed: the request's bytes wait behind
            # a peer that reads nothing keeps its transport open after the close (its write
            # buffer never drains): the connection is closed but not lost
            transport = grpclib_private.connection_transport(self.connection)
            monkeypatch.setattr(transport, "close", lambda: None)
            self.processor.close("closed by the server")
            closed.append(transport)

    monkeypatch.setattr(connections.TransportProtocol, "_feed", feed)
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    run = await start_server(CountingStarts())
    try:
        body = bytes(make_request("a long prompt " * 300))  # 4 KiB: several slices
        with grpc.insecure_channel(run.address) as channel:
            call = channel.unary_stream("/model.v1.ModelService/StreamCompletion")
            with pytest.raises(grpc.RpcError):
                await asyncio.to_thread(lambda: list(call(body, timeout=30)))
        for _ in range(20):  # the queue's later turns
            await asyncio.sleep(0)
        monkeypatch.setattr(connections.TransportProtocol, "_feed", real_feed)
        monkeypatch.setattr(connections, "SEND_CHECKPOINT_INTERVAL", 0.01)
        other = ModelClient.connect(run.address)
        try:
            description = await other.describe(timeout=30)  # still serving
            again = [e async for e in other.stream(make_request("hello"), timeout=60)]
        finally:
            other.close()
    finally:
        loop.set_exception_handler(None)
        for transport in closed:
            transport.abort()
        await run.server.shutdown(grace_period=0)
    assert errors == []  # no callback raised (h2 was never fed after the close)
    assert len(fed) == 3
    assert description.name
    assert again[-1].stop is not None


async def test_a_large_data_payload_is_fed_to_h2_whole_within_one_frame_more_than_a_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 1 MiB request's DATA frames (256 KiB payloads) are fed to h2 to their end: a few
    slices, each at most FEED_SLICE_BYTES plus one frame, not one slice per 8 KiB; the request
    is answered whole and the server serves on."""
    fed: list[int] = []
    real_feed = connections.TransportProtocol._feed

    def feed(self: connections.TransportProtocol, data: bytes) -> None:
        fed.append(len(data))
        real_feed(self, data)

    monkeypatch.setattr(connections.TransportProtocol, "_feed", feed)
    run = await start_server(CountingStarts())
    client = ModelClient.connect(run.address)
    try:
        request = make_request("a long prompt " * 75_000)  # about 1 MiB
        events = [e async for e in client.stream(request, timeout=60)]
        assert events[-1].stop is not None
        size = len(bytes(request))
        assert sum(fed) > size
        assert max(fed) > connections.FEED_SLICE_BYTES
        assert max(fed) <= connections.FEED_SLICE_BYTES + connections.INBOUND_MAX_FRAME_BYTES + 9
        assert len(fed) < size // connections.FEED_SLICE_BYTES // 4  # 8 KiB slices: 128
        assert (await client.describe(timeout=30)).name  # still serving
    finally:
        client.close()
        await run.server.shutdown(grace_period=0)
