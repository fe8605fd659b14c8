"""Benchmark: a storm of cancelled streams against ``protocol-py serve``, measured from outside.

A ``protocol-py serve`` subprocess (the ``reference`` provider, or the ``openai`` adapter in
front of a loopback stub upstream that streams a long answer slowly) gets ``--streams``
StreamCompletions over ``--connections`` HTTP/2 connections from this process, all started at
once, each cancelled by the client at a random point in its first ``--window`` seconds (default:
twice the median time 5 lone streams waited for their first event, so cancels land during the
request's decode, validation and token count as well as while it streams). ``--client
grpcio`` starts them from grpcio's C core, which writes all of them at once (the default
``grpclib`` client of this process starts them one after another as its own loop runs).
Printed, as medians of ``--repeat`` runs:

* ``cpu_after_s``: CPU seconds the server process used from the last cancel until it was idle
  (no CPU tick in 100 ms), and ``idle_after_s``, the wall time until then;
* ``describe_gap_ms``: the worst gap beyond the 100 ms period of a Describe called every
  100 ms by a third process on its own connection (``--probe``), from the storm's start until
  the server was idle, and ``describe_worst_ms``, the slowest of those Describes;
* ``describe_after_ms``: a Describe sent on a new connection right after the last cancel, from
  this process (with ``--client grpcio`` it also holds the storm's channels), and
  ``describe_after_fresh_ms``, the same from a process of its own started before the storm
  (what a kernel other than the storm's client sees);
* ``rss_over_baseline_mib``: the server's RSS once idle, minus its RSS before the storm (after
  the warm-up streams);
* ``upstream_open_after``: upstream connections still open once idle, and
  ``upstream_answering_after``, those of them in the middle of a response (``openai`` only;
  the others carry no request: idle connections of the adapter's keep-alive pool, httpx's
  default of at most 20).

The load average (1 minute) at the end of each run is printed beside it.

Usage: ``.venv/bin/python benchmarks/cancel_storm.py [--provider reference|openai]
[--client grpclib|grpcio] [--streams 1000] [--connections 50] [--window S] [--repeat 3]
[--prompt-kib 4]``
(``--prompt-kib``: the size of each request's one user message; from 64 KiB a request's
decode, validation and token count run in the server's worker threads).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import grpc  # type: ignore[import-untyped]
from _harness import MIB, cpu_s, medians, rss, spawn_serve, user_request

from protocol_py.client.client import ModelClient
from protocol_py_gen.model.v1 import StreamCompletionRequest

MODEL = {"reference": "reference-large", "openai": "gpt-6-sol"}

WARM_STREAMS = 5
"""Lone streams whose median wait for their first event sets the default cancel window."""

PROBE_PERIOD_S = 0.1
"""Pause between two Describe calls of the prober process, seconds."""


def probe(address: str) -> None:
    """The prober process (``--probe ADDRESS``): a Describe every :data:`PROBE_PERIOD_S` on its
    own connection until its stdin closes, then one line per call on stdout: its send and reply
    times (``time.monotonic``, the same clock in every process of the machine)."""
    done = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    calls: list[tuple[float, float]] = []
    with grpc.insecure_channel(address) as channel:
        describe = channel.unary_unary("/model.v1.ModelService/Describe")
        describe(b"", timeout=30)
        print("ready", flush=True)
        while not done.is_set():
            sent = time.monotonic()
            describe(b"", timeout=30)
            calls.append((sent, time.monotonic()))
            time.sleep(PROBE_PERIOD_S)
    print(json.dumps(calls), flush=True)


def describe_once(address: str) -> None:
    """The fresh client process (``--describe-once ADDRESS``): says ``ready``, waits for a
    line on stdin, then prints the ms one Describe on a new connection took."""
    print("ready", flush=True)
    sys.stdin.readline()
    sent = time.monotonic()
    with grpc.insecure_channel(address) as channel:
        channel.unary_unary("/model.v1.ModelService/Describe")(b"", timeout=30)
    print(round((time.monotonic() - sent) * 1000, 1), flush=True)


def grpcio_storm(
    address: str, body: bytes, streams: int, connections: int, cancels: list[float]
) -> None:
    """Start ``streams`` StreamCompletions at once over ``connections`` grpcio channels (its C
    core writes them without waiting for this thread), then cancel the i-th at ``cancels[i]``
    seconds after the start; replies are not read (grpcio reads them as its window allows)."""
    channels = [grpc.insecure_channel(address) for _ in range(connections)]
    try:
        for channel in channels:  # connected before the storm, as the grpclib clients are
            channel.unary_unary("/model.v1.ModelService/Describe")(b"", timeout=30)
        stubs = [c.unary_stream("/model.v1.ModelService/StreamCompletion") for c in channels]
        start = time.monotonic()
        calls = [stubs[i % connections](body, timeout=60) for i in range(streams)]
        for at, call in sorted(zip(cancels, calls, strict=True), key=lambda pair: pair[0]):
            time.sleep(max(0.0, start + at - time.monotonic()))
            call.cancel()
    finally:
        for channel in channels:
            channel.close()


def start_helper(mode: str, address: str) -> subprocess.Popen[str]:
    """Start this script as a helper process (``mode``: ``--probe`` or ``--describe-once``)
    and wait for its ``ready`` line."""
    helper = subprocess.Popen(
        [sys.executable, __file__, mode, address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert helper.stdout is not None
    assert helper.stdout.readline().strip() == "ready"
    return helper


def probe_figures(prober: subprocess.Popen[str], start: float, end: float) -> tuple[float, float]:
    """Stop the prober; the worst gap beyond :data:`PROBE_PERIOD_S` between two replies and
    the slowest call, both in ms, among the calls replied to from ``start`` until the first
    reply after ``end``."""
    out, _ = prober.communicate("", timeout=60)
    calls = json.loads(out)
    gap = slowest = 0.0
    last = start
    for sent, replied in calls:
        if replied < start:
            last = replied
            continue
        gap = max(gap, replied - last - PROBE_PERIOD_S)
        slowest = max(slowest, replied - sent)
        last = replied
        if replied > end:
            break
    return round(gap * 1000, 1), round(slowest * 1000, 1)


PROMPT_KIB = [1]


def _prompt() -> str:
    size = PROMPT_KIB[0] * 1024
    return ("Tell me a long story. " * (size // 22 + 1))[:size]


def request(provider: str) -> StreamCompletionRequest:
    return user_request(MODEL[provider], _prompt())


def spawn(provider: str, upstream: int) -> tuple[subprocess.Popen[str], int]:
    extra = ["--provider", provider]
    env = dict(os.environ)
    if provider == "openai":
        extra += ["--base-url", f"http://127.0.0.1:{upstream}", "--no-discover"]
        env["OPENAI_API_KEY"] = "sk-bench-key-000000000000"
    return spawn_serve(*extra, stderr=subprocess.DEVNULL, env=env)


class Upstream:
    """A loopback OpenAI-compatible upstream streaming a long answer: 2,000 chunks, 1 ms apart."""

    def __init__(self) -> None:
        self.open = 0
        self.answering = 0  # connections in the middle of a response
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        answering = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                answering = 1
                self.answering += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                chunk = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"word "}}]}\n\n'
                framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                for _ in range(2000):
                    writer.write(framed)
                    await writer.drain()
                    await asyncio.sleep(0.001)
                end = (
                    b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
                    b"\n\ndata: [DONE]\n\n"
                )
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
                await writer.drain()
                answering = 0
                self.answering -= 1
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.answering -= answering
            self.open -= 1
            writer.close()


async def storm(args: argparse.Namespace, upstream: Upstream | None) -> dict[str, Any]:
    proc, port = spawn(args.provider, upstream.port if upstream else 0)
    address = f"127.0.0.1:{port}"
    rng = random.Random(20)
    clients = [ModelClient.connect(address) for _ in range(args.connections)]
    prober: subprocess.Popen[str] | None = None
    once: subprocess.Popen[str] | None = None
    try:
        warm = clients[0]
        async for _ in warm.stream(request(args.provider), timeout=60):
            pass  # one whole stream first: the caches are warm and RSS is its steady value
        firsts = []
        for _ in range(WARM_STREAMS):
            sent = time.monotonic()
            async for _ in warm.stream(request(args.provider), timeout=60):
                firsts.append(time.monotonic() - sent)
                break  # cancelled after its first event
        # cancel points cover the whole of a lone stream's wait for its first event (the
        # request's decode, validation and token count) and as long again of streaming
        window = args.window or 2 * statistics.median(firsts)
        await asyncio.sleep(0.5)
        baseline = rss(proc.pid)
        prober = start_helper("--probe", address)
        once = start_helper("--describe-once", address)
        assert once.stdin is not None
        await asyncio.sleep(0.3)  # a quiet period first
        storm_start = time.monotonic()

        if args.client == "grpcio":
            cancels = [rng.uniform(0, window) for _ in range(args.streams)]
            body = bytes(request(args.provider))
            await asyncio.to_thread(
                grpcio_storm, address, body, args.streams, args.connections, cancels
            )

        async def one(i: int) -> None:
            async def drain() -> None:
                async for _ in clients[i % len(clients)].stream(request(args.provider), timeout=60):
                    pass

            task = asyncio.create_task(drain())
            await asyncio.sleep(rng.uniform(0, window))
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

        if args.client == "grpclib":
            await asyncio.gather(*(one(i) for i in range(args.streams)))
        last_cancel = time.monotonic()
        cpu_at_cancel = cpu_s(proc.pid)
        once.stdin.write("go\n")
        once.stdin.flush()
        fresh = ModelClient.connect(address)
        try:
            sent = time.monotonic()
            await fresh.describe(timeout=30)
            describe_ms = (time.monotonic() - sent) * 1000
        finally:
            fresh.close()
        # idle: no CPU tick across a 100 ms window
        previous = cpu_s(proc.pid)
        while True:
            await asyncio.sleep(0.1)
            now = cpu_s(proc.pid)
            if now == previous or time.monotonic() - last_cancel > 60:
                break
            previous = now
        idle_at = time.monotonic() - 0.1
        fresh_ms = float(once.communicate(timeout=60)[0].strip())
        idle_after = idle_at - last_cancel
        gap_ms, slowest_ms = probe_figures(prober, storm_start, idle_at)
        result = {
            "describe_gap_ms": gap_ms,
            "describe_worst_ms": slowest_ms,
            "cpu_after_s": round(previous - cpu_at_cancel, 3),
            "idle_after_s": round(max(idle_after, 0.0), 3),
            "describe_after_ms": round(describe_ms, 1),
            "describe_after_fresh_ms": fresh_ms,
            "rss_over_baseline_mib": round((rss(proc.pid) - baseline) / MIB, 1),
            "window_s": round(window, 3),
            "load": round(os.getloadavg()[0], 2),
        }
        if upstream is not None:
            result["upstream_open_after"] = upstream.open
            result["upstream_answering_after"] = upstream.answering
        return result
    finally:
        for client in clients:
            client.close()
        for helper in (prober, once):
            if helper is not None and helper.poll() is None:
                helper.kill()
                helper.wait(10)
        proc.terminate()
        proc.wait(10)


async def main(args: argparse.Namespace) -> None:
    upstream = None
    if args.provider == "openai":
        upstream = Upstream()
        await upstream.start()
    runs = [await storm(args, upstream) for _ in range(args.repeat)]
    if upstream is not None and upstream.server is not None:
        upstream.server.close()
    print(
        f"cancel storm: provider {args.provider}, {args.streams} streams over "
        f"{args.connections} connections, {args.prompt_kib} KiB prompts; "
        f"median of {args.repeat} runs"
    )
    print(json.dumps(medians(runs)))
    print("runs:", json.dumps(runs))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", choices=sorted(MODEL), default="reference")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--window", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--prompt-kib", type=int, default=4)
    parser.add_argument("--client", choices=["grpclib", "grpcio"], default="grpclib")
    parser.add_argument("--probe", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--describe-once", metavar="ADDRESS", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.describe_once:
        describe_once(parsed.describe_once)
        sys.exit(0)
    if parsed.probe:
        probe(parsed.probe)
        sys.exit(0)
    PROMPT_KIB[0] = parsed.prompt_kib
    asyncio.run(main(parsed))
