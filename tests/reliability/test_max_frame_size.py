"""The server advertises SETTINGS_MAX_FRAME_SIZE of
:data:`~protocol_py.server.grpc_layer.connections.INBOUND_MAX_FRAME_BYTES` and takes frames up
to that size; a larger frame ends that connection with GOAWAY FRAME_SIZE_ERROR, and the server
keeps serving."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h2.errors
import h2.events
import h2.settings
from hyperframe.frame import DataFrame

from protocol_py.server.grpc_layer.connections import (
    INBOUND_MAX_FRAME_BYTES,
    OUTBOUND_MAX_FRAME_BYTES,
)
from protocol_py_gen.model.v1 import RenderFormat, RenderRequest

from ..support.h2_client import RawH2, grpc_frame
from .conftest import Served, request, still_serving, user


def large_request_body() -> bytes:
    """A StreamCompletion request of about 200 KB, framed: one DATA frame at the server's
    limit, 13 at HTTP/2's default of 16 KiB."""
    message = request()
    message.messages = [user("x" * 200_000)]
    return grpc_frame(bytes(message))


def exchange(served: Served, body: bytes) -> tuple[int, dict[str, Any]]:
    client = RawH2(served.port)
    try:
        assert client.sync()  # the server's SETTINGS frames, all of them, are in
        frame_size: int = client.conn.max_outbound_frame_size
        stream = client.open("StreamCompletion", body)
        return frame_size, client.outcome(stream, limit=20)
    finally:
        client.close()


async def test_a_request_arrives_in_frames_of_the_advertised_size(served: Served) -> None:
    body = large_request_body()
    assert 16_384 < len(body) < INBOUND_MAX_FRAME_BYTES
    frame_size, state = await asyncio.to_thread(exchange, served, body)
    assert frame_size == INBOUND_MAX_FRAME_BYTES
    assert state["ended"], state
    assert state["trailers"].get("grpc-status") == "0", state["trailers"]
    await still_serving(served)


def oversized_frame(served: Served) -> int | None:
    client = RawH2(served.port)
    try:
        stream = client.open("StreamCompletion", None, end=False)
        frame = DataFrame(stream, data=b"\0" * (INBOUND_MAX_FRAME_BYTES + 1))
        client.sock.sendall(frame.serialize())
        for _ in range(100):
            if client.terminated is not None or not client.pump(0.05):
                break
        return None if client.terminated is None else int(client.terminated.error_code)
    finally:
        client.close()


async def test_a_frame_over_the_advertised_size_ends_its_connection_only(served: Served) -> None:
    code = await asyncio.to_thread(oversized_frame, served)
    assert code == h2.errors.ErrorCodes.FRAME_SIZE_ERROR
    await still_serving(served)


class _FrameSizes(RawH2):
    """A client that advertises HTTP/2's largest frame size and window (as grpcio advertises a
    16 MiB frame size) and records the payload size of every DATA frame it receives."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.data_frames: list[int] = []
        self.conn.update_settings(
            {
                h2.settings.SettingCodes.MAX_FRAME_SIZE: 2**24 - 1,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1,
            }
        )
        self.conn.increment_flow_control_window(2**31 - 1 - 65_535)
        self.flush()

    def _record(self, event: Any) -> None:
        if isinstance(event, h2.events.DataReceived):
            self.data_frames.append(event.flow_controlled_length)
        super()._record(event)


def render_twice(served: Served, size: int) -> tuple[list[dict[str, Any]], list[int], bool]:
    body = grpc_frame(
        bytes(
            RenderRequest(
                payload_type="reference.repeat",
                payload=json.dumps({"text": "ab", "times": size // 2}).encode(),
                format=RenderFormat.PLAIN_TEXT,
            )
        )
    )
    client = _FrameSizes(served.port)
    try:
        assert client.sync()
        outcomes = [client.outcome(client.open("Render", body), limit=60) for _ in range(2)]
        return outcomes, client.data_frames, client.terminated is None and not client.closed
    finally:
        client.close()


async def test_a_peer_allowing_16_mib_frames_gets_a_large_reply_in_capped_frames(
    served: Served,
) -> None:
    # two 24 MiB replies on one connection: with 16 MiB frames the first one's buffer passed
    # the per-connection queue bound and the reading client's connection was closed
    outcomes, frames, open_after = await asyncio.to_thread(render_twice, served, 24 * 1024**2)
    for state in outcomes:
        assert state["trailers"].get("grpc-status") == "0", state["trailers"]
        assert len(state["data"]) > 24 * 1024**2
    assert open_after
    assert max(frames) == OUTBOUND_MAX_FRAME_BYTES
    await still_serving(served)
