"""A unary or server-streaming call carries
exactly one request message.

Two messages (grpcio's ``stream_unary`` / ``stream_stream`` on these methods, or a second
message sent while a stream runs) and no message at all both fail with INTERNAL naming the
method, as in grpc-java and grpc-go, with exactly one JSON record and the server still serving.
A client that keeps its request side open after the one message is answered as usual.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.grpc_layer.cardinality import EXTRA_MESSAGE, NO_MESSAGE
from protocol_py_gen.model.v1 import CountTokensRequest, RenderRequest

from ..support.h2_client import RawH2, grpc_frame
from .conftest import SERVICE, Captured, Served, raw_call, request, serve, still_serving
from .test_statuses import one_record

BODIES: dict[str, bytes] = {
    "GetCapabilities": b"",
    "Describe": b"",
    "Configure": b"",
    "CountTokens": bytes(CountTokensRequest(model_id="reference-large")),
    "Render": bytes(RenderRequest(payload_type="reference.echo", payload=b"abc")),
    "StreamCompletion": bytes(request()),
}


def grpcio_messages(address: str, rpc: str, messages: list[bytes]) -> tuple[str, str, int]:
    """Call ``rpc`` through grpcio with ``messages`` as a request stream (``stream_unary`` or,
    for StreamCompletion, ``stream_stream``): ``(status code name, details, replies)``."""
    with grpc.insecure_channel(address) as channel:
        try:
            if rpc == "StreamCompletion":
                replies = list(channel.stream_stream(SERVICE + rpc)(iter(messages), timeout=20))
            else:
                replies = [channel.stream_unary(SERVICE + rpc)(iter(messages), timeout=20)]
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or "", 0
    return "OK", "", len(replies)


@pytest.mark.parametrize("rpc", list(BODIES))
async def test_two_request_messages_fail_with_internal_naming_the_method(
    served: Served, logs: Captured, rpc: str
) -> None:
    body = BODIES[rpc]
    code, details, _ = await asyncio.to_thread(grpcio_messages, served.address, rpc, [body, body])
    assert code == "INTERNAL", (code, details)
    assert details == f"{EXTRA_MESSAGE} to {SERVICE}{rpc}"
    record = await one_record(logs, rpc)
    assert (record["outcome"], record["error_kind"]) == ("error", "INTERNAL")
    assert record["detail"] == details
    assert logs.errors() == []
    await still_serving(served)


@pytest.mark.parametrize("rpc", list(BODIES))
async def test_no_request_message_fails_with_internal_naming_the_method(
    served: Served, logs: Captured, rpc: str
) -> None:
    code, details, _ = await asyncio.to_thread(grpcio_messages, served.address, rpc, [])
    assert code == "INTERNAL", (code, details)
    assert details == f"{NO_MESSAGE} to {SERVICE}{rpc}"
    record = await one_record(logs, rpc)
    assert (record["outcome"], record["error_kind"]) == ("error", "INTERNAL")
    assert logs.errors() == []
    await still_serving(served)


@pytest.mark.parametrize("rpc", ["StreamCompletion", "Render", "Configure"])
async def test_empty_data_frame_with_end_stream_is_no_request_message(
    served: Served, logs: Captured, rpc: str
) -> None:
    reply = await raw_call(served.port, rpc, b"")
    assert reply.grpc_status == "13", reply  # INTERNAL
    assert reply.grpc_message == f"{NO_MESSAGE} to {SERVICE}{rpc}"
    assert (await one_record(logs, rpc))["error_kind"] == "INTERNAL"
    await still_serving(served)


@pytest.mark.parametrize("rpc", ["Describe", "StreamCompletion"])
async def test_two_messages_in_one_data_frame_fail_with_internal(
    served: Served, logs: Captured, rpc: str
) -> None:
    body = BODIES[rpc]
    reply = await raw_call(served.port, rpc, grpc_frame(body) * 2)
    assert reply.grpc_status == "13", reply
    assert reply.grpc_message == f"{EXTRA_MESSAGE} to {SERVICE}{rpc}"
    assert (await one_record(logs, rpc))["error_kind"] == "INTERNAL"
    await still_serving(served)


def second_message_mid_stream(port: int) -> dict[str, Any]:
    """Open a StreamCompletion without END_STREAM, wait for its first events, then send a
    second message: the stream's final state and the seconds it took to end after it."""
    raw = RawH2(port)
    try:
        body = grpc_frame(BODIES["StreamCompletion"])
        sid = raw.open("StreamCompletion", body, end=False)
        deadline = time.monotonic() + 10
        while len(raw.streams[sid]["data"]) < 100 and time.monotonic() < deadline:
            raw.pump(0.05)
        events_before = len(raw.streams[sid]["data"])
        sent = time.monotonic()
        raw.send(sid, body, end=True)
        state = raw.outcome(sid, limit=10)
        return {"state": state, "before": events_before, "took": time.monotonic() - sent}
    finally:
        raw.close()


async def test_second_message_during_a_running_stream_ends_it_with_internal(
    logs: Captured,
) -> None:
    provider = ReferenceProvider()
    await provider.configure({"pace_tokens_per_second": 100})  # a stream of ~1.5 s
    run = await serve(provider)
    try:
        result = await asyncio.to_thread(second_message_mid_stream, run.port)
        print(f"stream ended {result['took'] * 1000:.1f} ms after the second message")
        state = result["state"]
        assert result["before"] >= 100  # events were flowing before the second message
        assert state["headers"].get("grpc-status") == "13", state
        assert state["headers"].get("grpc-message", "").startswith(EXTRA_MESSAGE)
        assert result["took"] < 1  # ended at once, not when the paced stream would have
        record = await one_record(logs, "StreamCompletion")
        assert (record["outcome"], record["error_kind"]) == ("error", "INTERNAL")
        assert record["detail"] == f"{EXTRA_MESSAGE} to {SERVICE}StreamCompletion"
        assert logs.errors() == []
        await still_serving(run)
    finally:
        await run.server.shutdown(grace_period=0)


def stream_with_request_side_open(port: int) -> tuple[dict[str, Any], float]:
    raw = RawH2(port)
    try:
        started = time.monotonic()
        sid = raw.open("StreamCompletion", grpc_frame(BODIES["StreamCompletion"]), end=False)
        return raw.outcome(sid, limit=20), time.monotonic() - started
    finally:
        raw.close()


async def test_stream_with_request_side_left_open_is_served_past_the_receive_timeout(
    logs: Captured,
) -> None:
    """The one message is read, so neither the check for a second one nor the receive timeout
    cuts a stream whose client never sends END_STREAM."""
    provider = ReferenceProvider()
    await provider.configure({"pace_tokens_per_second": 100})
    run = await serve(provider, receive_timeout=0.2)
    try:
        state, took = await asyncio.to_thread(stream_with_request_side_open, run.port)
        print(f"paced stream with the request side open took {took:.2f} s")
        assert took > 0.6  # longer than three times the receive timeout
        assert state["headers"].get("grpc-status") == "0", state
        assert (await one_record(logs, "StreamCompletion"))["stop"] == "END_TURN"
        await still_serving(run)
    finally:
        await run.server.shutdown(grace_period=0)


def reset_while_request_side_open(port: int) -> dict[str, Any]:
    """Send the one message without END_STREAM, then reset the stream within the half-close
    wait; a Describe on the same connection afterwards."""
    raw = RawH2(port)
    try:
        sid = raw.open("CountTokens", grpc_frame(BODIES["CountTokens"]), end=False)
        time.sleep(0.1)
        raw.conn.reset_stream(sid)
        raw.flush()
        describe = raw.open("Describe", grpc_frame(b""))
        return raw.outcome(describe, limit=5)
    finally:
        raw.close()


async def test_reset_during_the_half_close_wait_leaves_no_watcher_behind(
    served: Served, logs: Captured
) -> None:
    before = {t for t in asyncio.all_tasks() if "_watch" in repr(t.get_coro())}
    state = await asyncio.to_thread(reset_while_request_side_open, served.port)
    assert state["headers"].get("grpc-status") == "0", state
    await asyncio.sleep(0.1)
    left = {t for t in asyncio.all_tasks() if "_watch" in repr(t.get_coro())} - before
    assert left == set()
    assert (await one_record(logs, "CountTokens"))["outcome"] == "cancelled"
    await still_serving(served)
