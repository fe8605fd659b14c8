"""After a client deadline or cancel, the vendor connection is closed within 1 s.

Through the real gRPC server (in process) with the OpenAI adapter, called by google's grpcio
client, against a loopback stub that counts the connections it holds open. 100 runs: 25 each of
(waiting for response headers | mid-stream) x (deadline | explicit cancel), 5 calls at a time.
The sharp edge: grpclib's server-side deadline timer and the client's RST_STREAM cancel the
handler twice, and a second cancellation that interrupts httpcore while it closes the connection
leaves it ESTABLISHED.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from protocol_py.providers.http.cancel import cancel_once, shielded
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import StreamEvent

from ..providers.test_providers_stub import MODEL, make, request
from ..support.stub_upstream import Reply, StubUpstream

PATH = "/model.v1.ModelService/StreamCompletion"
FIRST_CHUNK = (
    b'data: {"id":"c1","model":"gpt-6-sol","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
)
ROUNDS = 5
PER_ROUND = 5
"""Each (phase, ending) pair runs ROUNDS rounds of PER_ROUND concurrent calls: 4 x 25 = 100 runs.
Small rounds keep the server-side deadline timer and the client's RST_STREAM close together,
which is the race that leaked."""
DEADLINE_S = 0.4
"""Long enough for a round's requests to reach the stub on a loaded 2-core machine."""
_lock = threading.Lock()
CLOSE_WITHIN_S = 1.0
"""The contract: the upstream connection is closed within this time of the call's end."""


def _call(channel: grpc.Channel, phase: str, ending: str, calls: list[Any]) -> tuple[str, int]:
    """One grpcio StreamCompletion; returns (status code name, events received).

    A call cancelled while waiting for headers is appended to ``calls`` and cancelled by the
    test once every request has reached the stub.
    """
    method = channel.unary_stream(
        PATH, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    body = bytes(request(MODEL["openai"]))
    received = 0
    call: Any = method(body, timeout=DEADLINE_S if ending == "deadline" else 30)
    if ending == "cancel" and phase == "headers":
        with _lock:
            calls.append(call)
    try:
        for raw in call:
            received += 1
            event = StreamEvent.parse(raw)
            assert event.error is None and event.stop is None  # the stub never ends the turn
            if ending == "cancel" and event.text_delta is not None:
                call.cancel()  # mid-stream: after the first content event
    except grpc.RpcError as exc:
        return exc.code().name, received
    return "OK", received


async def _round(
    stub: StubUpstream, channel: grpc.Channel, pool: ThreadPoolExecutor, phase: str, ending: str
) -> Round:
    """PER_ROUND concurrent calls, asserting the contract; returns what the round covered."""
    loop = asyncio.get_running_loop()
    seen_before = len(stub.seen)
    for _ in range(PER_ROUND):
        if phase == "headers":
            stub.queue(Reply(hang=True))
        else:
            headers = {"content-type": "text/event-stream", "x-request-id": "req-1"}
            stub.queue(Reply(headers=headers, chunks=[FIRST_CHUNK], hold=True))
    calls: list[Any] = []
    running = asyncio.gather(
        *(
            loop.run_in_executor(pool, _call, channel, phase, ending, calls)
            for _ in range(PER_ROUND)
        )
    )
    if ending == "cancel" and phase == "headers":
        for _ in range(2000):  # every request at the stub (bounded: 10 s)
            if len(stub.seen) - seen_before >= PER_ROUND and len(calls) >= PER_ROUND:
                break
            await asyncio.sleep(0.005)
        with _lock:
            for call in calls:
                call.cancel()
    results = await running
    ended = time.monotonic()
    closed = await stub.wait_all_closed(CLOSE_WITHIN_S + 1.0)
    took = time.monotonic() - ended
    stub.replies.clear()  # replies of runs whose deadline passed before they reached the stub
    expected = "DEADLINE_EXCEEDED" if ending == "deadline" else "CANCELLED"
    assert [code for code, _ in results] == [expected] * PER_ROUND
    reached = len(stub.seen) - seen_before
    streamed = sum(received >= 3 for _, received in results)  # start, metadata, text
    if ending == "cancel":  # cancelled only once every run is where the phase says
        assert reached == PER_ROUND
        assert streamed == (PER_ROUND if phase == "mid_stream" else 0)
    else:  # on a loaded machine a deadline may pass before a run gets that far
        assert reached >= 1
        assert streamed >= (1 if phase == "mid_stream" else 0)
    assert closed, f"{stub.open_connections} of {PER_ROUND} vendor connections left open"
    assert took <= CLOSE_WITHIN_S
    return Round(took, reached, streamed)


@dataclass
class Round:
    took: float
    """Seconds from the calls' end until every vendor connection was closed."""
    reached: int
    """Runs whose request reached the vendor."""
    streamed: int
    """Runs that received content before their deadline or cancel."""


@pytest.mark.parametrize("phase", ["headers", "mid_stream"])
@pytest.mark.parametrize("ending", ["deadline", "cancel"])
async def test_deadline_or_cancel_closes_vendor_connection_within_1s(
    phase: str, ending: str
) -> None:
    async with StubUpstream() as stub:
        server = ModelServer(make("openai", stub.url))
        port = await server.start("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        try:
            with (
                grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
                ThreadPoolExecutor(PER_ROUND) as pool,
            ):
                rounds = [await _round(stub, channel, pool, phase, ending) for _ in range(ROUNDS)]
                print(
                    f"{phase}/{ending}: {ROUNDS * PER_ROUND} runs "
                    f"({sum(r.reached for r in rounds)} reached the vendor, "
                    f"{sum(r.streamed for r in rounds)} received content), every vendor "
                    f"connection closed; worst {max(r.took for r in rounds) * 1000:.0f} ms after "
                    "the calls ended"
                )
                # the server still serves: a normal completion afterwards
                stub.queue(
                    Reply(
                        headers={"content-type": "text/event-stream"},
                        chunks=[
                            FIRST_CHUNK,
                            b'data: {"id":"c1","choices":[{"index":0,"delta":{},'
                            b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
                        ],
                    )
                )
                method = channel.unary_stream(
                    PATH, request_serializer=lambda b: b, response_deserializer=lambda b: b
                )
                body = bytes(request(MODEL["openai"]))
                raws = await loop.run_in_executor(pool, lambda: list(method(body, timeout=10)))
                last = StreamEvent.parse(raws[-1])
                assert last.stop is not None
        finally:
            await server.shutdown(grace_period=0)


async def test_cancel_once_cancels_the_operation_once_and_waits_for_its_cleanup() -> None:
    seen: list[str] = []

    async def operation() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            await asyncio.sleep(0.05)  # a cleanup that awaits, as httpcore's close does
            await asyncio.sleep(0)
            seen.append("cleaned up")
            raise

    caller = asyncio.ensure_future(cancel_once(operation()))
    await asyncio.sleep(0.01)
    caller.cancel()  # grpclib's deadline timer
    await asyncio.sleep(0.01)
    caller.cancel()  # the client's RST_STREAM, during the cleanup
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert seen == ["cancelled", "cleaned up"]


async def test_shielded_close_runs_to_completion_through_repeated_cancellation() -> None:
    seen: list[str] = []

    async def close() -> None:
        for _ in range(3):
            await asyncio.sleep(0.01)
        seen.append("closed")

    caller = asyncio.ensure_future(shielded(close()))
    await asyncio.sleep(0)
    for _ in range(3):
        caller.cancel()
        await asyncio.sleep(0.005)
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert seen == ["closed"]


async def test_cancel_once_returns_the_result_and_propagates_errors() -> None:
    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def boom() -> None:
        raise ValueError("upstream said no")

    assert await cancel_once(value()) == 7
    with pytest.raises(ValueError, match="upstream said no"):
        await cancel_once(boom())
