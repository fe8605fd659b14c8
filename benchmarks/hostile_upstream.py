"""Benchmark: memory a hostile upstream can make a vendor adapter take: decompression bombs and
retired HTTP clients.

Usage: ``.venv/bin/python benchmarks/hostile_upstream.py [REPEATS] [BOMB_MIB] [CYCLES]`` (default 3,
128 and 100).

With the upstream answered in process (:class:`httpx.MockTransport`) it prints, as medians of
REPEATS runs:

* the peak traced memory (:mod:`tracemalloc`, MiB) of one OpenAI-adapter stream answered with an
  HTTP 500 whose gzip body expands to BOMB_MIB MiB, and with a 200 ``text/event-stream`` gzip
  bomb of the same size, each as a ratio against the bomb's decoded size;
* the traced memory kept per Configure(new base_url)+stream cycle over CYCLES cycles (KiB),
  and how many retired HTTP clients are still open at the end.

Run it with ``PYTHONPATH=<an older src>`` to compare with an earlier version (the numbers in
docs/adapters.md were taken that way).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tracemalloc
import zlib
from typing import Any

import httpx

from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

MIB = 1024 * 1024
MODEL = "gpt-6-sol"
REQUEST = StreamCompletionRequest(
    model_id=MODEL,
    messages=[Message(role=Role.USER, id="u1", content=[ContentBlock(text=TextBlock(text="hi"))])],
)
OK_BODY = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"fine"}}]}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def gzip_zeros(mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    return b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()


def answering(status: int, headers: dict[str, str], body: bytes) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        # stream=: the body is not read (and decoded) when the response is made
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))

    return httpx.MockTransport(handle)


async def bomb_peak(bomb: bytes, status: int) -> float:
    """Peak traced memory (MiB) of one stream answered with ``bomb``."""
    ctype = "text/event-stream" if status == 200 else "application/json"
    provider = OpenAIProvider(
        api_key="sk-bench-0000000000",
        base_url="http://upstream.invalid/v1",
        retry=RetryPolicy(max_attempts=1),
        transport=answering(status, {"content-encoding": "gzip", "content-type": ctype}, bomb),
    )
    tracemalloc.start()
    try:
        _ = [e async for e in provider.stream(REQUEST, CallContext())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await provider.aclose()
    return peak / MIB


async def _answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A loopback upstream: read one request, answer OK_BODY, close."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    await reader.readexactly(length)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + OK_BODY
    )
    await writer.drain()
    writer.close()


async def configure_cycles(cycles: int) -> tuple[float, int]:
    """Traced memory kept per Configure+stream cycle (KiB) and the retired clients left open, with
    httpx's real transport (each client holds its own connection pool and TLS context)."""
    server = await asyncio.start_server(_answer_ok, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    provider = OpenAIProvider(api_key="sk-bench-0000000000", base_url=url)
    tracemalloc.start()
    start = 0
    for i in range(cycles + 10):
        if i == 10:
            start = tracemalloc.get_traced_memory()[0]  # after warm-up
        _ = [e async for e in provider.stream(REQUEST, CallContext())]
        await provider.configure({"base_url": f"{url}/v{i}"})
    grown = (tracemalloc.get_traced_memory()[0] - start) / 1024 / cycles
    tracemalloc.stop()
    held: Any = getattr(provider, "_clients", None)
    left = len(held.retired) if held is not None else len(getattr(provider, "_retired", []))
    await provider.aclose()
    server.close()
    await server.wait_closed()
    return grown, left


async def main(repeats: int, bomb_mib: int, cycles: int) -> None:
    bomb = gzip_zeros(bomb_mib)
    for status in (500, 200):
        peaks = [await bomb_peak(bomb, status) for _ in range(repeats)]
        peak = statistics.median(peaks)
        print(
            f"HTTP {status} gzip bomb of {bomb_mib} MiB: peak traced {peak:.1f} MiB "
            f"(ratio to the bomb {peak / bomb_mib:.3f}; median of {repeats})"
        )
    runs = [await configure_cycles(cycles) for _ in range(repeats)]
    grown = statistics.median(r[0] for r in runs)
    print(
        f"Configure+stream: traced memory +{grown:.1f} KiB kept per cycle over {cycles} cycles "
        f"(median of {repeats}); retired clients left open: {runs[-1][1]}"
    )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    asyncio.run(main(*(args + [3, 128, 100][len(args) :])))
