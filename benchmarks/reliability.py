"""Reliability figures of the reference server (cancellation, memory release, resets, load),
measured in one run.

1. ``stop``: time from a client's cancel (google's grpcio client, after the first event) and
   from a 10 ms deadline to the provider's stop, for a provider yielding 21,000 events without
   any await (medians of ``--repeat`` runs; the contract is 100 ms).
2. ``memory``: RSS of a ``protocol-py serve`` subprocess (from /proc): baseline, peak and final
   after ``--clients`` grpcio clients x ``--calls`` Render calls of a 60 MiB reply refused by
   grpcio's 4 MiB receive limit, plus one client that never reads then disconnects; fds of the
   server before and after.
3. ``resets``: HEADERS + 60 KB DATA + RST_STREAM in one write, ``--resets`` times on one raw
   HTTP/2 connection, then a Describe on it
   (https://github.com/vmagamedov/grpclib/issues/217).
4. ``load``: ``--streams`` concurrent StreamCompletions held at once (each checked event by
   event against the answer of a lone stream) and ``--cancels`` streams cancelled at random
   points: asyncio tasks and fds before and after, ERROR log lines.

Usage: ``.venv/bin/python benchmarks/reliability.py [--repeat 5] [--clients 4] [--calls 5]
[--resets 500] [--streams 500] [--cancels 1000]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import statistics
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import grpc  # type: ignore[import-untyped]
import h2.config
import h2.connection
import h2.events
from _harness import MIB, rss, spawn_serve, user_request
from google.protobuf import (  # type: ignore[import-untyped]
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    DescribeRequest,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamStart,
    TextDelta,
)

REPO = Path(__file__).resolve().parents[1]
STREAM_PATH = "/model.v1.ModelService/StreamCompletion"


def _classes() -> Callable[[str], Any]:
    image = descriptor_pb2.FileDescriptorSet.FromString(
        (REPO / "gen" / "descriptor" / "protocol.binpb").read_bytes()
    )
    pool = descriptor_pool.DescriptorPool()
    for file in image.file:
        pool.Add(file)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


UPB = _classes()


def request(prompt: str = "Hello there") -> StreamCompletionRequest:
    return user_request("reference-large", prompt)


def fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


# -- 1. stop latency ---------------------------------------------------------------------------


class Unpaced(ReferenceProvider):
    """21,000 text deltas without any await; records when it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped_at = 0.0
        self.stopped = asyncio.Event()

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.stopped.clear()
        try:
            yield StreamEvent(stream_start=StreamStart(provider_request_id="bench"))
            for _ in range(21_000):
                yield StreamEvent(text_delta=TextDelta(text="xxxxxxxx"))
            yield StreamEvent(stop=Stop(reason=StopReason.END_TURN, model_affirmed=True))
        finally:
            self.stopped_at = time.monotonic()
            self.stopped.set()


def _grpcio_stream(address: str, deadline: float | None) -> float:
    """Cancel after the first event (or run into ``deadline``); the cancel/deadline time."""
    channel = grpc.insecure_channel(address)
    call = channel.unary_stream(
        STREAM_PATH,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=UPB("model.v1.StreamEvent").FromString,
    )
    message = UPB("model.v1.StreamCompletionRequest").FromString(bytes(request()))
    try:
        if deadline is None:
            events = call(message)
            next(events)
            at = time.monotonic()
            events.cancel()
            return at
        started = time.monotonic()
        with contextlib.suppress(grpc.RpcError):
            for _ in call(message, timeout=deadline):
                pass
        return started + deadline
    finally:
        channel.close()


async def stop_latency(repeat: int) -> dict[str, float]:
    provider = Unpaced()
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    result: dict[str, list[float]] = {"cancel": [], "deadline_10ms": []}
    try:
        for _ in range(repeat):
            for name, deadline in (("cancel", None), ("deadline_10ms", 0.01)):
                at = await asyncio.to_thread(_grpcio_stream, f"127.0.0.1:{port}", deadline)
                await asyncio.wait_for(provider.stopped.wait(), 30)
                result[name].append(provider.stopped_at - at)
    finally:
        await server.shutdown(grace_period=0)
    return {name: statistics.median(values) * 1000 for name, values in result.items()}


# -- 2. memory ---------------------------------------------------------------------------------


def _render(port: int, mib: int) -> str:
    payload = json.dumps({"text": "x" * 1024, "times": mib * 1024}).encode()
    message = UPB("model.v1.RenderRequest")(payload_type="reference.repeat", payload=payload)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            "/model.v1.ModelService/Render",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=UPB("model.v1.RenderResponse").FromString,
        )
        try:
            call(message, timeout=120)
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return "OK"


class Raw:
    """A minimal raw HTTP/2 client (the ``h2`` package over a blocking socket)."""

    def __init__(self, port: int, *, ack: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.ack = ack
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.status: dict[int, str] = {}
        while self.conn.outbound_flow_control_window <= 65_535 and self.pump(0.5):
            pass

    def open(self, method: str, body: bytes, *, reset: bool = False) -> int:
        sid: int = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            sid,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/model.v1.ModelService/" + method),
                (":authority", "127.0.0.1"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
        )
        size = self.conn.max_outbound_frame_size
        for start in range(0, len(body), size):
            last = start + size >= len(body)
            self.conn.send_data(sid, body[start : start + size], end_stream=last and not reset)
        if reset:
            self.conn.reset_stream(sid)
        self.sock.sendall(self.conn.data_to_send())
        return sid

    def pump(self, wait: float) -> bool:
        self.sock.settimeout(wait)
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            return True
        if not chunk:
            return False
        for event in self.conn.receive_data(chunk):
            if isinstance(event, h2.events.DataReceived) and self.ack:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                status = {str(k): str(v) for k, v in event.headers}.get("grpc-status")
                if status is not None:
                    self.status[event.stream_id] = status
        self.sock.sendall(self.conn.data_to_send())
        return True

    def close(self) -> None:
        self.sock.close()


def memory(clients: int, calls: int) -> dict[str, Any]:
    proc, port = spawn_serve("--log-level", "WARNING")
    try:
        _render(port, 1)
        time.sleep(0.5)
        base, fds_before = rss(proc.pid), fds(proc.pid)
        peak = base
        codes: list[str] = []

        def client() -> None:
            for _ in range(calls):
                codes.append(_render(port, 60))

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss(proc.pid))
            time.sleep(0.05)
        payload = json.dumps({"text": "x" * 1024, "times": 60 * 1024}).encode()
        raw = Raw(port, ack=False)  # never reads, then disconnects
        raw.open(
            "Render",
            frame(
                bytes(
                    UPB("model.v1.RenderRequest")(
                        payload_type="reference.repeat", payload=payload
                    ).SerializeToString()
                )
            ),
        )
        until = time.monotonic() + 60
        while rss(proc.pid) < base + 60 * MIB and time.monotonic() < until:
            peak = max(peak, rss(proc.pid))
            time.sleep(0.02)
        time.sleep(0.3)
        peak = max(peak, rss(proc.pid))
        raw.close()
        time.sleep(3)
        final, fds_after = rss(proc.pid), fds(proc.pid)
        refused = sum(code == "RESOURCE_EXHAUSTED" for code in codes)
        return {
            "calls_refused": f"{refused}/{clients * calls}",
            "baseline_mib": round(base / MIB, 1),
            "peak_mib": round(peak / MIB, 1),
            "final_mib": round(final / MIB, 1),
            "final_over_baseline": round(final / base, 3),
            "server_fds_before_after": (fds_before, fds_after),
        }
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


# -- 3. resets ---------------------------------------------------------------------------------


def resets(count: int) -> dict[str, Any]:
    proc, port = spawn_serve("--log-level", "WARNING")
    raw = Raw(port)
    try:
        body = frame(bytes(CountTokensRequest(model_id="reference-large")))
        body += b"\x00" * (60_000 - len(body))
        done = 0
        for _ in range(count):
            waited = time.monotonic()
            while raw.conn.outbound_flow_control_window < len(body):
                raw.pump(0.05)
                if time.monotonic() - waited > 5:
                    break
            if raw.conn.outbound_flow_control_window < len(body):
                break
            raw.open("CountTokens", body, reset=True)
            done += 1
        sid = raw.open("Describe", frame(bytes(DescribeRequest())))
        until = time.monotonic() + 10
        while sid not in raw.status and time.monotonic() < until and raw.pump(0.1):
            pass
        return {"resets_survived": done, "describe_status_after": raw.status.get(sid)}
    finally:
        raw.close()
        proc.terminate()
        proc.communicate(timeout=30)


# -- 4. load -----------------------------------------------------------------------------------


class Gated(ReferenceProvider):
    def __init__(self, gate: int) -> None:
        super().__init__()
        self.gate, self.active, self.peak = gate, 0, 0
        self.all_in = asyncio.Event()

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        if self.active >= self.gate:
            self.all_in.set()
        events = super().stream(request, context)
        try:
            yield await anext(events)
            await asyncio.wait_for(self.all_in.wait(), 120)
            async for event in events:
                yield event
        finally:
            self.active -= 1
            await cast("AsyncGenerator[StreamEvent, None]", events).aclose()


async def _collect(client: ModelClient) -> list[bytes]:
    out = []
    async for event in client.stream(request(), timeout=120):
        if event.stream_start is not None:
            event.stream_start.provider_request_id = ""
        out.append(bytes(event))
    return out


async def load(streams: int, cancels: int) -> dict[str, Any]:
    errors: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR or "socket.send" in record.getMessage():
                errors.append(record)

    handler = Catch()
    logging.getLogger().addHandler(handler)
    provider = Gated(1)
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{port}"
    clients = [ModelClient.connect(address) for _ in range(10)]
    try:
        started = time.monotonic()
        expected = await _collect(clients[0])
        provider.all_in.clear()
        provider.gate, provider.peak = streams, 0
        results = await asyncio.gather(*(_collect(clients[i % 10]) for i in range(streams)))
        in_order = sum(result == expected for result in results)
        held_s = time.monotonic() - started
    finally:
        for client in clients:
            client.close()
        await server.shutdown(grace_period=0)

    paced = ReferenceProvider()
    await paced.configure({"pace_tokens_per_second": 3000})
    server = ModelServer(paced)
    port = await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{port}"
    tasks_before, fds_before = asyncio.all_tasks(), fds()
    rng = random.Random(8)
    limit = asyncio.Semaphore(100)
    clients = [ModelClient.connect(address) for _ in range(10)]

    async def drain(client: ModelClient) -> None:
        async for _ in client.stream(request(), timeout=60):
            pass

    async def one(client: ModelClient) -> None:
        async with limit:
            task = asyncio.create_task(drain(client))
            await asyncio.sleep(rng.uniform(0, 0.03))
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    try:
        started = time.monotonic()
        await asyncio.gather(*(one(clients[i % 10]) for i in range(cancels)))
        cancel_s = time.monotonic() - started
    finally:
        for client in clients:
            client.close()
    for _ in range(200):
        if fds() <= fds_before and asyncio.all_tasks() <= tasks_before:
            break
        await asyncio.sleep(0.05)
    result = {
        "streams_held_at_once": provider.peak,
        "streams_in_order": f"{in_order}/{streams}",
        "streams_s": round(held_s, 2),
        "cancelled_streams": cancels,
        "cancel_s": round(cancel_s, 2),
        "tasks_left": len(asyncio.all_tasks() - tasks_before),
        "fds_before_after": (fds_before, fds()),
        "error_or_send_warning_lines": len(errors),
    }
    await server.shutdown(grace_period=0)
    logging.getLogger().removeHandler(handler)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--resets", type=int, default=500)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--cancels", type=int, default=1000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    stop = asyncio.run(stop_latency(args.repeat))
    print(
        f"stop (median of {args.repeat}, ms):",
        json.dumps({k: round(v, 1) for k, v in stop.items()}),
    )
    print("memory:", json.dumps(memory(args.clients, args.calls)))
    print("resets:", json.dumps(resets(args.resets)))
    print("load:", json.dumps(asyncio.run(load(args.streams, args.cancels))))


if __name__ == "__main__":
    main()
