"""Adapter throughput: a 20,000-chunk SSE stream through the whole path vs a bare reader.

Paths measured: stub upstream (127.0.0.1, raw asyncio HTTP/1.1) -> httpx -> SSE parser ->
OpenAI-compatible translator -> provider -> grpclib server (validation, event-order check) ->
grpclib client. Baseline, in the same run and against the same stub: a bare ``httpx`` streaming
read through :class:`protocol_py.providers.http.sse.SSEParser` plus ``json.loads`` of each chunk
(what any
client minimally does). Prints events/s for both and the ratio.

With ``--processes`` the stub and the server each run in their own process and only the
client runs here (the figure of the target in docs/performance.md); without it everything shares
one process.

Run: ``.venv/bin/python benchmarks/adapter.py [--chunks 20000] [--repeat 5] [--processes]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import multiprocessing
import os
import pstats
import signal
import statistics
import time
from typing import Any

import httpx

from protocol_py.client.client import ModelClient
from protocol_py.providers.http.sse import SSEParser
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.server import ModelServer
from protocol_py.server.grpc_layer.limits import DEFAULT_MAX_MESSAGE_SIZE, LimitedCodec
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent


def build_body(chunks: int) -> bytes:
    """An OpenAI-compatible stream: ``chunks`` content deltas, finish, usage, [DONE]."""
    parts: list[bytes] = []
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "gpt-6-sol"}
    for i in range(chunks):
        chunk = {**head, "choices": [{"index": 0, "delta": {"content": f"tok{i} "}}]}
        parts.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    parts.append(
        b"data: "
        + json.dumps(
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        ).encode()
        + b"\n\n"
    )
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": chunks + 10}
    parts.append(b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode() + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


async def start_stub(body: bytes) -> tuple[asyncio.Server, str]:
    """A stub upstream answering every request with ``body`` as text/event-stream."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        step = 16 * 1024
        for i in range(0, len(body), step):
            writer.write(body[i : i + step])
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def bare(url: str) -> tuple[int, float]:
    """Baseline: httpx stream + SSE parser + json.loads per event."""
    start = time.perf_counter()
    count = 0
    async with (
        httpx.AsyncClient(timeout=None) as client,
        client.stream("POST", url + "/chat/completions", content=b"{}") as response,
    ):
        parser = SSEParser()
        async for data in response.aiter_bytes():
            for event in parser.feed(data):
                if event.data != "[DONE]":
                    json.loads(event.data)
                count += 1
    return count, time.perf_counter() - start


def bench_request() -> StreamCompletionRequest:
    """The benchmark's completion request."""
    return StreamCompletionRequest(
        model_id="gpt-6-sol",
        messages=[
            Message(role=Role.USER, id="u1", content=[ContentBlock(text=TextBlock(text="go"))])
        ],
        call_context=CallContext(session_id="bench", turn_id="t1"),
    )


async def adapter_only(provider: OpenAIProvider) -> tuple[int, float]:
    """The provider's stream() alone (no gRPC), to attribute the cost."""
    start = time.perf_counter()
    count = 0
    async for _ in provider.stream(bench_request(), CallContext()):
        count += 1
    return count, time.perf_counter() - start


async def full(client: ModelClient) -> tuple[int, float]:
    """The whole path: provider behind the grpclib server, read by the grpclib client."""
    start = time.perf_counter()
    count = 0
    async for event in client.stream(bench_request(), timeout=300):
        count += 1
        if event.error is not None:
            raise RuntimeError(event.error.message)
    return count, time.perf_counter() - start


def _serve_stub(port_queue: Any, chunks: int) -> None:
    async def run() -> None:
        _stub, url = await start_stub(build_body(chunks))
        port_queue.put(url)
        await asyncio.Event().wait()

    asyncio.run(run())


def _serve_plugin(port_queue: Any, url: str, profile: str | None = None) -> None:
    logging.disable(logging.INFO)
    profiler = cProfile.Profile() if profile else None

    async def run() -> None:
        server = ModelServer(OpenAIProvider(api_key="bench", base_url=url))
        port_queue.put(await server.start("127.0.0.1", 0))
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        if profiler is not None:
            profiler.enable()
        await stop.wait()
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile}/server.prof")

    asyncio.run(run())


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` in seconds (Linux /proc; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(target: Any, *args: Any) -> tuple[Any, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(queue, *args), daemon=True)
    proc.start()
    return proc, queue.get(timeout=60)


async def main_processes(chunks: int, repeat: int, profile: str | None = None) -> None:
    """Stub, server and client each in their own process: full path vs bare read.

    With ``profile`` (a directory), the server process and this process's full-path runs are
    profiled with cProfile: ``server.prof`` and ``client.prof`` there (``python -m pstats``).
    """
    stub_proc, url = _start(_serve_stub, chunks)
    server_proc, port = _start(_serve_plugin, url, profile)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    profiler = cProfile.Profile() if profile else None
    try:
        bares: list[float] = []
        fulls: list[float] = []
        cpu: list[tuple[float, float, float]] = []  # server, client CPU and wall, us/event
        for _ in range(repeat):
            n_bare, t_bare = await bare(url)
            if profiler is not None:
                profiler.enable()
            server_cpu, client_cpu = _cpu_seconds(server_proc.pid), time.process_time()
            n_full, t_full = await full(client)
            server_cpu = _cpu_seconds(server_proc.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
            if profiler is not None:
                profiler.disable()
            bares.append(n_bare / t_bare)
            fulls.append(n_full / t_full)
            cpu.append(
                (server_cpu / n_full * 1e6, client_cpu / n_full * 1e6, t_full / n_full * 1e6)
            )
        median_bare, median_full = statistics.median(bares), statistics.median(fulls)
        print(f"chunks upstream: {chunks}, separate processes, median of {repeat} runs")
        server_us, client_us, wall_us = (statistics.median(c[i] for c in cpu) for i in range(3))
        print(
            f"full path per event: server CPU {server_us:.1f} us, client CPU {client_us:.1f} us, "
            f"wall {wall_us:.1f} us"
        )
        print(f"bare httpx + SSE + json.loads : {median_bare:12,.0f} events/s ({n_bare} events)")
        print(f"stub->adapter->grpclib->client: {median_full:12,.0f} events/s ({n_full} events)")
        print(f"ratio full/bare: {median_full / median_bare:.3f}")
    finally:
        client.close()
        for proc in (server_proc, stub_proc):
            proc.terminate()
            proc.join(5)
        if profiler is not None and profile is not None:
            profiler.dump_stats(f"{profile}/client.prof")
            for name in ("server", "client"):
                print(f"--- {name} process, top functions by own time ---")
                pstats.Stats(f"{profile}/{name}.prof").sort_stats("tottime").print_stats(25)


async def main(chunks: int, repeat: int) -> None:
    """Run every path ``repeat`` times and print the median events/s of each and the ratios."""
    body = build_body(chunks)
    stub, url = await start_stub(body)
    provider = OpenAIProvider(api_key="bench", base_url=url)
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        bares: list[float] = []
        adapters: list[float] = []
        fulls: list[float] = []
        for _ in range(repeat):
            n_bare, t_bare = await bare(url)
            n_adapter, t_adapter = await adapter_only(provider)
            n_full, t_full = await full(client)
            bares.append(n_bare / t_bare)
            adapters.append(n_adapter / t_adapter)
            fulls.append(n_full / t_full)
        median_bare = statistics.median(bares)
        median_adapter = statistics.median(adapters)
        median_full = statistics.median(fulls)
        print(f"chunks upstream: {chunks} ({len(body) / 1e6:.1f} MB), median of {repeat} runs")
        print(f"bare httpx + SSE + json.loads : {median_bare:12,.0f} events/s ({n_bare} events)")
        print(
            f"adapter stream() only (no gRPC): {median_adapter:11,.0f} events/s "
            f"({n_adapter} events)"
        )
        print(f"stub->adapter->grpclib->client: {median_full:12,.0f} events/s ({n_full} events)")
        print(f"ratio adapter-only/bare: {median_adapter / median_bare:.3f}")
        print(f"ratio full/bare: {median_full / median_bare:.3f}")
    finally:
        client.close()
        await server.shutdown(grace_period=0)
        stub.close()
        await stub.wait_closed()


def stages(chunks: int, repeat: int) -> None:
    """Per-event CPU of each server step on the benchmark body, in process (best of ``repeat``):
    SSE parse, translation (JSON read included), event-order check, gRPC encode."""
    body = build_body(chunks)
    pieces = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    provider = OpenAIProvider(api_key="bench", base_url="http://127.0.0.1:9")
    codec = LimitedCodec(DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_MESSAGE_SIZE)
    sses: list[Any] = []
    events: list[StreamEvent] = []

    def parse() -> None:
        parser = SSEParser()
        sses[:] = [event for piece in pieces for event in parser.feed(piece)]

    def translate() -> None:
        translator = provider.make_translator({})
        events[:] = [event for sse in sses for event in translator.on_event(sse)]

    def check() -> None:
        checker = StreamOrderChecker()
        for event in events:
            checker.check(event)

    def encode() -> None:
        for event in events:
            codec.encode(event, StreamEvent)

    for name, step in (
        ("SSE parse", parse),
        ("translation", translate),
        ("order check", check),
        ("gRPC encode", encode),
    ):
        best = float("inf")
        for _ in range(repeat):
            start = time.process_time()
            step()
            best = min(best, time.process_time() - start)
        print(f"{name:12s}: {best / chunks * 1e6:6.2f} us per event (CPU, best of {repeat})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--processes",
        action="store_true",
        help="run the stub and the server in their own processes (the client runs here)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="with --processes: cProfile the server process and the client's full-path runs "
        "into DIR/server.prof and DIR/client.prof and print the top functions",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="print the per-event CPU of each server step (SSE, translation, order check, "
        "encode) measured in process, and exit",
    )
    args = parser.parse_args()
    if args.stages:
        stages(args.chunks, args.repeat)
    elif args.processes:
        asyncio.run(main_processes(args.chunks, args.repeat, args.profile))
    else:
        asyncio.run(main(args.chunks, args.repeat))
