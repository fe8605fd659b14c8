"""A connection that floods control frames (PING, SETTINGS, PRIORITY, RST_STREAM, empty DATA)
faster than :data:`~protocol_py.server.grpc_layer.connections.CONTROL_FRAME_RATE` beyond its
allowance of :data:`~protocol_py.server.grpc_layer.connections.CONTROL_FRAME_BURST` gets GOAWAY
ENHANCE_YOUR_CALM and is closed, with one WARNING; other clients keep being served."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import h2.errors
import pytest
from hyperframe.frame import DataFrame, PingFrame, PriorityFrame, SettingsFrame

from protocol_py.server.grpc_layer.connections import CONTROL_FRAME_BURST, ControlFrameCounter

from ..support.h2_client import RawH2, grpc_frame
from .conftest import Served, still_serving


def ping(i: int, _stream: int) -> bytes:
    return PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize()


def settings(_i: int, _stream: int) -> bytes:
    return SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 65_535}).serialize()


def priority(_i: int, stream: int) -> bytes:
    return PriorityFrame(stream, depends_on=0, stream_weight=16).serialize()


def empty_data(_i: int, stream: int) -> bytes:
    return DataFrame(stream, data=b"").serialize()


FLOODS: dict[str, Callable[[int, int], bytes]] = {
    "PING": ping,
    "SETTINGS": settings,
    "PRIORITY": priority,
    "empty DATA": empty_data,
}


@pytest.mark.parametrize("kind", list(FLOODS))
async def test_a_control_frame_flood_gets_goaway_enhance_your_calm(
    served: Served, logs: Any, kind: str
) -> None:
    frame = FLOODS[kind]

    def flood() -> tuple[Any, bool, int]:
        raw = RawH2(served.port)
        stream = raw.open("StreamCompletion", None, end=False)
        sent = 0
        try:
            # never read the ACKs while flooding: 10x the burst, in writes of 500 frames
            for start in range(0, 10 * CONTROL_FRAME_BURST, 500):
                try:
                    raw.sock.sendall(b"".join(frame(start + i, stream) for i in range(500)))
                except OSError:
                    break
                sent += 500
            deadline = time.monotonic() + 5
            while raw.terminated is None and not raw.closed and time.monotonic() < deadline:
                raw.pump(0.05)
            return raw.terminated, raw.closed, sent
        finally:
            raw.close()

    terminated, _closed, sent = await asyncio.to_thread(flood)
    print(f"{kind} flood: {sent} frames sent before the connection closed")
    assert terminated is not None, "no GOAWAY received"
    assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    found = [
        r.getMessage()
        for r in logs.records
        if r.levelno == logging.WARNING and "ENHANCE_YOUR_CALM" in r.getMessage()
    ]
    assert len(found) == 1, found
    assert f"more than {CONTROL_FRAME_BURST} control frames" in found[0], found[0]
    assert not [r for r in logs.records if r.exc_info], "a traceback was logged"
    await still_serving(served)


async def test_control_frames_under_the_allowance_keep_the_connection(
    served: Served, logs: Any
) -> None:
    def pings() -> tuple[Any, bool, dict[str, Any]]:
        raw = RawH2(served.port)
        try:
            for i in range(CONTROL_FRAME_BURST // 2):
                raw.conn.ping(i.to_bytes(8, "big"))
            raw.flush()
            for _ in range(10):
                raw.pump(0.05)
            state = raw.outcome(raw.open("Describe", grpc_frame(b"")))
            return raw.terminated, raw.closed, state
        finally:
            raw.close()

    terminated, closed, state = await asyncio.to_thread(pings)
    assert terminated is None and not closed
    assert state["trailers"].get("grpc-status") == "0", state
    assert not [r for r in logs.records if "ENHANCE_YOUR_CALM" in r.getMessage()]


def test_the_frame_counter_reads_headers_across_any_split() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    stream = (
        preface
        + SettingsFrame(0).serialize()  # counted
        + SettingsFrame(0, flags=["ACK"]).serialize()  # an ACK: not counted
        + DataFrame(1, data=b"x" * 40).serialize()  # payload: not counted
        + DataFrame(1, data=b"", flags=["END_STREAM"]).serialize()  # not counted
        + empty_data(0, 3)  # counted
        + ping(7, 0)  # counted; its payload holds no frame header
        + priority(0, 5)  # counted
    )
    whole = ControlFrameCounter().feed(stream)
    assert whole == 4
    for size in (1, 2, 5, 9, 10, 17):
        counter = ControlFrameCounter()
        total = sum(counter.feed(stream[i : i + size]) for i in range(0, len(stream), size))
        assert total == whole, size
