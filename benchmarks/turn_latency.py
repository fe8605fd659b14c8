"""Per-turn latency on long conversations: what the plugin adds to time-to-first-event.

An agent kernel resends the whole conversation every turn. For conversations of 60, 300 and 600
messages after the first user message (61, 301 and 601 in all, as the rows print them; each
pair: an assistant message with text and a tool call, then a user message with a 3.5 KB tool
result; 1,120,332 bytes, about 1.1 MB, at 601 messages), two paths
reach the same loopback stub upstream, which answers every POST with a short Chat Completions
SSE stream once it has read the whole body:

* ``plugin``: ``ModelClient.stream`` -> grpclib -> ``ModelServer`` (decode, validation) ->
  ``OpenAIProvider`` (translation to the vendor body) -> httpx -> stub; time until the client
  holds the first StreamEvent.
* ``direct``: the equivalent OpenAI body (built once, outside the timing, as a kernel talking to
  the vendor would have it) POSTed with httpx to the same stub; time until the first SSE event
  is parsed.
* ``plugin, upb kernel`` (the ``upb kernel`` rows): the plugin path again, from a kernel that
  holds its request as protobuf's compiled (upb) message, built outside the timing as a Go
  kernel holds its structs, and serializes it in C inside the timing; the rest of its client is
  ModelClient's (grpclib, the same connection). The difference from the ``plugin`` rows is what
  the pure-Python encode of ``ModelClient`` costs a turn; the target applies to the ``plugin``
  rows.

The stub and the server each run in their own process (spawned; the server's set up as
``protocol-py serve`` sets up its own: ``configure_serve_process``); the client runs here.
Overhead = plugin - direct, per size, as the median of ``--repeat`` runs of ``--samples``
turns each (the median of each run's samples; warm-up turns are discarded). Also printed: how
the overhead grows per message (it must be no worse than linear: the 600-message overhead at
most 10x the 60-message one plus the fixed part). Then, unless ``--no-profile``, the per-stage
profile of the largest size (``turn_stages.py``) and its warm and cold timeline across the
three processes (``turn_timeline.py``: where each millisecond of a plugin turn goes).

Usage: ``.venv/bin/python benchmarks/turn_latency.py [--sizes 60,300,600] [--samples 15]
[--repeat 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import statistics
import sys
import time
from typing import Any, Final

import httpx
from grpclib.const import Cardinality
from server import start

from protocol_py.client.client import ModelClient
from protocol_py.client.message_reader import MessageReader
from protocol_py.codec import wire
from protocol_py.codec.structs import to_struct
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.http.sse import SSEParser
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.server import ModelServer
from protocol_py.server.grpc_layer.limits import strict_request_classes
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py.server.serve import configure_serve_process
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import (
    GenerationParams,
    StreamCompletionRequest,
    StreamEvent,
    ToolDeclaration,
)

MODEL = "gpt-6-sol"
WARM_TARGET: Final = 3.0
"""Most time-to-first-event through the plugin on a warm 601-message turn, as a multiple of the
direct POST's in the same run."""

COLD_TARGET: Final = 5.0
"""The same bound on a cold turn (every message id new)."""

TOOL_RESULT_BYTES = 3500
"""Size of each tool result's text, bytes (ASCII)."""


def _ulid(i: int, epoch: int = 0) -> str:
    return f"01JDQ{epoch:04d}{i:017d}"


def conversation(messages: int, epoch: int = 0, turn: int = 1) -> StreamCompletionRequest:
    """A first user message plus ``messages`` more: (assistant text + tool call, tool result)
    pairs, each tool result :data:`TOOL_RESULT_BYTES` of text.

    ``epoch`` numbers the message ids (a different epoch: every message id new, the content
    the same, as after a kernel restart or a compaction); ``turn`` numbers the turn id."""
    line = "drwxr-xr-x  4 agent agent  4096 Nov 29 10:14 src/protocol_py/providers/module.py\n"
    result = (line * (TOOL_RESULT_BYTES // len(line) + 1))[:TOOL_RESULT_BYTES]
    history = [
        Message(
            role=Role.USER,
            id=_ulid(0, epoch),
            content=[ContentBlock(text=TextBlock(text="List the repository and fix the bug."))],
        )
    ]
    for i in range(1, messages + 1):
        if i % 2:
            history.append(
                Message(
                    role=Role.ASSISTANT,
                    id=_ulid(i, epoch),
                    produced_by_model_id=MODEL,
                    produced_by_provider="openai",
                    content=[
                        ContentBlock(text=TextBlock(text=f"Step {i}: I will list the next path.")),
                        ContentBlock(
                            tool_use=ToolUseBlock(
                                id=f"call_{i:05d}",
                                name="shell",
                                input=to_struct({"command": f"ls -la src/{i}", "timeout": 30}),
                            )
                        ),
                    ],
                )
            )
        else:
            history.append(
                Message(
                    role=Role.USER,
                    id=_ulid(i, epoch),
                    content=[
                        ContentBlock(
                            tool_result=ToolResultBlock(
                                tool_use_id=f"call_{i - 1:05d}",
                                content=[ContentBlock(text=TextBlock(text=f"{i}:{result}"))],
                            )
                        )
                    ],
                )
            )
    schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Shell command."},
            "timeout": {"type": "integer"},
        },
        "required": ["command"],
    }
    return StreamCompletionRequest(
        model_id=MODEL,
        messages=history,
        tools=[
            ToolDeclaration(
                name="shell", description="Run a command.", input_schema=to_struct(schema)
            )
        ],
        params=GenerationParams(max_output_tokens=1024),
        call_context=CallContext(session_id="bench", turn_id=f"t{turn}"),
        kernel_protocol_version=PROTOCOL_VERSION,  # as a Conversation builds it
    )


def sse_reply() -> bytes:
    """A short Chat Completions stream: role chunk, one content chunk, finish, usage, [DONE]."""
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": MODEL}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "Done."}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}},
    ]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n"


def _serve_stub(port_queue: Any) -> None:
    """Stub upstream: reads the whole request body, then answers with :func:`sse_reply`."""
    reply = sse_reply()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    + f"content-length: {len(reply)}\r\n\r\n".encode()
                    + reply
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


def _serve_plugin(port_queue: Any, stub_url: str) -> None:
    """The plugin: a ModelServer of the OpenAI-compatible provider, in a process set up as
    ``protocol-py serve`` sets up its own (``configure_serve_process``)."""
    configure_serve_process()
    logging.disable(logging.INFO)  # the per-RPC log line

    async def main() -> None:
        server = ModelServer(OpenAIProvider(api_key="bench", base_url=stub_url))
        port_queue.put(await server.start("127.0.0.1", 0))
        await asyncio.Event().wait()

    asyncio.run(main())


async def direct_first_event(client: httpx.AsyncClient, url: str, body: bytes) -> float:
    """Seconds from POST to the first parsed SSE event; the rest of the stream is drained."""
    started = time.perf_counter()
    first = 0.0
    parser = SSEParser()
    async with client.stream(
        "POST", url, content=body, headers={"content-type": "application/json"}
    ) as response:
        async for data in response.aiter_bytes():
            if first == 0.0 and parser.feed(data):
                first = time.perf_counter() - started
    return first


async def plugin_first_event(client: ModelClient, request: StreamCompletionRequest) -> float:
    """Seconds from the call to the first StreamEvent; the rest of the stream is drained."""
    started = time.perf_counter()
    first = 0.0
    async for event in client.stream(request, timeout=60):
        if first == 0.0:
            first = time.perf_counter() - started
        if event.error is not None:
            raise RuntimeError(f"plugin path failed: {event.error.message}")
    return first


async def upb_kernel_first_event(client: ModelClient, request: Any) -> float:
    """Seconds from the call to the first StreamEvent for ``request``, a protobuf (upb)
    StreamCompletionRequest serialized in the timing by upb (grpclib's protobuf codec), on
    ``client``'s connection; the events are read as ``ModelClient.stream`` reads them."""
    started = time.perf_counter()
    first = 0.0
    async with client.stub.channel.request(
        "/model.v1.ModelService/StreamCompletion",
        Cardinality.UNARY_STREAM,
        type(request),
        StreamEvent,
        timeout=60,
    ) as call:
        await call.send_message(request, end=True)
        reader = MessageReader(call)
        while events := await reader.batch():
            for event in events:
                if first == 0.0:
                    first = time.perf_counter() - started
                if event.error is not None:
                    raise RuntimeError(f"plugin path failed: {event.error.message}")
    return first


_EPOCHS = itertools.count(1)
"""Message-id epochs for cold turns: unique within the process, so no server cache keyed by
message id ever sees an id twice."""


async def measure(
    plugin_port: int, stub_url: str, size: int, samples: int, cold: bool, *, upb: Any = None
) -> tuple[float, float, int, int]:
    """One run at ``size`` messages: (plugin median s, direct median s, request bytes, body
    bytes); the two paths alternate turn by turn.

    Warm: every turn resends the same messages with a new turn id. Cold (``cold``): every turn's
    messages carry ids never sent before (same content). Each turn's request is built before
    its timing starts, as a new object, as a kernel builds it: a ``StreamCompletionRequest``
    sent by ``ModelClient.stream``, or, with ``upb`` (protobuf's class of the same message), a
    upb message sent by :func:`upb_kernel_first_event`."""
    provider = OpenAIProvider(api_key="bench", base_url=stub_url)
    spec = provider.spec_for(MODEL)
    assert spec is not None
    body = dump_body(provider.build_body(conversation(size), spec))
    client = ModelClient.connect(f"127.0.0.1:{plugin_port}")
    plugin: list[float] = []
    direct: list[float] = []
    request_bytes = 0
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            url = f"{stub_url}/chat/completions"
            for i in range(samples + 3):
                request = conversation(size, next(_EPOCHS) if cold else 0, turn=i)
                data = wire.encode(request) if upb is not None or not request_bytes else b""
                if not request_bytes:  # the first turn's (turn ids grow by a digit at t10)
                    request_bytes = len(data)
                if upb is not None:
                    p = await upb_kernel_first_event(client, upb.FromString(data))
                else:
                    p = await plugin_first_event(client, request)
                d = await direct_first_event(http, url, body)
                if i >= 3:
                    plugin.append(p)
                    direct.append(d)
    finally:
        client.close()
    return statistics.median(plugin), statistics.median(direct), request_bytes, len(body)


def load() -> str:
    """The machine's 1-minute load average and core count, for printing beside the figures."""
    return f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


NOISY_WARNING: Final = (
    "warning: the overhead does not grow with the message count (negative growth): the sample "
    "is noisy (machine load); rerun for figures (more --samples / --repeat, a quieter moment)"
)
"""Printed when the medians of the overhead do not increase with the size."""


def not_increasing(overheads: dict[int, float], sizes: list[int]) -> bool:
    """True when the overhead (ms) of a larger size is below that of a smaller one: a turn's
    work grows with its messages, so such medians were measured under varying load."""
    ordered = [overheads[size] for size in sorted(sizes)]
    return any(later < earlier for earlier, later in itertools.pairwise(ordered))


def _rows(
    label: str,
    plugin_port: int,
    stub_url: str,
    sizes: list[int],
    args: argparse.Namespace,
    *,
    cold: bool,
    upb: Any,
) -> dict[tuple[str, int], float]:
    """Measure and print one block of rows (a header, one row per size, the growth line);
    return each size's ratio under ``(label, size)`` (the rows show the label's first word,
    ``warm`` or ``cold``)."""
    mode = label.split(maxsplit=1)[0]
    print(
        f"{mode:>5}{'messages':>9}{'request':>11}{'vendor body':>13}{'direct ms':>11}"
        f"{'plugin ms':>11}{'overhead ms':>13}{'ratio':>8}  load"
    )
    ratios: dict[tuple[str, int], float] = {}
    overheads: dict[int, float] = {}
    for size in sizes:
        runs = [
            asyncio.run(measure(plugin_port, stub_url, size, args.samples, cold, upb=upb))
            for _ in range(args.repeat)
        ]
        plugin = statistics.median(r[0] for r in runs) * 1e3
        direct = statistics.median(r[1] for r in runs) * 1e3
        overheads[size] = statistics.median((r[0] - r[1]) * 1e3 for r in runs)
        ratios[label, size] = statistics.median(r[0] / r[1] for r in runs)
        print(
            f"{mode:>5}{size + 1:>9}{runs[0][2]:>11,}{runs[0][3]:>13,}{direct:>11.2f}"
            f"{plugin:>11.2f}{overheads[size]:>13.2f}{ratios[label, size]:>7.2f}x"
            f"  {os.getloadavg()[0]:.2f}"
        )
    if len(sizes) >= 2:
        lo, hi = min(sizes), max(sizes)
        per_message = (overheads[hi] - overheads[lo]) / (hi - lo)
        print(
            f"{label} overhead growth {lo + 1}->{hi + 1} messages: "
            f"{per_message * 1e3:.1f} us/message; ratio {overheads[hi] / overheads[lo]:.2f}"
            f" for {hi / lo:.0f}x the messages"
        )
        if not_increasing(overheads, sizes):
            print(NOISY_WARNING)
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="60,300,600", help="message counts, comma-separated")
    parser.add_argument("--samples", type=int, default=15, help="turns per run and path")
    parser.add_argument("--repeat", type=int, default=5, help="runs per size (median)")
    parser.add_argument(
        "--no-profile", action="store_true", help="skip the per-stage profile of the largest size"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    stub, stub_port = start(_serve_stub)
    stub_url = f"http://127.0.0.1:{stub_port}"
    plugin_proc, plugin_port = start(_serve_plugin, stub_url)
    upb = strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]
    ratios: dict[tuple[str, int], float] = {}
    try:
        print(
            f"python {sys.version.split()[0]}; median of {args.repeat} runs x {args.samples}; "
            f"{load()} at start"
        )
        for kernel in ("", " upb kernel"):
            if kernel:
                print(
                    "upb kernel: the same turns from a kernel that serializes its request "
                    "with upb (protobuf's C library) in the timing:"
                )
            for mode in ("warm", "cold"):
                label = mode + kernel
                upb_class = upb if kernel else None
                cold = mode == "cold"
                ratios.update(
                    _rows(label, plugin_port, stub_url, sizes, args, cold=cold, upb=upb_class)
                )
    finally:
        for proc in (plugin_proc, stub):
            proc.terminate()
            proc.join(5)
    hi = max(sizes)
    print(
        f"at {hi + 1} messages: warm {ratios['warm', hi]:.2f}x (target <= {WARM_TARGET:g}x), "
        f"cold {ratios['cold', hi]:.2f}x (target <= {COLD_TARGET:g}x) the direct POST; "
        f"upb kernel: warm {ratios['warm upb kernel', hi]:.2f}x, "
        f"cold {ratios['cold upb kernel', hi]:.2f}x; {load()}"
    )
    if not args.no_profile:
        from turn_stages import print_profile  # noqa: PLC0415 (turn_stages imports this module)

        print_profile(hi, turns=max(3, args.samples // 2), repeat=args.repeat)
        from turn_timeline import print_timeline  # noqa: PLC0415 (it imports this module)

        print_timeline(hi, turns=max(3, args.samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
