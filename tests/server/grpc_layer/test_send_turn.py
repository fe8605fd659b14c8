"""Streams share one sending budget per event-loop turn
(protocol_py.server.grpc_layer.connections): once the sends of all streams in a turn have run
longer than SEND_CHECKPOINT_INTERVAL, the next stream yields to the loop before sending on, so
many short replies ready at once go out over several turns, and every one still arrives whole."""

from __future__ import annotations

import asyncio
import time

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.grpc_layer import connections
from protocol_py_gen.model.v1 import StreamEvent

from ...support.servers import make_request, start_server


async def test_a_stream_past_the_shared_turn_budget_yields_and_the_next_turn_gets_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    turn = connections._TurnBudget()
    monkeypatch.setattr(connections, "_turn_budget", turn)
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other callback")
    await connections._yield_if_turn_over()  # due 0.0: the budget is spent
    assert ran == ["other callback"]
    assert turn.due > time.monotonic()  # reset at the start of the next turn
    assert turn.reset_loop is None


async def test_a_stream_within_the_shared_turn_budget_sends_on_without_yielding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    turn = connections._TurnBudget()
    turn.due = time.monotonic() + 60.0
    monkeypatch.setattr(connections, "_turn_budget", turn)
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(ran.append, "other callback")
    await connections._yield_if_turn_over()
    assert ran == []


async def test_a_hundred_concurrent_streams_on_one_connection_all_end_then_it_serves_on() -> None:
    run = await start_server(ReferenceProvider())
    client = ModelClient.connect(run.address)
    try:

        async def one() -> list[StreamEvent]:
            return [e async for e in client.stream(make_request("hello"), timeout=60)]

        replies = await asyncio.gather(*(one() for _ in range(100)))
        again = await one()  # still serving
    finally:
        client.close()
        await run.server.shutdown(grace_period=0)
    assert all(r and r[-1].stop is not None for r in replies)
    assert all(r[0].stream_start is not None for r in replies)
    assert again[-1].stop is not None
