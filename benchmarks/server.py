"""Server benchmark: the ModelServer adapter against a minimal grpclib server, in one run.

Three measurements, each a ratio against a baseline measured in the same run:

1. ``throughput``: events per second on one StreamCompletion over loopback. Adapter: the
   reference ``ModelServer`` (request validation, event-order checking, betterproto2 encoding,
   per-RPC log) serving a provider that yields ``--events`` prepared events. Baseline: a minimal
   grpclib server streaming the same events as google's upb messages (the practical limit of
   this stack). The client reads raw frames (no decoding) so both sides pay the same.
2. ``concurrency``: ``--streams`` concurrent streams of ``--per-stream`` events each: aggregate
   events/s, p99 gap between consecutive events of a stream (client side), and the server
   process's peak RSS (VmHWM), adapter vs baseline.
3. ``first_event``: time to the first event. Direct: iterating the reference provider's
   ``stream()`` in-process. Baseline: the minimal server's first event over loopback. Adapter:
   the ModelServer's first event over loopback (a realistic request, validated). The overhead
   the adapter adds is adapter - baseline.

Servers run in their own process (one core each on a 2-core machine); the client runs here.
The upb classes are compiled from ``proto/`` into a temporary directory with
``grpc_tools.protoc``. Numbers are medians over ``--repeat`` runs.

Usage: ``.venv/bin/python benchmarks/server.py [--events 20000] [--streams 200] [--per-stream 500]
[--repeat 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc_tools
import grpclib.const
import grpclib.server
from _harness import user_request
from grpc_tools import protoc
from grpclib.client import Channel
from grpclib.encoding.base import CodecBase
from grpclib.encoding.proto import ProtoCodec

from protocol_py import _compat
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    GenerationParams,
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamStart,
    TextDelta,
    Usage,
)

ROOT = Path(__file__).resolve().parent.parent
PATH = "/model.v1.ModelService/StreamCompletion"


def compile_upb(out_dir: Path) -> None:
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    proto_root = ROOT / "proto"
    sources = sorted(p.relative_to(proto_root).as_posix() for p in proto_root.rglob("*.proto"))
    args = ["protoc", f"-I{proto_root}", f"-I{well_known}", f"--python_out={out_dir}", *sources]
    if protoc.main(args) != 0:
        raise RuntimeError("grpc_tools.protoc failed")


def events(n: int) -> list[StreamEvent]:
    """stream_start, ``n - 3`` text deltas of a few words, usage, stop."""
    body = [
        StreamEvent(text_delta=TextDelta(text=f"token {i} of the answer ")) for i in range(n - 3)
    ]
    return [
        StreamEvent(stream_start=StreamStart(provider_request_id="req_bench")),
        *body,
        StreamEvent(usage=Usage(input_tokens=100, output_tokens=n)),
        StreamEvent(stop=Stop(reason=StopReason.END_TURN)),
    ]


def request(model: str = "reference-small") -> StreamCompletionRequest:
    return user_request(model, "Benchmark the server please.")


class RawCodec(CodecBase):
    """Client codec that sends bytes as they are and does not decode replies."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


class FixedProvider(ReferenceProvider):
    """The reference declarations, streaming a prepared event list."""

    def __init__(self, prepared: dict[int, list[StreamEvent]]) -> None:
        super().__init__()
        self.prepared = prepared

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        count = request.params.max_output_tokens if request.params else None
        for event in self.prepared[int(count or 0)]:
            yield event


def _serve_adapter(port_queue: Any, sizes: list[int]) -> None:
    logging.disable(logging.INFO)  # the per-RPC line would go nowhere anyway

    async def main() -> None:
        server = ModelServer(FixedProvider({n: events(n) for n in sizes}))
        port = await server.start("127.0.0.1", 0)
        port_queue.put(port)
        await asyncio.Event().wait()

    asyncio.run(main())


def _serve_minimal(port_queue: Any, sizes: list[int], upb_dir: str) -> None:
    sys.path.insert(0, upb_dir)
    types_pb2 = importlib.import_module("model.v1.types_pb2")
    upb_event = types_pb2.StreamEvent
    upb_request = types_pb2.StreamCompletionRequest
    prepared = {n: [upb_event.FromString(bytes(e)) for e in events(n)] for n in sizes}

    class Minimal:
        async def handle(self, stream: grpclib.server.Stream[Any, Any]) -> None:
            req = await stream.recv_message()
            assert req is not None
            count = req.params.max_output_tokens if req.params.HasField("max_output_tokens") else 0
            for event in prepared[count]:
                await stream.send_message(event)

        def __mapping__(self) -> dict[str, grpclib.const.Handler]:
            return {
                PATH: grpclib.const.Handler(
                    self.handle, grpclib.const.Cardinality.UNARY_STREAM, upb_request, upb_event
                )
            }

    async def main() -> None:
        server = grpclib.server.Server([Minimal()], codec=ProtoCodec())
        await server.start("127.0.0.1", 0)
        assert server._server is not None
        port_queue.put(server._server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        await asyncio.Event().wait()

    asyncio.run(main())


def start(target: Any, *args: Any) -> tuple[Any, int]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(queue, *args), daemon=True)
    proc.start()
    return proc, int(queue.get(timeout=60))


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def one_stream(
    channel: Channel, count: int, gaps: list[float] | None = None
) -> tuple[int, float]:
    """Read one stream of ``count`` events; returns (events, seconds to first event)."""
    req = request("reference-large")
    req.params = GenerationParams(max_output_tokens=count)
    started = time.perf_counter()
    first = 0.0
    received = 0
    last = started
    async with channel.request(
        PATH, grpclib.const.Cardinality.UNARY_STREAM, StreamCompletionRequest, bytes
    ) as stream:
        await stream.send_message(req, end=True)
        async for _ in stream:
            now = time.perf_counter()
            if received == 0:
                first = now - started
            elif gaps is not None:
                gaps.append(now - last)
            last = now
            received += 1
    return received, first


async def throughput(port: int, n: int) -> float:
    channel = Channel("127.0.0.1", port, codec=RawCodec())
    try:
        await one_stream(channel, 50)  # warm up the connection
        started = time.perf_counter()
        received, _ = await one_stream(channel, n)
        elapsed = time.perf_counter() - started
    finally:
        channel.close()
    assert received == n, (received, n)
    return n / elapsed


async def concurrency(port: int, streams: int, per: int) -> tuple[float, float]:
    channels = [Channel("127.0.0.1", port, codec=RawCodec()) for _ in range(8)]
    gaps: list[float] = []
    try:
        await asyncio.gather(*(one_stream(c, 10) for c in channels))
        started = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(channels[i % len(channels)], per, gaps) for i in range(streams))
        )
        elapsed = time.perf_counter() - started
    finally:
        for channel in channels:
            channel.close()
    total = sum(r for r, _ in results)
    assert total == streams * per
    gaps.sort()
    p99 = gaps[int(len(gaps) * 0.99)]
    return total / elapsed, p99 * 1000


async def first_event_direct(samples: int) -> float:
    provider = ReferenceProvider()
    times = []
    for _ in range(samples):
        req = request("reference-large")
        started = time.perf_counter()
        agen = provider.stream(req, CallContext(session_id="b", turn_id="b"))
        await agen.__anext__()
        times.append(time.perf_counter() - started)
        await agen.aclose()  # type: ignore[attr-defined]
    return statistics.median(times) * 1e6


async def first_event_remote(port: int, samples: int) -> float:
    channel = Channel("127.0.0.1", port, codec=RawCodec())
    times = []
    try:
        await one_stream(channel, 10)
        for _ in range(samples):
            _, first = await one_stream(channel, 5)
            times.append(first)
    finally:
        channel.close()
    return statistics.median(times) * 1e6


async def first_event_adapter(port: int, samples: int) -> float:
    """Adapter over loopback with the real reference provider (validation included)."""
    channel = Channel("127.0.0.1", port, codec=RawCodec())
    times = []
    try:
        for _ in range(samples + 5):
            req = request("reference-large")
            started = time.perf_counter()
            async with channel.request(
                PATH, grpclib.const.Cardinality.UNARY_STREAM, StreamCompletionRequest, bytes
            ) as stream:
                await stream.send_message(req, end=True)
                await stream.recv_message()
                times.append(time.perf_counter() - started)
                async for _ in stream:
                    pass
    finally:
        channel.close()
    return statistics.median(times[5:]) * 1e6


def _serve_reference(port_queue: Any) -> None:
    logging.disable(logging.INFO)

    async def main() -> None:
        server = ModelServer(ReferenceProvider())
        port_queue.put(await server.start("127.0.0.1", 0))
        await asyncio.Event().wait()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--per-stream", type=int, default=500)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [5, 10, 50, args.per_stream, args.events]
    _compat.install()  # the raw grpclib clients here get the patches a ModelClient installs

    with tempfile.TemporaryDirectory() as upb_dir:
        compile_upb(Path(upb_dir))
        adapter, adapter_port = start(_serve_adapter, sizes)
        minimal, minimal_port = start(_serve_minimal, sizes, upb_dir)
        reference, reference_port = start(_serve_reference)
        try:
            print(
                f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; medians of {args.repeat}"
            )
            a = statistics.median(
                asyncio.run(throughput(adapter_port, args.events)) for _ in range(args.repeat)
            )
            b = statistics.median(
                asyncio.run(throughput(minimal_port, args.events)) for _ in range(args.repeat)
            )
            print(f"\n1. one stream of {args.events} events over loopback")
            print(f"   adapter (betterproto2)    {a:10.0f} events/s")
            print(f"   minimal grpclib + upb     {b:10.0f} events/s")
            print(f"   ratio adapter/baseline    {a / b:10.2f}")

            runs_a = [
                asyncio.run(concurrency(adapter_port, args.streams, args.per_stream))
                for _ in range(args.repeat)
            ]
            runs_b = [
                asyncio.run(concurrency(minimal_port, args.streams, args.per_stream))
                for _ in range(args.repeat)
            ]
            agg_a = statistics.median(r[0] for r in runs_a)
            agg_b = statistics.median(r[0] for r in runs_b)
            p99_a = statistics.median(r[1] for r in runs_a)
            p99_b = statistics.median(r[1] for r in runs_b)
            rss_a, rss_b = peak_rss_mib(adapter.pid or 0), peak_rss_mib(minimal.pid or 0)
            print(f"\n2. {args.streams} concurrent streams x {args.per_stream} events")
            print(f"   {'':26}{'events/s':>10} {'p99 gap ms':>11} {'peak RSS MiB':>13}")
            print(f"   {'adapter':26}{agg_a:10.0f} {p99_a:11.2f} {rss_a:13.1f}")
            print(f"   {'minimal grpclib + upb':26}{agg_b:10.0f} {p99_b:11.2f} {rss_b:13.1f}")
            print(
                f"   {'ratio adapter/baseline':26}{agg_a / agg_b:10.2f} {p99_a / p99_b:11.2f} "
                f"{rss_a / rss_b:13.2f}"
            )

            direct = statistics.median(
                asyncio.run(first_event_direct(args.samples)) for _ in range(args.repeat)
            )
            base = statistics.median(
                asyncio.run(first_event_remote(minimal_port, args.samples))
                for _ in range(args.repeat)
            )
            full = statistics.median(
                asyncio.run(first_event_adapter(reference_port, args.samples))
                for _ in range(args.repeat)
            )
            print("\n3. time to first event (median, microseconds)")
            print(f"   reference provider called directly        {direct:9.0f}")
            print(f"   minimal grpclib + upb server, loopback    {base:9.0f}")
            print(f"   adapter + reference provider, loopback    {full:9.0f}")
            print(
                f"   added by the adapter vs minimal server    {full - base:9.0f}"
                f"  (ratio {full / base:.2f})"
            )
        finally:
            for proc in (adapter, minimal, reference):
                proc.terminate()
                proc.join(5)


if __name__ == "__main__":
    main()
