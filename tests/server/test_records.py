"""The per-RPC record limit (``server.records.RecordLimit``, docs/decisions.md#d41): records of
calls that did not end ``ok`` are written up to the burst per window, the rest counted by
outcome and summed up in one line; ``ok`` records and other lines always pass."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.server import (
    RPC_RECORD_ATTR,
    RPC_RECORD_BURST,
    LogFormatter,
    RecordLimit,
    RpcRecord,
    handlers,
)
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ..support.servers import make_request, start_server


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogFormatter())
    logger = logging.getLogger("protocol_py.server")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


def test_records_past_the_burst_are_counted_and_summed_up_when_the_window_ends(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, handler = captured
    clock = Clock()
    limit = RecordLimit(burst=3, interval=1.0, clock=clock)
    handler.addFilter(limit)
    for outcome in ["cancelled"] * 5 + ["invalid_request"] * 2:
        RpcRecord(rpc="StreamCompletion", outcome=outcome).emit()
    RpcRecord(rpc="GetCapabilities").emit()  # ok: never held back
    assert [r["outcome"] for r in lines(stream)] == ["cancelled"] * 3 + ["ok"]
    assert limit.suppressed == {"cancelled": 2, "invalid_request": 2}
    clock.now += 1.0  # the next window: its first record comes after the summary
    RpcRecord(rpc="StreamCompletion", outcome="error").emit()
    written = lines(stream)
    assert written[4] == {
        "records_suppressed": 4,
        "outcomes": {"cancelled": 2, "invalid_request": 2},
        "interval_s": 1.0,
    }
    assert written[5]["outcome"] == "error"
    assert limit.suppressed == {}


def test_a_window_under_the_burst_writes_every_record_and_no_summary(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, handler = captured
    clock = Clock()
    handler.addFilter(RecordLimit(clock=clock))
    for _ in range(RPC_RECORD_BURST):
        RpcRecord(rpc="StreamCompletion", outcome="cancelled").emit()
    clock.now += 5.0
    RpcRecord(rpc="StreamCompletion", outcome="cancelled").emit()
    written = lines(stream)
    assert len(written) == RPC_RECORD_BURST + 1
    assert all("records_suppressed" not in r for r in written)


def test_other_log_lines_pass_the_filter(captured: tuple[io.StringIO, logging.Handler]) -> None:
    stream, handler = captured
    handler.addFilter(RecordLimit(burst=0, clock=Clock()))
    logging.getLogger("protocol_py.server").info("listening on 127.0.0.1:1")
    RpcRecord(rpc="StreamCompletion", outcome="cancelled").emit()
    written = stream.getvalue().splitlines()
    assert len(written) == 1 and written[0].endswith(
        " INFO protocol_py.server listening on 127.0.0.1:1"
    )


async def test_the_summary_is_written_when_the_window_ends_without_another_record(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, handler = captured
    handler.addFilter(RecordLimit(burst=1, interval=0.05))
    for _ in range(4):
        RpcRecord(rpc="StreamCompletion", outcome="deadline_exceeded").emit()
    assert len(lines(stream)) == 1
    await asyncio.sleep(0.3)
    assert lines(stream)[1] == {
        "records_suppressed": 3,
        "outcomes": {"deadline_exceeded": 3},
        "interval_s": 0.05,
    }


async def _stream_records(
    caplog: pytest.LogCaptureFixture, request: StreamCompletionRequest
) -> tuple[list[StreamEvent], list[dict[str, Any]]]:
    """Serve ``request`` once on a fresh server: its events and the StreamCompletion records
    logged; a Describe after it checks the server still serves."""
    run = await start_server()
    try:
        with caplog.at_level(logging.INFO, logger="protocol_py.server"):
            async with ModelClient.connect(run.address) as client:
                events = [e async for e in client.stream(request, timeout=10)]
                assert (await client.describe(timeout=10)).name  # still serving
    finally:
        await run.server.shutdown(grace_period=0)
    records = [
        json.loads(r.getMessage())
        for r in caplog.records
        if getattr(r, RPC_RECORD_ATTR, False) and "StreamCompletion" in r.getMessage()
    ]
    return events, records


async def test_an_invalid_request_record_carries_the_violations_and_omits_unset_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    request = make_request(model="no-such-model")
    request.call_context = None
    events, records = await _stream_records(caplog, request)
    assert events[-1].error is not None
    assert len(records) == 1
    record = records[0]
    assert record["outcome"] == "invalid_request"
    assert record["error_kind"] == "INVALID_REQUEST"
    assert "model_id" in record["detail"] and "no-such-model" in record["detail"]
    assert record["detail"] == events[-1].error.message
    assert "session_id" not in record and "turn_id" not in record


@pytest.mark.parametrize(
    "text",
    [
        "s\u2028t",  # line separator: str.splitlines() splits on it
        "s\u2029t\x85u",  # paragraph separator, NEL
        "gpt\u202e-4",  # right-to-left override
        "a\u200bb\ufeffc",  # zero-width space, byte order mark
        "tag\U000e0041",  # a tag character (above U+FFFF)
    ],
)
def test_a_record_with_invisible_caller_characters_stays_one_line_of_the_same_values(
    captured: tuple[io.StringIO, logging.Handler], text: str
) -> None:
    """Caller text holding characters Python does not print (line and paragraph separators,
    bidi overrides, zero-width and tag characters) is written as JSON escapes: the record is
    one line by any line splitting, shows none of them raw, and parses to the values sent."""
    stream, _ = captured
    RpcRecord(rpc="StreamCompletion", session_id=text, model=text, outcome="ok").emit()
    written = stream.getvalue()
    assert written.endswith("\n") and written[:-1].isprintable()
    assert len(written.splitlines()) == 1
    record = json.loads(written)
    assert (record["session_id"], record["model"]) == (text, text)


def test_non_ascii_text_a_log_shows_is_written_as_itself(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    stream, _ = captured
    RpcRecord(rpc="StreamCompletion", session_id="café 東京", outcome="ok").emit()
    assert '"session_id": "café 東京"' in stream.getvalue()


async def test_a_stream_completion_record_counts_the_reading_and_checking_of_its_request(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``duration_s`` runs from the call's start: a request whose decode and check took
    0.3 s (held here) is recorded with at least that, not from when its handler began."""
    check = handlers.ModelServer._decode_and_check

    def slow(self: handlers.ModelServer, data: bytes, strict: Any, state: Any) -> Any:
        time.sleep(0.3)
        return check(self, data, strict, state)

    monkeypatch.setattr(handlers.ModelServer, "_decode_and_check", slow)
    events, records = await _stream_records(caplog, make_request("hi"))
    assert events[-1].stop is not None
    assert [r["outcome"] for r in records] == ["ok"]
    assert 0.3 <= records[0]["duration_s"] < 10
