"""A client that sends part of a request and goes quiet gets DEADLINE_EXCEEDED
after the receive timeout (its buffered bytes released, one JSON log record); a connection with
no open stream for the idle timeout is closed with GOAWAY. Both are ModelServer keyword
arguments and ``protocol-py serve`` flags."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time
from typing import Any

import pytest

from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import DEFAULT_IDLE_TIMEOUT, DEFAULT_RECEIVE_TIMEOUT, ModelServer
from protocol_py_gen.model.v1 import CountTokensRequest, DescribeRequest

from ..support.h2_client import RawH2, grpc_frame
from ..support.servers import CONSOLE_SCRIPT, make_request, spawn_server, start_server

RECEIVE_TIMEOUT = 0.5
IDLE_TIMEOUT = 0.5


def partial(method: str, announced: int, sent: int) -> bytes:
    """A length prefix announcing ``announced`` bytes followed by only ``sent`` of them."""
    return b"\x00" + announced.to_bytes(4, "big") + b"\x0a" * sent


def stall_then_describe(port: int, method: str, path: str | None = None) -> dict[str, Any]:
    raw = RawH2(port)
    try:
        started = time.monotonic()
        sid = raw.open(path or method, partial(method, 4_000_000, 1_000_000), end=False)
        state = raw.outcome(sid, limit=10)
        took = time.monotonic() - started
        describe = raw.open("Describe", grpc_frame(bytes(DescribeRequest())))
        after = raw.outcome(describe, limit=5)
        return {"state": state, "took": took, "describe": after}
    finally:
        raw.close()


def rpc_records(caplog: pytest.LogCaptureFixture, rpc: str) -> list[Any]:
    out = []
    for record in caplog.records:
        message = record.getMessage()
        if record.name == "protocol_py.server" and message.startswith("{"):
            data = json.loads(message)
            if data["rpc"] == rpc:
                out.append(data)
    return out


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("CountTokens", None),
        ("StreamCompletion", None),
        ("Check", "/grpc.health.v1.Health/Check"),
    ],
)
async def test_partial_request_gets_deadline_exceeded_after_the_receive_timeout(
    caplog: pytest.LogCaptureFixture, method: str, path: str | None
) -> None:
    caplog.set_level(logging.INFO)
    run = await start_server(receive_timeout=RECEIVE_TIMEOUT)
    try:
        result = await asyncio.to_thread(stall_then_describe, run.port, method, path)
        state = result["state"]
        print(f"{method}: stalled call ended after {result['took']:.2f} s")
        assert state["headers"].get("grpc-status") == "4"  # DEADLINE_EXCEEDED
        assert "receive timeout of 0.5 s" in state["headers"].get("grpc-message", "")
        assert RECEIVE_TIMEOUT <= result["took"] < RECEIVE_TIMEOUT + 3
        # the same connection still serves, and nothing of the stalled call is held
        assert result["describe"]["headers"].get("grpc-status") == "0"
        assert all(not p.processor.streams for p in run.server._protocols)
        if not path:
            [record] = rpc_records(caplog, method)
            assert record["outcome"] == "deadline_exceeded"
            assert "receive timeout" in record["detail"]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        await run.server.shutdown(grace_period=0)


async def test_complete_request_without_end_stream_is_not_cut_by_the_receive_timeout() -> None:
    """A client that sent its whole message but not END_STREAM is answered normally."""
    run = await start_server(receive_timeout=RECEIVE_TIMEOUT)
    try:

        def call() -> dict[str, Any]:
            raw = RawH2(run.port)
            try:
                body = grpc_frame(bytes(CountTokensRequest(model_id="reference-large")))
                sid = raw.open("CountTokens", body, end=False)
                time.sleep(RECEIVE_TIMEOUT * 2)
                return raw.outcome(sid, limit=5)
            finally:
                raw.close()

        state = await asyncio.to_thread(call)
        assert state["headers"].get("grpc-status") == "0"
    finally:
        await run.server.shutdown(grace_period=0)


async def test_idle_connection_is_closed_with_goaway_but_not_while_a_stream_runs() -> None:
    provider = ReferenceProvider()
    await provider.configure({"pace_tokens_per_second": 40})
    run = await start_server(provider, idle_timeout=IDLE_TIMEOUT)
    try:

        def call() -> dict[str, Any]:
            raw = RawH2(run.port)
            try:
                started = time.monotonic()
                sid = raw.open("StreamCompletion", grpc_frame(bytes(make_request())))
                state = raw.outcome(sid, limit=15)  # paced: longer than the idle timeout
                streamed = time.monotonic() - started
                ended = time.monotonic()
                while raw.pump(0.1) and time.monotonic() - ended < 5:
                    pass
                return {
                    "state": state,
                    "streamed": streamed,
                    "closed_after": time.monotonic() - ended,
                    "goaway": raw.terminated,
                    "closed": raw.closed,
                }
            finally:
                raw.close()

        result = await asyncio.to_thread(call)
        print(
            f"stream of {result['streamed']:.2f} s completed; idle connection closed "
            f"{result['closed_after']:.2f} s after it"
        )
        assert result["streamed"] > IDLE_TIMEOUT
        assert result["state"]["headers"].get("grpc-status") == "0"
        assert result["goaway"] is not None
        assert result["goaway"].error_code == 0  # NO_ERROR
        assert result["closed"]
        assert IDLE_TIMEOUT * 0.9 <= result["closed_after"] < IDLE_TIMEOUT + 3
        # still serving new connections
        state = await asyncio.to_thread(_describe, run.port)
        assert state["headers"].get("grpc-status") == "0"
    finally:
        await run.server.shutdown(grace_period=0)


def _describe(port: int) -> dict[str, Any]:
    raw = RawH2(port)
    try:
        return raw.outcome(raw.open("Describe", grpc_frame(bytes(DescribeRequest()))), limit=5)
    finally:
        raw.close()


def test_timeouts_have_documented_defaults_and_reject_non_positive_values() -> None:
    server = ModelServer(ReferenceProvider())
    assert (server.receive_timeout, server.idle_timeout) == (60.0, 300.0)
    assert (DEFAULT_RECEIVE_TIMEOUT, DEFAULT_IDLE_TIMEOUT) == (60.0, 300.0)
    for name in ("receive_timeout", "idle_timeout"):
        with pytest.raises(ValueError, match=f"{name}: must be a positive number of seconds"):
            ModelServer(ReferenceProvider(), **{name: 0})


def test_serve_flags_set_the_timeouts() -> None:
    sub = spawn_server("--receive-timeout", "0.5", "--idle-timeout", "0.5")
    try:
        raw = RawH2(sub.port)
        try:
            sid = raw.open("CountTokens", partial("CountTokens", 4_000_000, 100_000), end=False)
            state = raw.outcome(sid, limit=10)
            assert state["headers"].get("grpc-status") == "4"
            started = time.monotonic()
            while raw.pump(0.1) and time.monotonic() - started < 5:
                pass
            assert raw.terminated is not None and raw.terminated.error_code == 0
        finally:
            raw.close()
    finally:
        sub.proc.terminate()
        _, err = sub.proc.communicate(timeout=20)
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    [record] = [r for r in records if r["rpc"] == "CountTokens"]
    assert record["outcome"] == "deadline_exceeded"


@pytest.mark.parametrize("flag", ["--receive-timeout", "--idle-timeout"])
@pytest.mark.parametrize("value", ["0", "-1", "inf", "soon"])
def test_serve_rejects_a_bad_timeout(flag: str, value: str) -> None:
    proc = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", flag, value],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert flag in proc.stderr
    assert "Traceback" not in proc.stderr
