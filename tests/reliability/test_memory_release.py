"""Memory returns to baseline after aborted replies, and sending honours HTTP/2
flow control (a peer that reads nothing pauses the provider instead of the server buffering).

RSS is read from /proc of a ``protocol-py serve`` subprocess (the real console script)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import grpc

from ..support.h2_client import RawH2, grpc_frame
from ..support.proc import rss_bytes
from ..support.servers import Subprocess, make_request, spawn_server, start_server
from ._probes import UnpacedProvider, upb_class

MIB = 1024 * 1024
REPLY_MIB = 60
"""Size of the Render reply refused by the clients, MiB (60 MiB)."""
TOLERANCE = 0.20
"""RSS after the calls must come back within this fraction of the baseline."""


def render_request(mib: int) -> Any:
    payload = json.dumps({"text": "x" * 1024, "times": mib * 1024}).encode()
    return upb_class("model.v1.RenderRequest")(payload_type="reference.repeat", payload=payload)


def render(address: str, request: Any, timeout: float = 60) -> str:
    """One Render with grpcio's default 4 MiB receive limit: the status code's name."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/model.v1.ModelService/Render",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=upb_class("model.v1.RenderResponse").FromString,
        )
        try:
            call(request, timeout=timeout)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        return "OK"


def never_read_then_disconnect(sub: Subprocess, request: Any, baseline: int) -> int:
    """Ask for the reply, read nothing, wait until the server holds it, then disconnect."""
    raw = RawH2(sub.port, auto_ack=False)
    peak = 0
    try:
        raw.open("Render", grpc_frame(request.SerializeToString()))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            peak = max(peak, rss_bytes(sub.proc.pid))
            if peak > baseline + REPLY_MIB * MIB:
                time.sleep(0.2)
                break
            time.sleep(0.02)
    finally:
        raw.close()
    return peak


def settle(pid: int, target: int, limit: float = 15.0) -> int:
    """Poll the RSS until it is at most ``target`` bytes (or ``limit`` seconds pass)."""
    deadline = time.monotonic() + limit
    rss = rss_bytes(pid)
    while rss > target and time.monotonic() < deadline:
        time.sleep(0.1)
        rss = rss_bytes(pid)
    return rss


def stop(sub: Subprocess) -> None:
    sub.proc.terminate()
    sub.proc.communicate(timeout=20)


def test_refused_and_abandoned_60_mib_replies_release_their_memory() -> None:
    sub = spawn_server("--log-level", "WARNING")
    try:
        assert render(sub.address, render_request(1)) == "OK"  # warm-up (lazy imports)
        time.sleep(0.5)
        baseline = rss_bytes(sub.proc.pid)
        request = render_request(REPLY_MIB)
        codes: list[str] = []
        peak = [baseline]

        def client() -> None:
            for _ in range(2):
                codes.append(render(sub.address, request))

        threads = [threading.Thread(target=client) for _ in range(2)]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            peak[0] = max(peak[0], rss_bytes(sub.proc.pid))
            time.sleep(0.05)
        for thread in threads:
            thread.join()
        peak[0] = max(peak[0], never_read_then_disconnect(sub, request, baseline))
        final = settle(sub.proc.pid, int(baseline * (1 + TOLERANCE)))
        print(
            f"baseline {baseline / MIB:.0f} MiB, peak {peak[0] / MIB:.0f} MiB, "
            f"final {final / MIB:.0f} MiB ({final / baseline:.2f}x)"
        )
        assert codes == ["RESOURCE_EXHAUSTED"] * 4  # grpcio refused each 60 MiB reply
        assert peak[0] > baseline + REPLY_MIB * MIB  # the replies were really built
        assert final <= baseline * (1 + TOLERANCE)
        assert render(sub.address, render_request(1)) == "OK"  # still serving
    finally:
        stop(sub)


async def test_a_peer_that_reads_nothing_pauses_the_provider() -> None:
    """With a 65,535-byte stream window never given back, the provider is advanced at most a
    few events beyond what the window holds, then waits; closing the connection closes it."""
    size = 1000
    provider = UnpacedProvider(count=10_000, size=size)
    run = await start_server(provider)
    try:

        def call() -> tuple[int, int]:
            raw = RawH2(run.port, auto_ack=False)
            try:
                raw.open("StreamCompletion", grpc_frame(bytes(make_request())))
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    raw.pump(0.05)
                first = provider.yielded
                time.sleep(0.5)
                raw.pump(0.05)
                return first, provider.yielded
            finally:
                raw.close()

        first, later = await asyncio.to_thread(call)
        await asyncio.wait_for(provider.stopped.wait(), 10)
        window_events = 65_535 // size
        print(f"provider advanced {later} events for a {window_events}-event window")
        assert later == first  # paused, not producing into a buffer
        assert later <= window_events + 3
        assert not provider.finished
        assert provider.yielded == later  # closed without being advanced further
        server_streams = sum(len(p.processor.streams) for p in run.server._protocols)
        assert server_streams == 0
        provider.count = 5  # still serving: a fresh stream completes
        raw_result = await asyncio.to_thread(_one_stream, run.port)
        assert raw_result["headers"].get("grpc-status") == "0"
        assert provider.finished
    finally:
        await run.server.shutdown(grace_period=0)


def _one_stream(port: int) -> dict[str, Any]:
    raw = RawH2(port)
    try:
        sid = raw.open("StreamCompletion", grpc_frame(bytes(make_request())))
        return raw.outcome(sid, limit=10)
    finally:
        raw.close()
