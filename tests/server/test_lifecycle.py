"""Server lifecycle through the real console script: the handshake line, health semantics
(case C04), draining with in-flight streams, exit with idle clients and Watch streams (case
C02), server reflection queried by grpcio-reflection."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import StopReason

from ..support.servers import Subprocess, load_case, make_request, spawn_server

PROBE = Path(__file__).with_name("grpcio_probe.py")


def probe(*args: str, timeout: float = 30) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def aprobe(*args: str, limit: float = 30) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PROBE),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), limit)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def test_handshake_line(cli_server: Subprocess) -> None:
    assert cli_server.handshake == f"1|tcp|127.0.0.1:{cli_server.port}|grpc\n"
    assert cli_server.port > 0


def test_health_and_reflection_with_standard_grpcio_clients(cli_server: Subprocess) -> None:
    assert probe("health", cli_server.address) == {
        "overall": "SERVING",
        "service": "SERVING",
        "unknown": "rpc:NOT_FOUND",
    }
    refl = probe("reflection", cli_server.address)
    assert "model.v1.ModelService" in refl["services"]
    assert "grpc.health.v1.Health" in refl["services"]
    assert refl["methods"]["StreamCompletion"] == [
        "model.v1.StreamCompletionRequest",
        "model.v1.StreamEvent",
        True,
    ]
    assert set(refl["methods"]) == {
        "GetCapabilities",
        "Configure",
        "StreamCompletion",
        "CountTokens",
        "Render",
        "Describe",
    }
    assert "text_delta" in refl["stream_event_oneof"] and "error" in refl["stream_event_oneof"]
    assert refl["health_methods"] == ["Check", "Watch"]


async def test_health_is_not_serving_before_start_and_while_draining() -> None:
    server = ModelServer(ReferenceProvider())
    assert server.health_status.__status__() is None  # UNKNOWN until listening
    await server.start("127.0.0.1", 0)
    assert server.health_status.__status__() is True
    await server.shutdown(grace_period=0)
    assert server.health_status.__status__() is False


async def test_health_semantics_and_drain() -> None:
    case = load_case("C04")
    assert case["expected"]["Check('')"] == "SERVING"
    sub = spawn_server("--grace-period", "8")
    try:
        client = ModelClient.connect(sub.address)
        await client.configure({"pace_tokens_per_second": 60})
        long_stream = asyncio.ensure_future(
            client.complete(make_request("word " * 30, model="reference-small"), timeout=30)
        )
        await asyncio.sleep(0.3)
        result = await aprobe("c04", sub.address, str(sub.proc.pid))
        completion = await asyncio.wait_for(long_stream, 15)
        client.close()
        code = await asyncio.get_running_loop().run_in_executor(None, sub.proc.wait, 10)
    finally:
        if sub.proc.poll() is None:
            sub.proc.kill()
    checks = result["checks"]
    assert checks == {"overall": "SERVING", "service": "SERVING", "unknown": "rpc:NOT_FOUND"}
    assert result["watch_first"] == "SERVING"
    assert result["third_before"] == "SERVING"
    # Watch gets NOT_SERVING within 200 ms of SIGTERM, then its stream ends
    assert result["watch_after"][0][1] == "NOT_SERVING"
    assert result["watch_after"][0][0] <= 0.2
    assert result["watch_ended"] is not None
    # every Check('') after SIGTERM: NOT_SERVING or UNAVAILABLE, never SERVING
    after = result["checks_after_sigterm"]
    assert after and "SERVING" not in after
    assert set(after) <= {"NOT_SERVING", "rpc:UNAVAILABLE"}
    assert after[0] == "NOT_SERVING"  # the in-flight stream keeps the server draining
    # the in-flight stream finished within the grace period
    assert completion.stop is not None and completion.stop.reason is StopReason.END_TURN
    assert completion.error is None
    assert code == 0
    assert sub.proc.stderr is not None
    assert "Traceback" not in sub.proc.stderr.read()


def test_exit_with_idle_client_and_watch_stream() -> None:
    expected = load_case("C02")["expected"]
    sub = spawn_server()
    helper = subprocess.Popen(
        [sys.executable, str(PROBE), "c02", sub.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert helper.stdout is not None and helper.stdin is not None
        assert helper.stdout.readline().strip() == "READY"
        sent = time.monotonic()
        sub.proc.send_signal(signal.SIGTERM)
        code = sub.proc.wait(timeout=5)
        elapsed = time.monotonic() - sent
        helper.stdin.write("GO\n")
        helper.stdin.flush()
        out, _ = helper.communicate(timeout=15)
    finally:
        for proc in (sub.proc, helper):
            if proc.poll() is None:
                proc.kill()
    assert expected["process"].startswith("exits with code 0 within 2 s")
    assert code == 0
    assert elapsed < 2.0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["first_bytes"] > 0
    assert result["watch_updates"][0] == "SERVING"
    assert result["watch_ended"] in ("UNAVAILABLE", "CANCELLED")
    assert result["client_1_next_rpc"] == "UNAVAILABLE"
    assert sub.proc.stderr is not None
    stderr = sub.proc.stderr.read()
    for needle in expected["stderr_must_not_contain"]:
        assert needle not in stderr
