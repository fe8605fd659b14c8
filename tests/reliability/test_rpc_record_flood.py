"""A rapid-reset flood against ``protocol-py serve`` (streams opened and reset at once, as fast
as one connection allows) writes at most ``RPC_RECORD_BURST`` ``cancelled`` records per second
and one summary line counting the rest, and the server keeps serving (docs/decisions.md#d41)."""

from __future__ import annotations

import asyncio
import json
import time

from protocol_py.client.client import ModelClient
from protocol_py.server import RPC_RECORD_BURST, RPC_RECORD_INTERVAL

from ..support.h2_client import RawH2
from ..support.servers import spawn_server

RESETS = 1500
"""Streams opened and reset: well past one window's burst, under the control frame burst."""


async def test_a_rapid_reset_flood_writes_bounded_records_and_a_summary() -> None:
    sub = spawn_server()
    try:
        raw = RawH2(int(sub.address.rsplit(":", 1)[1]))
        started = time.monotonic()
        for i in range(RESETS):
            stream_id = raw.open("StreamCompletion", None, end=False, flush=False)
            raw.conn.reset_stream(stream_id)
            if i % 50 == 49:
                raw.flush()
        raw.flush()
        assert raw.sync(), "the server stopped answering PINGs on the flooding connection"
        raw.close()
        async with ModelClient.connect(sub.address) as client:
            described = await client.describe(timeout=10)
        assert described.name
        # the last window ends and its summary is written
        await asyncio.sleep(RPC_RECORD_INTERVAL + 0.5)
        elapsed = time.monotonic() - started
    finally:
        err = sub.stop()
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    cancelled = [r for r in records if r.get("outcome") == "cancelled"]
    summaries = [r for r in records if "records_suppressed" in r]
    windows = int(elapsed / RPC_RECORD_INTERVAL) + 1
    assert len(cancelled) <= RPC_RECORD_BURST * windows, (len(cancelled), windows)
    assert summaries, "no summary of the records held back"
    assert all(set(s["outcomes"]) == {"cancelled"} for s in summaries), summaries
    assert len(cancelled) + sum(s["records_suppressed"] for s in summaries) == RESETS
    assert [r["rpc"] for r in records if r.get("outcome") == "ok"] == ["Describe"]
