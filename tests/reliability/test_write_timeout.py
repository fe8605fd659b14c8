"""Progress timeouts (:mod:`protocol_py.server.grpc_layer.progress`): streams whose reader
never opens its flow-control window are reset after the write timeout and their memory is
released; a connection holding more queued bytes than its budget is closed. The server keeps
serving."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from protocol_py.server.grpc_layer import progress
from protocol_py.server.grpc_layer.progress import (
    CONNECTION_QUEUE_BYTES,
    DEFAULT_WRITE_TIMEOUT,
    check_interval,
    over_queue_budget,
    write_timeout_message,
)

from ..support.h2_client import RawH2, grpc_frame
from ..support.proc import rss_bytes
from .conftest import Captured, request, serve, still_serving

STREAMS = 20
WRITE_TIMEOUT = 1.0
MiB = 1024 * 1024


def test_the_documented_defaults() -> None:
    assert DEFAULT_WRITE_TIMEOUT == 30.0
    assert CONNECTION_QUEUE_BYTES == 16 * 1024 * 1024
    assert check_interval(30.0) == 1.0 and check_interval(1.0) == 0.25


def _stalled_readers(port: int, body: bytes, streams: int, limit: float) -> dict[str, Any]:
    """``streams`` StreamCompletions on one connection whose reader gives no window back (its
    initial stream window 64 bytes, nothing ever acknowledged); then wait for their ends."""
    raw = RawH2(port, auto_ack=False, timeout=30)
    try:
        raw.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 64})
        raw.flush()
        framed = grpc_frame(body)
        ids = []
        for _ in range(streams):
            sid = raw.open("StreamCompletion", None)
            sent = 0
            while sent < len(framed):  # the request, within the server's window
                room = min(
                    raw.conn.local_flow_control_window(sid), raw.conn.max_outbound_frame_size
                )
                if room <= 0:
                    raw.pump(0.05)
                    continue
                chunk = framed[sent : sent + room]
                sent += len(chunk)
                raw.conn.send_data(sid, chunk, end_stream=sent == len(framed))
                raw.flush()
            ids.append(sid)
        sent_at = time.monotonic()
        deadline = sent_at + limit
        while time.monotonic() < deadline and any(
            raw.streams[s]["reset"] is None and not raw.streams[s]["ended"] for s in ids
        ):
            raw.pump(0.1)
        return {
            "resets": [raw.streams[s]["reset"] for s in ids],
            "seconds": time.monotonic() - sent_at,
            "sent": len(framed) * streams,
        }
    finally:
        raw.close()


@pytest.mark.parametrize("streams", [STREAMS])
async def test_streams_whose_readers_never_open_their_window_are_reset_and_released(
    streams: int, logs: Captured
) -> None:
    served = await serve(write_timeout=WRITE_TIMEOUT, memory_budget=0)
    try:
        body = bytes(request("word " * (int(4.7 * MiB) // 5)))
        gc.collect()
        before = rss_bytes()
        result = await asyncio.to_thread(_stalled_readers, served.port, body, streams, 60.0)
        memory = served.server.memory
        print(
            f"{streams} stalled readers of {len(body)} B: reset after {result['seconds']:.1f} s, "
            f"peak charged {memory.peak / MiB:.0f} MiB"
        )
        assert result["resets"] == [ErrorCodes.CANCEL] * streams, result["resets"]
        deadline = time.monotonic() + 10
        while memory.held and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        assert memory.held == 0 and memory.calls == 0
        assert memory.peak >= streams * len(body)  # they really were all held at once
        resets = [
            r
            for r in logs.records
            if r.getMessage().startswith("reset stream ")
            and r.getMessage().endswith(write_timeout_message(WRITE_TIMEOUT))
        ]
        assert len(resets) == streams and all(r.levelno == logging.INFO for r in resets)
        ended = [
            (r["outcome"], r.get("detail"))
            for r in logs.rpc_records()
            if r["rpc"] == "StreamCompletion"
        ]
        assert ended == [("cancelled", write_timeout_message(WRITE_TIMEOUT))] * streams, ended
        await asyncio.sleep(1.5)  # the memory trim after the aborted calls
        gc.collect()
        grown = (rss_bytes() - before) / MiB
        print(f"RSS after: +{grown:.0f} MiB over the start ({result['sent'] / MiB:.0f} MiB sent)")
        assert grown < 0.5 * result["sent"] / MiB, grown
        await still_serving(served)
    finally:
        await served.server.shutdown(grace_period=0)


class _FakeTransport:
    def __init__(self, queued: int) -> None:
        self.queued = queued
        self.aborted = False

    def is_closing(self) -> bool:
        return self.aborted

    def get_write_buffer_size(self) -> int:
        return self.queued

    def abort(self) -> None:
        self.aborted = True


class _FakeProcessor:
    def __init__(self) -> None:
        self.closed: str | None = None

    def close(self, reason: str) -> None:
        self.closed = reason


class _FakeProtocol:
    def __init__(self) -> None:
        self.connection = None
        self.processor = _FakeProcessor()


def test_a_connection_over_its_queued_bytes_budget_is_closed_with_one_warning(
    logs: Captured,
) -> None:
    protocol = _FakeProtocol()
    within = _FakeTransport(CONNECTION_QUEUE_BYTES)
    assert not over_queue_budget(protocol, within)  # type: ignore[arg-type]
    assert not within.aborted and protocol.processor.closed is None
    over = _FakeTransport(CONNECTION_QUEUE_BYTES + 1)
    assert over_queue_budget(protocol, over)  # type: ignore[arg-type]
    assert over.aborted
    assert protocol.processor.closed == "queued bytes over the connection's budget"
    assert over_queue_budget(protocol, over)  # type: ignore[arg-type]  # closing: no repeat
    warnings = [r for r in logs.records if r.name == progress.log.name]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert f"over the per-connection budget of {CONNECTION_QUEUE_BYTES} bytes" in (
        warnings[0].getMessage()
    )
