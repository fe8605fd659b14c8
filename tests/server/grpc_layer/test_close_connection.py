"""A connection the server closes is aborted once it has had its wait for the GOAWAY, so a
peer that reads nothing cannot keep its socket and descriptor open."""

from __future__ import annotations

import asyncio

import pytest

from protocol_py._compat import grpclib_private
from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.grpc_layer import connections

from ...support.servers import make_request, start_server


async def test_a_closed_connection_whose_transport_stays_open_is_aborted_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "FLOOD_CLOSE_WAIT", 0.05)
    run = await start_server(ReferenceProvider())
    client = ModelClient.connect(run.address)
    try:
        await client.describe(timeout=30)
        (protocol,) = list(run.server._protocols)
        transport = grpclib_private.connection_transport(protocol.connection)
        aborted: list[bool] = []
        real_abort = transport.abort
        # a peer that reads nothing: the graceful close would wait for a write buffer that
        # never drains
        monkeypatch.setattr(transport, "close", lambda: None)
        monkeypatch.setattr(transport, "abort", lambda: (aborted.append(True), real_abort()))
        connections.close_connection(protocol, "idle connection closed")
        assert grpclib_private.connection_closed(protocol.connection)
        assert aborted == []  # the GOAWAY gets its wait first
        for _ in range(100):
            if aborted:
                break
            await asyncio.sleep(0.01)
        assert aborted == [True]
        other = ModelClient.connect(run.address)
        try:  # still serving
            events = [e async for e in other.stream(make_request("hello"), timeout=60)]
        finally:
            other.close()
        assert events[-1].stop is not None
    finally:
        client.close()
        await run.server.shutdown(grace_period=0)
