"""grpclib_cancel_once: grpclib delivers a call's cancellation once and keeps its first cause,
so a provider's cleanup that awaits is not cut by the next cause milliseconds later."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import grpclib.utils
import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality
from grpclib.exceptions import GRPCError, StreamTerminatedError

from protocol_py._compat import grpclib_cancel_once, grpclib_private
from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.grpc_layer.connections import TransportHandler
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent, TextDelta

from ..support.servers import make_request, start_server

PATH = "/model.v1.ModelService/StreamCompletion"


def test_install_is_idempotent_and_marks_the_method() -> None:
    assert grpclib_cancel_once.install()
    assert grpclib_cancel_once.install()
    assert getattr(grpclib.utils.Wrapper.cancel, "_protocol_py_cancel_once", False)


async def test_a_second_cause_neither_cancels_again_nor_replaces_the_first() -> None:
    assert grpclib_cancel_once.install()
    wrapper = grpclib.utils.Wrapper()
    deadline = TimeoutError("Deadline exceeded")

    async def work() -> None:
        with wrapper:
            await asyncio.sleep(3600)

    task = asyncio.create_task(work())
    await asyncio.sleep(0)
    wrapper.cancel(deadline)
    wrapper.cancel(ConnectionError("stream reset"))
    assert task.cancelling() == 1
    with pytest.raises(TimeoutError) as info:
        await task
    assert info.value is deadline


class SlowCleanup(ReferenceProvider):
    """Streams until its call is cancelled, then closes "its upstream" for 0.3 s in
    ``finally`` and re-raises, as the provider contract asks."""

    def __init__(self) -> None:
        super().__init__()
        self.cleanup_done = False
        self.ended = asyncio.Event()

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        try:
            index = 0
            while True:
                yield StreamEvent(text_delta=TextDelta(text=f"t{index}"))
                index += 1
                await asyncio.sleep(0.02)
        finally:
            try:
                await asyncio.sleep(0.3)
                self.cleanup_done = True
            finally:
                self.ended.set()


@pytest.mark.parametrize("ended_by", ["deadline", "cancel then connection closed"])
async def test_a_cleanup_that_awaits_runs_to_its_end(
    ended_by: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    provider = SlowCleanup()
    running = await start_server(provider)
    try:
        if ended_by == "deadline":
            channel = Channel("127.0.0.1", running.port)
            with contextlib.suppress(asyncio.TimeoutError, GRPCError):
                async with channel.request(
                    PATH,
                    Cardinality.UNARY_STREAM,
                    StreamCompletionRequest,
                    StreamEvent,
                    timeout=0.2,
                ) as stream:
                    await stream.send_message(make_request(), end=True)
                    while await stream.recv_message() is not None:
                        pass
            channel.close()  # the reset and the closed connection follow the deadline
        else:
            client = ModelClient.connect(running.address)
            async with contextlib.aclosing(client.stream(make_request())) as events:
                async for _ in events:
                    break  # leaving the loop cancels the call
            client.close()
        started = time.monotonic()
        await asyncio.wait_for(provider.ended.wait(), timeout=5)
        took = time.monotonic() - started
    finally:
        await running.server.shutdown(grace_period=0)
    assert provider.cleanup_done is True
    assert took < 1.0
    records = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith('{"rpc": "StreamCompletion"')
    ]
    outcome = "deadline_exceeded" if ended_by == "deadline" else "cancelled"
    assert len(records) == 1 and f'"outcome": "{outcome}"' in records[0]


class _Stream:
    """What TransportHandler.cancel reads of a stream: its cancellation wrapper."""

    def __init__(self, wrapper: grpclib.utils.Wrapper) -> None:
        self.wrapper = wrapper


@pytest.mark.parametrize("inside", [True, False], ids=["in its handler", "sending trailers"])
async def test_a_reset_cancels_the_call_task_exactly_once(inside: bool) -> None:
    """grpclib reports a reset to the call's wrapper, then to its handler: a task inside the
    wrapper was cancelled by the first and is not cancelled again; one that had left it
    (returned, sending its trailers) is cancelled by the second."""
    assert grpclib_cancel_once.install()
    wrapper = grpclib.utils.Wrapper()
    stream = _Stream(wrapper)
    blocked = asyncio.Event()

    async def call() -> None:
        with wrapper:
            if inside:
                await blocked.wait()
            await asyncio.sleep(0)
        await blocked.wait()  # after the method: the trailers wait for the transport

    task = asyncio.create_task(call())
    await asyncio.sleep(0.01)
    handler = object.__new__(TransportHandler)  # only its call tables, as grpclib keeps them
    handler._tasks = {stream: task}
    handler._cancelled = set()
    wrapper.cancel(StreamTerminatedError("Stream reset by remote party"))
    handler.cancel(stream)
    assert task.cancelling() == 1
    assert grpclib_private.handler_cancelled(handler) == {task}
    with pytest.raises((asyncio.CancelledError, StreamTerminatedError)):
        await task
