"""RPC records say why a call ended.

* A second SIGTERM during a 30 s grace period stops at once; the records of the streams it
  ended say "server shutting down (second signal)", not "(grace period expired)".
* A receive-timeout record carries ``"error_kind": "DEADLINE_EXCEEDED"`` like every other
  ``deadline_exceeded`` record."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.server.records import RpcRecord
from protocol_py_gen.model.v1 import StreamEvent

from ..support.h2_client import RawH2
from .conftest import Served, request, still_serving
from .test_shutdown_report import spawn, stop


def records(stderr: str) -> list[dict[str, Any]]:
    found = []
    for line in stderr.splitlines():
        start = line.find('{"rpc"')
        if start >= 0:
            found.append(json.loads(line[start:]))
    return found


async def test_a_second_sigterm_is_named_in_the_record_of_the_stream_it_ended() -> None:
    proc, address = spawn(grace=30)
    try:
        async with ModelClient.connect(address) as client:
            await client.configure({"pace_tokens_per_second": 50}, timeout=10)
            events: list[StreamEvent] = []
            started = 0.0
            async for event in client.stream(request("word " * 200), timeout=60):
                events.append(event)
                if len(events) == 3:
                    proc.send_signal(signal.SIGTERM)
                    await asyncio.sleep(0.3)
                    started = time.monotonic()
                    proc.send_signal(signal.SIGTERM)
        assert events[-1].error is not None and events[-1].error.message == "server shutting down"
        assert await asyncio.to_thread(proc.wait, 20) == 0
        took = time.monotonic() - started
        print(f"exited {took:.2f} s after the second SIGTERM (grace period 30 s)")
        assert took < 20
        assert proc.stderr is not None
        stream = [r for r in records(proc.stderr.read()) if r["rpc"] == "StreamCompletion"]
        assert len(stream) == 1, stream
        assert stream[0]["detail"] == "server shutting down (second signal)", stream[0]
        assert stream[0]["error_kind"] == "TRANSIENT"
    finally:
        stop(proc)


async def test_a_receive_timeout_record_carries_the_deadline_exceeded_error_kind(
    logs: Any,
) -> None:
    server = ModelServer(ReferenceProvider(), receive_timeout=0.2)
    port = await server.start("127.0.0.1", 0)
    try:

        def partial() -> dict[str, Any]:
            raw = RawH2(port)
            try:
                stream_id = raw.open("Render", b"\x00\x00\x00\x00\x10", end=False)
                return raw.outcome(stream_id, limit=10)
            finally:
                raw.close()

        state = await asyncio.to_thread(partial)
        assert state["headers"].get("grpc-status") == "4", state
        found = [r for r in logs.rpc_records() if r["rpc"] == "Render"]
        assert len(found) == 1, found
        assert found[0]["outcome"] == "deadline_exceeded"
        assert found[0]["error_kind"] == "DEADLINE_EXCEEDED"
        assert found[0]["detail"].startswith("request not received within the receive timeout")
        await still_serving(Served(server, port))
    finally:
        await server.shutdown(grace_period=0)


def test_every_deadline_exceeded_record_names_its_error_kind(caplog: Any) -> None:
    record = RpcRecord(rpc="Render", outcome="deadline_exceeded", detail="x")
    with caplog.at_level("INFO", logger="protocol_py.server"):
        record.emit()
    line = json.loads(caplog.records[-1].getMessage())
    assert line["error_kind"] == "DEADLINE_EXCEEDED" and line["outcome"] == "deadline_exceeded"
