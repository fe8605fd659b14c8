"""Loop stall: huge requests served beside a running stream (no request may stall the others).

Three processes: the reference server (``ModelServer`` + ``ReferenceProvider``, paced output)
with a loop-lag probe (a task sleeping 1 ms and recording the longest gap between its wake-ups);
a sender that POSTs one huge StreamCompletion (pre-encoded, raw bytes) and reads its reply; and
this process, which reads another, paced stream from the same server and records the longest
gap between its events while the huge request is served.

Requests: see :data:`KINDS` (``4mb``: 100,000 short user messages, about 4.4 MB; ``60mib``:
one user message holding a 60 MiB text block; a 16 MiB block without whitespace; a Configure
of a million keys; ``provider_options`` of a million entries; a 60 MiB Render reply). A
fourth client calls Describe every 10 ms and records the worst wait between two answers. Each
kind runs ``--repeat`` times on a fresh server process; the
figures are medians: the worst gap seen by the other stream (its normal gap, 1/pace, is
printed beside it), the worst loop-lag probe gap, the huge request's total time and the
server's peak RSS growth over its idle RSS (VmHWM - VmRSS before the request). A control
period of the same measurements without any huge request, just before it, shows the noise
of the machine itself (other processes preempting the server on a shared 2-core machine).

Usage: ``.venv/bin/python benchmarks/loop_stall.py [--kinds 4mb,60mib] [--repeat 3]
[--trace-stalls DIR [--trace-ms 20]]``: the trace shows which line (in the loop thread or a
worker) holds the interpreter during each stall longer than ``--trace-ms`` (``stall_trace.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import json
import logging
import multiprocessing
import os
import statistics
import sys
import time
from typing import Any, Final

import grpclib.const
from _harness import status_kib
from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from server import RawCodec
from stall_trace import PySampler, StallTracer, summarize, trace_gc

from protocol_py.client.client import ModelClient
from protocol_py.codec import wire
from protocol_py.codec.wire_gen import MAX_DECODED_OBJECTS
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    GenerationParams,
    RenderRequest,
    StreamCompletionRequest,
)

PATH = "/model.v1.ModelService/StreamCompletion"
CONFIGURE = "/model.v1.ModelService/Configure"
RENDER = "/model.v1.ModelService/Render"
PACE = 1000.0
"""Output pace of the observed stream, reference tokens per second."""
CONTROL_S = 2.0
"""Length of the idle control period measured before each huge request, seconds."""
SETTLE_S = 0.5
"""Time the gaps keep being recorded after the huge request's reply ended, seconds (the server
frees the request then)."""


KINDS: Final = ("4mb", "60mib", "bang16mib", "config1m", "options1m", "render60mib")
"""The huge calls: ``4mb``: 100,000 short user messages (about 4.4 MB); ``60mib``: one user
message holding a 60 MiB text block of 1,023-character words; ``bang16mib``: one 16 MiB text
block of ``!`` (one token per character, no whitespace); ``config1m``: a Configure of 1,000,000
keys; ``options1m``: a StreamCompletion whose ``provider_options`` has
:data:`OPTION_ENTRIES` entries;
``render60mib``: a Render whose reply is 60 MiB of text."""


OPTION_ENTRIES: Final = MAX_DECODED_OBJECTS - 1000
"""Entries of ``options1m``'s ``provider_options``: just under the decoder's bound on map
entries and repeated elements, the largest such request the server decodes."""


def _completion(messages: list[Message], options: Struct | None = None) -> bytes:
    request = StreamCompletionRequest(
        model_id="reference-large",
        messages=messages,
        params=GenerationParams(max_output_tokens=16),
        call_context=CallContext(session_id="stall", turn_id="huge"),
        provider_options=options,
    )
    return wire.encode(request)


def _one_text(text: str) -> list[Message]:
    return [
        Message(
            role=Role.USER, id="01J" + "0" * 23, content=[ContentBlock(text=TextBlock(text=text))]
        )
    ]


def _million_keys(count: int = 1_000_000) -> Struct:
    return Struct(fields={f"k{i:07d}": Value(number_value=float(i)) for i in range(count)})


def huge_request(kind: str) -> tuple[str, bytes]:
    """The RPC path and encoded request of ``kind`` (see :data:`KINDS`)."""
    if kind == "4mb":
        messages = [
            Message(
                role=Role.USER,
                id=f"01J{i:023d}",
                content=[ContentBlock(text=TextBlock(text=f"m{i}"))],
            )
            for i in range(100_000)
        ]
        return PATH, _completion(messages)
    if kind == "60mib":
        return PATH, _completion(_one_text(("x" * 1023 + " ") * (60 * 1024)))
    if kind == "bang16mib":
        return PATH, _completion(_one_text("!" * (16 * 1024 * 1024)))
    if kind == "config1m":
        return CONFIGURE, wire.encode(ConfigureRequest(config=_million_keys()))
    if kind == "options1m":
        # just under MAX_DECODED_OBJECTS, so the request is decoded whole and served
        return PATH, _completion(_one_text("hello"), _million_keys(OPTION_ENTRIES))
    if kind == "render60mib":
        payload = json.dumps({"text": "x" * 1024, "times": 60 * 1024}).encode()
        return RENDER, wire.encode(RenderRequest(payload_type="reference.repeat", payload=payload))
    raise ValueError(f"--kinds: unknown kind {kind!r} (known: {', '.join(KINDS)})")


def _serve(port_queue: Any, worst: Any, trace: dict[str, Any] | None = None) -> None:
    logging.disable(logging.WARNING)
    trace = trace or {}
    if trace.get("gc"):
        trace_gc(sys.stdout)

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        tracer: StallTracer | PySampler | None = None
        if trace.get("frames"):
            tracer = StallTracer(trace["frames"])
            faulthandler.enable()
        elif trace.get("python_ms"):
            tracer = PySampler(sys.stdout, trace["python_ms"])
        while True:
            await asyncio.sleep(0.001)
            now = loop.time()
            worst.value = max(worst.value, now - last)
            last = now
            if tracer is not None:
                tracer.tick()

    async def main() -> None:
        server = ModelServer(ReferenceProvider(), max_message_size=64 * 1024 * 1024)
        port_queue.put(await server.start("127.0.0.1", 0))
        await probe()

    asyncio.run(main())


def _send(port: int, kind: str, result: Any) -> None:
    path, body = huge_request(kind)
    card = (
        grpclib.const.Cardinality.UNARY_STREAM
        if path == PATH
        else grpclib.const.Cardinality.UNARY_UNARY
    )

    async def main() -> None:
        channel = Channel("127.0.0.1", port, codec=RawCodec())
        started = time.perf_counter()
        try:
            async with channel.request(path, card, bytes, bytes, timeout=600) as stream:
                await stream.send_message(body, end=True)
                async for _ in stream:
                    pass
        except GRPCError:
            pass  # a refused Configure (unknown keys) still went through decode and checks
        finally:
            channel.close()
        result.value = time.perf_counter() - started

    asyncio.run(main())


class Observer:
    """Reads paced streams back to back and records the worst gap between two events of one
    stream since :meth:`reset`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst = 0.0
        self.stop = False

    def reset(self) -> None:
        """Forget the worst gap seen so far."""
        self.worst = 0.0

    async def run(self) -> None:
        """Stream until :attr:`stop` is set."""
        client = ModelClient.connect(f"127.0.0.1:{self.port}")
        await client.configure({"pace_tokens_per_second": PACE})
        request = StreamCompletionRequest(
            model_id="reference-large",
            messages=[
                Message(
                    role=Role.USER,
                    id="01J" + "1" * 23,
                    content=[ContentBlock(text=TextBlock(text="Tell me a long story. " * 200))],
                )
            ],
            params=GenerationParams(max_output_tokens=60_000),
            call_context=CallContext(session_id="stall", turn_id="observer"),
        )
        try:
            while not self.stop:
                last = 0.0
                async for _ in client.stream(request, timeout=600):
                    now = time.perf_counter()
                    if last:
                        self.worst = max(self.worst, now - last)
                    last = now
        finally:
            client.close()


DESCRIBE_EVERY_S: Final = 0.01
"""Pause between two Describe calls of the Describe observer, seconds."""


class DescribeObserver:
    """Calls Describe every :data:`DESCRIBE_EVERY_S` on its own connection and records the
    worst time between two answers since :meth:`reset` (a stall shows as a long wait)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.worst = 0.0
        self.stop = False

    def reset(self) -> None:
        """Forget the worst gap seen so far."""
        self.worst = 0.0

    async def run(self) -> None:
        """Call Describe until :attr:`stop` is set."""
        client = ModelClient.connect(f"127.0.0.1:{self.port}")
        try:
            last = time.perf_counter()
            while not self.stop:
                await client.describe(timeout=600)
                now = time.perf_counter()
                self.worst = max(self.worst, now - last)
                await asyncio.sleep(DESCRIBE_EVERY_S)
                last = time.perf_counter()
        finally:
            client.close()


async def one_run(
    ctx: Any, kind: str, trace: dict[str, Any] | None = None
) -> tuple[float, float, float, float, float, float, float, float]:
    """(worst stream gap s, worst probe gap s, the same two over an idle control period of
    :data:`CONTROL_S`, huge request s, peak RSS growth MiB, worst Describe gap s, the same over
    the control period); ``trace`` (see :func:`main`'s
    ``--trace-*`` flags): ``frames`` (a file for :class:`stall_trace.StallTracer`),
    ``python_ms`` (:class:`stall_trace.PySampler`'s threshold), ``gc`` (print long garbage
    collections)."""
    worst_probe = ctx.Value("d", 0.0)
    port_queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(port_queue, worst_probe, trace), daemon=True)
    server.start()
    port = int(port_queue.get(timeout=60))
    observer = Observer(port)
    describer = DescribeObserver(port)
    task = asyncio.create_task(observer.run())
    task2 = asyncio.create_task(describer.run())
    try:
        await asyncio.sleep(0.5)  # the stream is flowing
        observer.reset()
        describer.reset()
        worst_probe.value = 0.0
        await asyncio.sleep(CONTROL_S)
        control_stream, control_probe = observer.worst, worst_probe.value
        control_describe = describer.worst
        idle_rss = status_kib(server.pid or 0, "VmRSS")
        observer.reset()
        describer.reset()
        worst_probe.value = 0.0
        result = ctx.Value("d", 0.0)
        sender = ctx.Process(target=_send, args=(port, kind, result), daemon=True)
        sender.start()
        await asyncio.to_thread(sender.join, 600)
        # the server still frees the request after its reply ended: a stall then reaches the
        # observed stream only with its next event, so both are read after a short settle
        await asyncio.sleep(SETTLE_S)
        stream_gap, probe_gap = observer.worst, worst_probe.value
        describe_gap = describer.worst
        growth = (status_kib(server.pid or 0, "VmHWM") - idle_rss) / 1024
        return (
            stream_gap,
            probe_gap,
            control_stream,
            control_probe,
            result.value,
            growth,
            describe_gap,
            control_describe,
        )
    finally:
        observer.stop = describer.stop = True
        for each in (task, task2):
            each.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await each
        server.terminate()
        server.join(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"huge calls: {', '.join(KINDS)}")
    parser.add_argument("--repeat", type=int, default=3, help="runs per kind (median)")
    parser.add_argument(
        "--trace-stalls",
        metavar="DIR",
        help="sample every thread's frames during loop stalls (stall_trace.py) into DIR and "
        "print the stalls longer than --trace-ms after each run (slows the server a little)",
    )
    parser.add_argument("--trace-ms", type=float, default=20.0, help="stalls printed, ms")
    parser.add_argument(
        "--trace-gc", action="store_true", help="the server prints its garbage collections >= 2 ms"
    )
    parser.add_argument(
        "--trace-python",
        action="store_true",
        help="sample all threads' frames from a Python thread and print those taken during "
        "stalls longer than --trace-ms (pure-Python stalls; never crashes the server)",
    )
    args = parser.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    print(
        f"python {sys.version.split()[0]}; switch interval {sys.getswitchinterval() * 1000:g} ms; "
        f"median of {args.repeat}; observed stream paced at {PACE:g} tokens/s"
    )
    print(
        f"{'request':>12}{'bytes':>12}{'stream gap ms':>15}{'probe gap ms':>14}"
        f"{'Describe ms':>13}{'control ms':>22}{'request s':>11}{'peak RSS +MiB':>15}"
    )
    for kind in args.kinds.split(","):
        size = len(huge_request(kind)[1])
        runs = []
        for i in range(args.repeat):
            trace: dict[str, Any] = {"gc": args.trace_gc}
            if args.trace_python:
                trace["python_ms"] = args.trace_ms
            if args.trace_stalls:
                os.makedirs(args.trace_stalls, exist_ok=True)
                trace["frames"] = os.path.join(args.trace_stalls, f"{kind}-{i + 1}.txt")
            runs.append(asyncio.run(one_run(ctx, kind, trace)))
            if trace.get("frames"):
                print(f"--- {kind} run {i + 1}: {trace['frames']}")
                summarize(trace["frames"], args.trace_ms, sys.stdout)
        gap, probe, c_gap, c_probe = (
            statistics.median(r[i] for r in runs) * 1000 for i in range(4)
        )
        took = statistics.median(r[4] for r in runs)
        growth = statistics.median(r[5] for r in runs)
        desc, c_desc = (statistics.median(r[i] for r in runs) * 1000 for i in (6, 7))
        print(
            f"{kind:>12}{size:>12,}{gap:>15.1f}{probe:>14.1f}{desc:>13.1f}"
            f"{c_gap:>8.1f}/{c_probe:.1f}/{c_desc:<6.1f}{took:>11.2f}{growth:>15.0f}"
        )
    print(
        "Describe: worst time between two Describe answers (one call every "
        f"{DESCRIBE_EVERY_S * 1000:g} ms); control: worst stream gap / probe gap / Describe gap "
        "over an idle period before the call"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
