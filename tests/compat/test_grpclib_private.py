"""Every accessor of :mod:`protocol_py._compat.grpclib_private` reads what it names on the
installed grpclib (live objects of a real server and client over a unix socket)."""

from __future__ import annotations

import asyncio
import collections
import inspect
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpclib.client
import grpclib.protocol
import grpclib.server
import h2.connection
import pytest
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.utils import Wrapper
from packaging.specifiers import SpecifierSet

import protocol_py._compat
from protocol_py._compat import grpclib_private as private
from protocol_py.codec.wire import WireCodec
from protocol_py_gen.model.v1 import DescribeRequest, DescribeResponse

ECHO = "/compat.Test/Echo"
ABORT = "/compat.Test/Abort"


def test_every_accessor_is_registered_with_the_pinned_window() -> None:
    public = {
        name
        for name, value in vars(private).items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ == private.__name__
    }
    assert public == set(private.CHECKED) - {"NO_LISTENER"}
    assert set(private.CHECKED.values()) == {private.GRPCLIB_WINDOW}
    assert set(private.__all__) == public | {"CHECKED", "GRPCLIB_WINDOW", "NO_LISTENER"}
    assert version("grpclib") in SpecifierSet(private.GRPCLIB_WINDOW)


def test_buffer_queue_and_wrapper_accessors_read_grpclib_objects() -> None:
    acked: list[int] = []
    buffer = grpclib.protocol.Buffer(acked.append)
    assert not private.buffer_ended(buffer)
    buffer.add(b"abc", 3)
    queue = private.buffer_unacked(buffer)
    assert queue.qsize() == 1
    assert [item.data for item in private.queued_items(queue)] == [b"abc"]
    assert queue.qsize() == 1  # looked at, not taken
    assert not private.queue_has_getters(queue)
    assert list(private.buffer_acked(buffer)) == [] and private.buffer_acked_size(buffer) == 0
    private.buffer_ack(buffer, 3)
    assert acked == [3]
    buffer.eof()
    assert private.buffer_ended(buffer)

    wrapper = Wrapper()
    assert private.wrapper_error(wrapper) is None
    error = GRPCError(Status.DEADLINE_EXCEEDED, "late")
    wrapper.cancel(error)
    assert private.wrapper_error(wrapper) is error


async def test_queue_has_getters_sees_a_waiting_task() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    waiter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert private.queue_has_getters(queue)
    queue.put_nowait(1)
    assert await waiter == 1
    assert not private.queue_has_getters(queue)


class _Service:
    """A two-method grpclib service whose handlers read the server-side accessors."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def __mapping__(self) -> dict[str, Handler]:
        return {
            ECHO: Handler(self.echo, Cardinality.UNARY_UNARY, DescribeRequest, DescribeResponse),
        }

    async def echo(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        raw = private.server_h2_stream(stream)
        seen = self.seen
        seen["raw"] = raw
        seen["method"] = private.server_method_name(stream)
        seen["codec"] = private.server_codec(stream)
        seen["send_type"] = private.server_send_type(stream)
        seen["dispatch"] = private.server_send_dispatch(stream)
        seen["h2"] = private.h2_connection(raw)
        seen["transport"] = private.h2_transport(raw)
        seen["connection_h2"] = private.connection_h2(raw.connection)
        seen["connection_transport"] = private.connection_transport(raw.connection)
        seen["closed_while_open"] = private.connection_closed(raw.connection)
        seen["connection"] = raw.connection
        await stream.recv_message()
        seen["ended"] = private.buffer_ended(raw.buffer)
        seen["sent_before"] = private.server_initial_metadata_sent(stream)
        await stream.send_message(DescribeResponse())
        seen["sent_after"] = private.server_initial_metadata_sent(stream)
        counted = stream._messages_sent
        private.count_message_sent(stream)
        seen["counted"] = stream._messages_sent - counted


class _RefusingHandler(grpclib.server.Handler):
    """Answers :data:`ABORT` before dispatch (as the server's admission does)."""

    def accept(self, stream: Any, headers: Any, release_stream: Any) -> None:
        if dict(headers).get(":path") != ABORT:
            super().accept(stream, headers, release_stream)
            return

        async def refuse() -> None:
            try:
                await private.abort(stream, Status.UNAVAILABLE, "refused here")
            finally:
                release_stream()

        private.handler_tasks(self)[stream] = self.loop.create_task(refuse())


class _Server(grpclib.server.Server):
    def _protocol_factory(self) -> H2Protocol:
        handler = _RefusingHandler(*private.handler_arguments(self))
        private.add_handler(self, handler)
        return H2Protocol(handler, *private.protocol_configurations(self))


async def test_server_and_client_accessors_read_a_live_call(tmp_path: Path) -> None:
    protocol_py._compat.install()  # as the server does: refusals carry their content type
    service = _Service()
    server = _Server([service], codec=WireCodec())
    assert private.listener(server) is None
    path = str(tmp_path / "compat.sock")
    await server.start(path=path)
    channel = grpclib.client.Channel(path=path, codec=WireCodec())
    try:
        listening = private.listener(server)
        assert listening is not None and listening.is_serving()
        assert callable(private.server_protocol_factory(server))
        mapping, codec, details, dispatch = private.handler_arguments(server)
        assert set(mapping) == {ECHO} and isinstance(codec, WireCodec)
        assert details is None or hasattr(details, "encode")
        assert dispatch is not None
        config, h2_config = private.protocol_configurations(server)
        assert config is not None and h2_config.client_side is False

        async with channel.request(
            ECHO, Cardinality.UNARY_UNARY, DescribeRequest, DescribeResponse
        ) as call:
            await call.send_message(DescribeRequest(), end=True)
            raw = private.call_h2_stream(call)
            assert isinstance(raw, grpclib.protocol.Stream)
            assert not private.call_initial_metadata_received(call)
            await call.recv_initial_metadata()
            assert private.call_initial_metadata_received(call)
            assert isinstance(private.call_codec(call), WireCodec)
            assert private.call_recv_type(call) is DescribeResponse
            assert private.call_recv_dispatch(call) is private.NO_LISTENER
            with private.call_wrapper(call):
                pass
            assert isinstance(await call.recv_message(), DescribeResponse)
            before = call._messages_received
            private.count_messages_received(call, 2)
            assert call._messages_received == before + 2

        seen = service.seen
        assert seen["method"] == ECHO
        assert isinstance(seen["raw"], grpclib.protocol.Stream)
        assert isinstance(seen["codec"], WireCodec) and seen["send_type"] is DescribeResponse
        assert seen["dispatch"] is private.NO_LISTENER
        assert isinstance(seen["h2"], h2.connection.H2Connection)
        assert seen["connection_h2"] is seen["h2"]
        assert hasattr(seen["transport"], "write")
        assert seen["connection_transport"].get_extra_info("sockname") == path
        assert seen["closed_while_open"] is False
        assert seen["ended"] is True
        assert (seen["sent_before"], seen["sent_after"], seen["counted"]) == (False, True, 1)

        calls = []
        with pytest.raises(GRPCError, match="refused here"):
            async with channel.request(
                ABORT, Cardinality.UNARY_UNARY, DescribeRequest, DescribeResponse
            ) as call:
                calls.append(call)
                await call.send_message(DescribeRequest(), end=True)
                await call.recv_message()
        headers = dict(private.call_h2_stream(calls[0]).headers or [])
        assert headers == {
            ":status": "200",
            "content-type": "application/grpc",
            "grpc-status": str(Status.UNAVAILABLE.value),
            "grpc-message": "refused here",
        }
        seen["connection"].close()  # what a GOAWAY, the write timeout or an eviction runs
        assert private.connection_closed(seen["connection"]) is True
        assert not hasattr(private.connection_h2(seen["connection"]), "_frame_dispatch_table")
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_handler_tables_and_listener_registration(tmp_path: Path) -> None:
    server = grpclib.server.Server([_Service()], codec=WireCodec())
    handler = grpclib.server.Handler(*private.handler_arguments(server))
    assert private.handler_tasks(handler) == {}
    assert private.handler_cancelled(handler) == set()
    private.add_handler(server, handler)
    assert handler in server._handlers

    path = str(tmp_path / "listener.sock")
    listening = await asyncio.get_running_loop().create_unix_server(asyncio.Protocol, path)
    try:
        private.set_listener(server, listening)
        assert private.listener(server) is listening
        server.close()  # grpclib closes the listener it was given
        await server.wait_closed()
        assert not listening.is_serving()
    finally:
        listening.close()


def test_queued_items_is_the_queue_deque() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    queue.put_nowait(7)
    assert isinstance(private.queued_items(queue), collections.deque)
