"""A connection that floods control frames (PING, SETTINGS, PRIORITY, RST_STREAM, empty DATA,
small DATA frames beyond those its streams earn)
faster than :data:`~protocol_py.server.grpc_layer.connections.CONTROL_FRAME_RATE` beyond its
allowance of :data:`~protocol_py.server.grpc_layer.connections.CONTROL_FRAME_BURST` gets GOAWAY
ENHANCE_YOUR_CALM and is closed, with one WARNING; other clients keep being served."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]
import h2.errors
import pytest
from hyperframe.frame import (
    DataFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from protocol_py.codec.structs import to_struct
from protocol_py.server.grpc_layer import connections
from protocol_py.server.grpc_layer.connections import (
    CONTROL_FRAME_BURST,
    CONTROL_FRAME_RATE,
    EMPTY_DATA_FRAME_WEIGHT,
    SETTINGS_FRAME_WEIGHT,
    WINDOW_UPDATE_FRAME_WEIGHT,
    ControlFrameCounter,
    DataFrameCounter,
)
from protocol_py_gen.model.v1 import ConfigureRequest

from ..support.h2_client import RawH2, grpc_frame
from .conftest import SERVICE, Served, acall, still_serving
from .test_reply_budget import render_body


def ping(i: int, _stream: int) -> bytes:
    return PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize()


def settings(_i: int, _stream: int) -> bytes:
    return SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 65_535}).serialize()


def priority(_i: int, stream: int) -> bytes:
    return PriorityFrame(stream, depends_on=0, stream_weight=16).serialize()


def empty_data(_i: int, stream: int) -> bytes:
    return DataFrame(stream, data=b"").serialize()


def window_update(_i: int, stream: int) -> bytes:
    # unearned: the server has sent no DATA on the stream (its request never ends)
    return WindowUpdateFrame(stream if _i % 2 else 0, window_increment=1).serialize()


FLOODS: dict[str, Callable[[int, int], bytes]] = {
    "PING": ping,
    "SETTINGS": settings,
    "PRIORITY": priority,
    "empty DATA": empty_data,
    "WINDOW_UPDATE": window_update,
}


def flood(
    port: int, frame: Callable[[int, int], bytes], count: int, body: bytes | None = None
) -> tuple[Any, bool, int]:
    """Open a StreamCompletion (``body`` sent first, no END_STREAM) and send ``count`` frames
    ``frame(i, stream)`` in writes of 500, reading nothing; then read for up to 5 s. Returns
    the GOAWAY received (or None), whether the connection closed, and the frames written."""
    raw = RawH2(port)
    stream = raw.open("StreamCompletion", body, end=False)
    sent = 0
    try:
        for start in range(0, count, 500):
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


@pytest.mark.parametrize("kind", list(FLOODS))
async def test_a_control_frame_flood_gets_goaway_enhance_your_calm(
    served: Served, logs: Any, kind: str
) -> None:
    frame = FLOODS[kind]

    terminated, _closed, sent = await asyncio.to_thread(
        flood, served.port, frame, 10 * CONTROL_FRAME_BURST
    )
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
    stream += window_update(1, 1) + window_update(2, 1)  # counted apart
    stream += HeadersFrame(7, data=b"\x82", flags=["END_HEADERS"]).serialize()  # counted apart
    whole = ControlFrameCounter()
    assert whole.feed(stream) == 2 + SETTINGS_FRAME_WEIGHT + EMPTY_DATA_FRAME_WEIGHT
    assert (whole.window_updates, whole.headers) == (2, 1)
    for size in (1, 2, 5, 9, 10, 17):
        counter = ControlFrameCounter()
        total = sum(counter.feed(stream[i : i + size]) for i in range(0, len(stream), size))
        assert total == 2 + SETTINGS_FRAME_WEIGHT + EMPTY_DATA_FRAME_WEIGHT, size
        assert (counter.window_updates, counter.headers) == (2, 1), size


def test_the_counter_stops_counting_past_its_limit() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    stream = preface + b"".join(ping(i, 0) for i in range(10_000))
    assert ControlFrameCounter().feed(stream, limit=100) == 101


def test_the_data_frame_counter_counts_data_with_a_payload_across_any_split() -> None:
    written = (
        SettingsFrame(0).serialize()
        + DataFrame(1, data=b"x" * 100).serialize()
        + DataFrame(1, data=b"", flags=["END_STREAM"]).serialize()  # no payload: earns nothing
        + DataFrame(3, data=b"y" * 9).serialize()
    )
    for size in (1, 4, 9, 10, 50, len(written)):
        counter = DataFrameCounter()
        assert sum(counter.feed(written[i : i + size]) for i in range(0, len(written), size)) == 2


async def test_a_large_reply_read_by_grpcio_is_not_a_window_update_flood(
    served: Served, logs: Any
) -> None:
    # grpcio gives window back as it reads: thousands of WINDOW_UPDATEs, each after our DATA
    for _ in range(3):
        result = await acall(served.address, "Render", render_body(24))
        assert result.code == "OK", result
        assert len(result.replies[0]) > 24 * 1024 * 1024  # the whole reply arrived
    assert not [r for r in logs.records if "ENHANCE_YOUR_CALM" in r.getMessage()]
    await still_serving(served)


async def test_many_flooding_connections_log_one_warning(served: Served, logs: Any) -> None:
    def flood_many(connections: int) -> int:
        closed = 0
        for _ in range(connections):
            raw = RawH2(served.port)
            try:
                raw.sock.sendall(b"".join(ping(i, 0) for i in range(3 * CONTROL_FRAME_BURST)))
                deadline = time.monotonic() + 5
                while raw.terminated is None and not raw.closed and time.monotonic() < deadline:
                    raw.pump(0.05)
                closed += raw.terminated is not None or raw.closed
            except OSError:
                closed += 1
            finally:
                raw.close()
        return closed

    assert await asyncio.to_thread(flood_many, 20) == 20
    found = [r.getMessage() for r in logs.records if "ENHANCE_YOUR_CALM" in r.getMessage()]
    assert len(found) == 1, found  # server-wide: one line per 10 s for all 20 connections
    await still_serving(served)


FAILING_CALLS = 4 * CONTROL_FRAME_BURST // WINDOW_UPDATE_FRAME_WEIGHT
"""Unary calls answered trailers-only, back to back on one grpcio channel: charged a
WINDOW_UPDATE each, four times what the allowance holds (plus its refill over about 3 s)."""


async def test_failing_unary_calls_from_grpcio_are_not_a_window_update_flood(
    served: Served, logs: Any
) -> None:
    # grpcio raises each new stream's window with a WINDOW_UPDATE; a trailers-only error reply
    # sends no DATA to earn it: each stream the client opens earns it instead
    body = bytes(ConfigureRequest(config=to_struct({"no_such_key": 1})))
    assert FAILING_CALLS * WINDOW_UPDATE_FRAME_WEIGHT > 2 * CONTROL_FRAME_BURST + 3 * (
        CONTROL_FRAME_RATE
    )

    def calls() -> dict[str, int]:
        codes: dict[str, int] = {}
        with grpc.insecure_channel(served.address) as channel:
            configure = channel.unary_unary(SERVICE + "Configure")
            for _ in range(FAILING_CALLS):
                try:
                    configure(body, timeout=10)
                    code = "OK"
                except grpc.RpcError as exc:
                    code = exc.code().name
                codes[code] = codes.get(code, 0) + 1
        return codes

    assert await asyncio.to_thread(calls) == {"INVALID_ARGUMENT": FAILING_CALLS}
    assert not [r for r in logs.records if "ENHANCE_YOUR_CALM" in r.getMessage()]
    await still_serving(served)


def test_the_counter_finds_the_large_data_payloads_in_each_read_across_any_split() -> None:
    """The spans of DATA payloads of at least WHOLE_DATA_MIN_BYTES, in each read's own offsets
    (a payload split over reads gives a span in each), so the feed can give them to h2 whole;
    a small DATA payload and any other frame give none."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    large = connections.WHOLE_DATA_MIN_BYTES
    stream = (
        preface
        + DataFrame(1, data=b"s" * 100).serialize()
        + DataFrame(1, data=b"L" * large).serialize()
        + ping(7, 0)
        + DataFrame(1, data=b"M" * (large + 5), flags=["END_STREAM"]).serialize()
    )
    first, second = stream.index(b"L" * large), stream.index(b"M" * (large + 5))
    payloads = [(first, first + large), (second, second + large + 5)]
    for size in (len(stream), 9, 1000, large // 3, large + 7):
        counter = ControlFrameCounter()
        found: list[tuple[int, int]] = []
        for offset in range(0, len(stream), size):
            counter.feed(stream[offset : offset + size])
            found += [(offset + a, offset + b) for a, b in counter.data_spans]
        merged: list[tuple[int, int]] = []
        for a, b in found:  # the parts of one payload, read after read, are contiguous
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        assert merged == payloads, size


async def test_a_body_sent_a_byte_per_data_frame_is_a_flood(served: Served, logs: Any) -> None:
    """1-byte DATA frames of one request (its length prefix announcing 3 MB) are charged as
    control frames beyond the 2 its HEADERS earned: the connection gets GOAWAY
    ENHANCE_YOUR_CALM after about CONTROL_FRAME_BURST of them, with one WARNING, and the
    server serves on."""

    def byte(_i: int, stream: int) -> bytes:
        return DataFrame(stream, data=b"x").serialize()

    prefix = (3_000_000).to_bytes(5, "big")  # announces a 3 MB request
    terminated, _closed, _sent = await asyncio.to_thread(
        flood, served.port, byte, 20 * CONTROL_FRAME_BURST, prefix
    )
    assert terminated is not None, "no GOAWAY received"
    assert terminated.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    found = [r.getMessage() for r in logs.records if "ENHANCE_YOUR_CALM" in r.getMessage()]
    assert len(found) == 1 and "empty or small DATA" in found[0], found
    assert not [r for r in logs.records if r.exc_info], "a traceback was logged"
    await still_serving(served)


async def test_a_request_in_a_few_small_data_frames_is_served(served: Served, logs: Any) -> None:
    """Small DATA frames under the allowance (a body in 300-byte frames, the last with
    END_STREAM) keep the connection: the call is answered."""

    def call() -> tuple[Any, bool, dict[str, Any]]:
        raw = RawH2(served.port)
        try:
            body = grpc_frame(bytes(ConfigureRequest(config=to_struct({"k": "v" * 3000}))))
            stream = raw.open("Configure", None, end=False)
            pieces = [body[i : i + 300] for i in range(0, len(body), 300)]
            for i, piece in enumerate(pieces):
                raw.conn.send_data(stream, piece, end_stream=i == len(pieces) - 1)
            raw.flush()
            return raw.terminated, raw.closed, raw.outcome(stream)
        finally:
            raw.close()

    terminated, closed, state = await asyncio.to_thread(call)
    assert terminated is None and not closed
    # the whole body was read: the reference provider names the config key it refuses
    answer = state["trailers"] or state["headers"]
    assert answer.get("grpc-status") == "3", state
    assert "/k: unknown property" in answer.get("grpc-message", ""), state
    assert not [r for r in logs.records if "ENHANCE_YOUR_CALM" in r.getMessage()]


def test_the_counter_counts_small_data_frames_apart_and_stops_past_its_limit() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    small = DataFrame(1, data=b"x" * 100).serialize()
    ended = DataFrame(1, data=b"x", flags=["END_STREAM"]).serialize()  # not counted
    large = DataFrame(1, data=b"x" * connections.SMALL_DATA_FRAME_BYTES).serialize()
    counter = ControlFrameCounter()
    assert counter.feed(preface + small * 3 + ended + large) == 0
    assert counter.small_data == 3
    flood = preface + small * 10_000
    stopped = ControlFrameCounter()
    stopped.feed(flood, limit=100, credit=50)
    assert stopped.small_data == 151  # past the limit by one beyond the credit
