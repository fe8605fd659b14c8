"""The server-wide memory budget (:mod:`protocol_py.server.grpc_layer.memory_budget`): a call
that finds no room is refused with a message naming the bound (in-band for StreamCompletion),
calls already admitted finish, and every call's charge is returned on every path: success,
error, client cancel (RST_STREAM), deadline, lost connection. Each test ends with the server
still serving."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable

from h2.errors import ErrorCodes

from protocol_py.providers.reference import ReferenceProvider
from protocol_py.server import offload
from protocol_py.server.grpc_layer.memory_budget import CallMemory
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    ErrorKind,
    StreamCompletionRequest,
    StreamEvent,
)

from ..support.h2_client import RawH2, grpc_frame
from .conftest import acall, request, serve, still_serving, user
from .test_reply_budget import render_body

MiB = 1024 * 1024


class HeldProvider(ReferenceProvider):
    """The reference provider, holding each stream after its first event until ``release``
    is set (so its request stays charged)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = 0

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        events = super().stream(request, context)
        try:
            yield await anext(events)
            self.started += 1
            await self.release.wait()
            async for event in events:
                yield event
        finally:
            await events.aclose()


async def _until(condition: Callable[[], bool], limit: float = 10.0) -> None:
    """Poll ``condition`` (server state, no event to wait on) for up to ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.02)
    assert condition(), "condition not reached"


def _large_request() -> bytes:
    return bytes(request("word " * (1 * MiB // 5)))  # 1 MiB of text


async def test_a_stream_completion_without_room_gets_an_in_band_overloaded_error() -> None:
    served = await serve(memory_budget=16 * MiB)
    served.server.memory.wait = 0.3
    try:
        hog = CallMemory(served.server.memory)
        hog.resize(15 * MiB)  # another call holds nearly all of it
        started = time.monotonic()
        result = await acall(served.address, "StreamCompletion", _large_request(), stream=True)
        assert result.code == "OK", result  # ended in-band
        events = [StreamEvent.parse(r) for r in result.replies]
        assert len(events) == 1 and events[0].error is not None, events
        error = events[0].error
        assert error.kind == ErrorKind.OVERLOADED and error.retryable
        assert error.message.startswith("request message of ")
        assert (
            f"server memory budget of {16 * MiB} bytes in use ({15 * MiB} held by 1 calls; "
            "bound --memory-budget); retry later"
        ) in error.message
        assert time.monotonic() - started >= 0.29  # it waited for room first
        counted = await acall(
            served.address,
            "CountTokens",
            bytes(
                CountTokensRequest(
                    model_id="reference-large", messages=request("w " * MiB).messages
                )
            ),
        )
        assert counted.code == "RESOURCE_EXHAUSTED", counted
        assert f"server memory budget of {16 * MiB} bytes in use" in counted.details
        assert served.server.memory.refused == 2
        hog.release()
        assert served.server.memory.held == 0
        again = await acall(served.address, "StreamCompletion", _large_request(), stream=True)
        assert again.code == "OK" and StreamEvent.parse(again.replies[-1]).stop is not None
        await still_serving(served)
        assert served.server.memory.held == 0
    finally:
        await served.server.shutdown(grace_period=0)


async def test_a_stream_completion_over_the_whole_budget_ends_with_resource_exhausted() -> None:
    # no retry can succeed on this server: not the in-band, retryable OVERLOADED of a busy one
    served = await serve(memory_budget=1 * MiB)
    try:
        result = await acall(served.address, "StreamCompletion", _large_request(), stream=True)
        assert result.code == "RESOURCE_EXHAUSTED", result
        assert result.replies == []
        assert "more than the whole server memory budget of 1048576 bytes" in result.details
        assert "(bound --memory-budget)" in result.details
        assert served.server.memory.held == 0
        await still_serving(served)
    finally:
        await served.server.shutdown(grace_period=0)


async def test_admitted_calls_finish_while_later_ones_are_refused() -> None:
    provider = HeldProvider()
    served = await serve(provider, memory_budget=3 * MiB)
    served.server.memory.wait = 0.2
    try:
        body = _large_request()
        first = asyncio.create_task(
            acall(served.address, "StreamCompletion", body, stream=True, timeout=60)
        )
        await _until(lambda: provider.started == 1)
        held = served.server.memory.held
        assert held >= 2 * len(body), held  # its request is charged while it runs
        refused = await acall(served.address, "StreamCompletion", body, stream=True)
        assert refused.code == "OK", refused
        events = [StreamEvent.parse(r) for r in refused.replies]
        assert events[0].error is not None and events[0].error.kind == ErrorKind.OVERLOADED
        provider.release.set()
        done = await first
        assert done.code == "OK" and StreamEvent.parse(done.replies[-1]).stop is not None
        await _until(lambda: served.server.memory.held == 0)
        await still_serving(served)
    finally:
        await served.server.shutdown(grace_period=0)


def _raw_call(port: int, body: bytes, *, how: str) -> None:
    """Start a StreamCompletion on a raw connection, then end it as ``how`` says."""
    raw = RawH2(port)
    try:
        framed = grpc_frame(body)
        sid = raw.open("StreamCompletion", None, timeout="2S" if how == "deadline" else None)
        sent = 0
        while sent < len(framed):  # within the flow-control window
            room = min(raw.conn.local_flow_control_window(sid), raw.conn.max_outbound_frame_size)
            if room <= 0:
                raw.pump(0.05)
                continue
            chunk = framed[sent : sent + room]
            sent += len(chunk)
            raw.conn.send_data(sid, chunk, end_stream=sent == len(framed))
            raw.flush()
        if how == "deadline":
            state = raw.outcome(sid, limit=15)
            assert state["headers"].get("grpc-status") == "4", state  # DEADLINE_EXCEEDED
            return
        deadline = time.monotonic() + 10
        while not raw.streams[sid]["data"] and time.monotonic() < deadline:
            raw.pump(0.05)  # its first event: the provider holds it now
        assert raw.streams[sid]["data"], raw.streams[sid]
        if how == "cancel":
            raw.conn.reset_stream(sid, ErrorCodes.CANCEL)
            raw.flush()
            raw.pump(0.2)
    finally:
        raw.close()  # "lost": the connection goes with the call still running


async def test_every_path_returns_the_calls_charge() -> None:
    provider = HeldProvider()
    served = await serve(provider, memory_budget=64 * MiB)
    memory = served.server.memory
    try:
        body = _large_request()
        bad = await acall(served.address, "StreamCompletion", b"\x0a\xff\xff\xff", stream=True)
        assert bad.code == "INVALID_ARGUMENT", bad
        assert memory.held == 0
        for how in ("cancel", "deadline", "lost"):
            before = provider.started
            await asyncio.to_thread(_raw_call, served.port, body, how=how)
            if how != "deadline":  # a deadline may end it before its provider starts
                assert provider.started == before + 1, how
            await _until(lambda: memory.held == 0)
            assert memory.calls == 0, how
        provider.release.set()
        ok = await acall(served.address, "StreamCompletion", body, stream=True)
        assert ok.code == "OK" and StreamEvent.parse(ok.replies[-1]).stop is not None
        assert memory.held == 0 and memory.peak >= 2 * len(body)
        await still_serving(served)
    finally:
        await served.server.shutdown(grace_period=0)


async def test_held_large_replies_are_charged_to_the_same_budget() -> None:
    served = await serve(memory_budget=64 * MiB)
    memory = served.server.memory
    try:
        assert served.server.reply_budget.memory is memory
        hog = CallMemory(memory)
        hog.resize(60 * MiB)  # most of the budget held elsewhere
        reply = await acall(served.address, "Render", render_body(4))
        assert reply.code == "RESOURCE_EXHAUSTED", reply
        assert reply.details.startswith("reply of ")
        assert f"server memory budget of {64 * MiB} bytes in use" in reply.details
        hog.release()
        reply = await acall(served.address, "Render", render_body(4))
        assert reply.code == "OK" and len(reply.replies[0]) > 4 * MiB
        assert memory.held == 0
        await still_serving(served)
    finally:
        await served.server.shutdown(grace_period=0)


def _many_elements_request(messages: int) -> bytes:
    """A StreamCompletion of ``messages`` one-letter user messages (two elements each)."""
    return bytes(request()) + bytes(
        StreamCompletionRequest(messages=[user("a", f"01J{i + 2:023d}") for i in range(messages)])
    )


def _hold_every_worker(release: threading.Event) -> list[asyncio.Task[bool]]:
    """Steps of other requests that hold every CPU worker until ``release`` is set."""
    return [
        asyncio.create_task(offload.run_cpu(offload.OFFLOAD_MIN_BYTES, release.wait))
        for _ in range(offload.MAX_CPU_JOBS)
    ]


async def test_a_call_without_room_is_refused_while_the_worker_is_still_busy() -> None:
    served = await serve(memory_budget=16 * MiB)
    served.server.memory.wait = 0.3
    release = threading.Event()
    try:
        busy = _hold_every_worker(release)
        await asyncio.sleep(0)
        body = _many_elements_request(30_000)  # its worst case needs far more than 16 MiB
        result = await acall(served.address, "StreamCompletion", body, stream=True, timeout=20)
        assert not any(job.done() for job in busy)  # refused without waiting for a worker
        assert result.code == "OK", result  # ended in-band
        events = [StreamEvent.parse(r) for r in result.replies]
        assert len(events) == 1 and events[0].error is not None, events
        assert events[0].error.kind == ErrorKind.OVERLOADED and events[0].error.retryable
        assert served.server.memory.refused == 1
        release.set()
        assert await asyncio.gather(*busy) == [True] * offload.MAX_CPU_JOBS
        await _until(lambda: served.server.memory.held == 0)
        await still_serving(served)
    finally:
        release.set()
        await served.server.shutdown(grace_period=0)


async def test_a_call_with_room_for_its_worst_case_waits_for_the_busy_worker() -> None:
    served = await serve(memory_budget=1024 * MiB)
    served.server.memory.wait = 0.3
    release = threading.Event()
    try:
        busy = _hold_every_worker(release)
        await asyncio.sleep(0)
        body = _many_elements_request(30_000)  # its worst case fits in 1 GiB
        call = asyncio.create_task(
            acall(served.address, "StreamCompletion", body, stream=True, timeout=60)
        )
        await _until(lambda: served.server.memory.held > 2 * len(body))  # decode reserved
        await asyncio.sleep(0.5)  # past its wait for room: it is admitted, so still waits
        assert not call.done() and served.server.memory.refused == 0
        release.set()
        result = await call
        await asyncio.gather(*busy)
        assert result.code == "OK", result
        assert StreamEvent.parse(result.replies[-1]).stop is not None
        assert served.server.memory.refused == 0
        await _until(lambda: served.server.memory.held == 0)
        await still_serving(served)
    finally:
        release.set()
        await served.server.shutdown(grace_period=0)
