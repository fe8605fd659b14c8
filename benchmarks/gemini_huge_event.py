"""Benchmark: how long one huge Gemini SSE event holds the event loop.

Usage: ``.venv/bin/python benchmarks/gemini_huge_event.py [REPEATS]`` (default 5).

The ``gemini`` provider streams one answer from an in-process upstream
(:class:`httpx.MockTransport`) while a ticker task sleeps 5 ms at a time and records the longest
gap between its wake-ups (the loop stall). Two answers:

* one event of 100,000 ``functionCall`` parts (about 4 MiB; past ``MAX_PARTS_PER_EVENT``, so
  it ends with a TRANSIENT error once decoded);
* one event of 1,000 calls with 4 KiB of arguments each (4 MiB, inside every bound).

Each is run with the huge-event offload of ``providers/http/base.py`` (events of 64 KiB or more
decoded and translated in a worker thread) and, as the baseline of the same run, with it turned
off (translated on the loop). It prints the median longest stall of REPEATS runs, milliseconds,
and the ratio offload / baseline. Absolute times move with the machine's load; the ratio is the
figure to compare. What stays with the offload is mostly one C call that no thread switch can
interrupt (``json.loads`` of the whole event, in the worker, holding the interpreter), and
here, with no gRPC peer to wait for, handing the 3,000 events of the second answer on.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

from protocol_py.providers.gemini.provider import GeminiProvider
from protocol_py.providers.http import base
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.server import offload
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

MODEL = "gemini-2.5-flash"
REQUEST = StreamCompletionRequest(
    model_id=MODEL,
    messages=[Message(role=Role.USER, id="u1", content=[ContentBlock(text=TextBlock(text="hi"))])],
)
TICK_S = 0.005


def _body(parts: list[dict[str, Any]]) -> bytes:
    event = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
        "responseId": "r",
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
    }
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\r\n\r\n"


CASES = {
    "100,000 calls (refused)": _body(
        [{"functionCall": {"name": "f", "args": {"i": i}}} for i in range(100_000)]
    ),
    "1,000 calls x 4 KiB": _body(
        [{"functionCall": {"name": "f", "args": {"i": i, "blob": "x" * 4096}}} for i in range(1000)]
    ),
}


async def _longest_stall(body: bytes) -> float:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    provider = GeminiProvider(
        api_key="AIzaSy-bench-0001",
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(max_attempts=1),
    )
    done = asyncio.Event()
    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            longest = max(longest, now - last - TICK_S)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(TICK_S * 2)
    try:
        async for _ in provider.stream(REQUEST, CallContext()):
            pass
    finally:
        done.set()
        await task
        await provider.aclose()
    return longest


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    offload_at = offload.OFFLOAD_MIN_BYTES
    print(f"longest event-loop stall, median of {repeats} runs (ms)")
    for name, body in CASES.items():
        figures: dict[str, float] = {}
        for label, threshold in (("offload", offload_at), ("baseline", 1 << 40)):
            base.OFFLOAD_MIN_BYTES = threshold  # type: ignore[attr-defined]
            runs = [asyncio.run(_longest_stall(body)) for _ in range(repeats)]
            figures[label] = statistics.median(runs) * 1000
        base.OFFLOAD_MIN_BYTES = offload_at  # type: ignore[attr-defined]
        ratio = figures["offload"] / figures["baseline"] if figures["baseline"] else float("nan")
        print(
            f"{name:<26} offload {figures['offload']:8.1f}  on the loop {figures['baseline']:8.1f}"
            f"  ratio {ratio:.2f}"
        )


if __name__ == "__main__":
    main()
