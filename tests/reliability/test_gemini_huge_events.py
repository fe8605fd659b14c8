"""A Gemini upstream that sends one huge event neither stalls the server nor breaks its streams.

A loopback Gemini stub (``tests/providers/gemini/_gemini.py``) answers ``serve --provider
gemini`` (in-process, over gRPC) with

* one SSE event of 100,000 ``functionCall`` parts (about 4 MiB): past
  ``MAX_PARTS_PER_EVENT``, it ends the stream with one TRANSIENT error naming the bound;
* one event of 1,000 calls with 4 KiB of arguments each (4 MiB, inside every bound): it is
  translated in a worker thread (providers/http/base.py, point 8) and every call arrives;
* a 15 MiB ``thoughtSignature`` on a function-call, thought or text part: past
  ``MAX_SIGNATURE_BYTES`` (the VendorData value limit), it ends the stream with one TRANSIENT
  error naming the bound instead of a broken event order.

While each answer is read, a Describe loop measures how long the server takes to answer
(before the offload, a concurrent Describe waited 9.6 s on the 100,000-call event); the bound
is generous (a loaded 2-core machine) and far below that. Afterwards Describe is answered and a
normal completion succeeds: the server still serves.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.gemini.provider import GeminiProvider
from protocol_py.providers.gemini.stream import MAX_PARTS_PER_EVENT, MAX_SIGNATURE_BYTES
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py_gen.model.v1 import ErrorKind, StopReason

from ..providers.gemini._gemini import GeminiStub, completion, response_object, stream_reply
from ..support.adapters import served_client

KEY = "AIzaSy-huge-event-key-0001"
MODEL = "gemini-2.5-flash"
DESCRIBE_BOUND_S = 3.0
"""Longest a Describe may wait while one huge event is translated, seconds (the loop-held
translation took 9.6 s; a worker-thread translation leaves the loop free within a few thread
switch intervals, plus a loaded machine's margin)."""

USAGE = {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}
NORMAL = [
    {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "fine"}]}, "finishReason": "STOP"}
        ],
        "responseId": "r-ok",
        "usageMetadata": USAGE,
    }
]


def _event(parts: list[dict[str, Any]], finish: str | None = "STOP") -> dict[str, Any]:
    return response_object(parts, finish, usage=USAGE, response_id="r-huge")


async def _describe_latencies(client: ModelClient, stop: asyncio.Event) -> list[float]:
    waits: list[float] = []
    while not stop.is_set():
        started = time.monotonic()
        await client.describe(timeout=60)
        waits.append(time.monotonic() - started)
        await asyncio.sleep(0.02)
    return waits


async def _run(objects: list[dict[str, Any]]) -> tuple[Any, list[float], str]:
    """Complete once against ``objects`` while Describe is probed; then a normal completion.
    Returns the huge answer's accumulated response, the Describe waits and the normal text."""
    async with GeminiStub() as stub:
        stub.queue(stream_reply(*objects), stream_reply(*NORMAL))
        provider = GeminiProvider(api_key=KEY, base_url=stub.url, retry=RetryPolicy(max_attempts=1))
        async for client in served_client(provider):
            await client.describe(timeout=30)  # connected and warm before the probe starts
            stop = asyncio.Event()
            probe = asyncio.create_task(_describe_latencies(client, stop))
            try:
                done = await client.complete(completion(MODEL), timeout=120)
            finally:
                stop.set()
            waits = await probe
            assert (await client.describe(timeout=30)).name  # still serving
            after = await client.complete(completion(MODEL), timeout=60)
        await provider.aclose()
    text = "".join(b.text.text for b in after.message.content if b.text is not None)
    return done, waits, text


async def test_an_event_of_100000_function_calls_ends_classified_without_stalling() -> None:
    parts = [{"functionCall": {"name": "f", "args": {"i": i}}} for i in range(100_000)]
    done, waits, after = await _run([_event(parts)])
    assert done.error is not None and done.stop is None
    assert (done.error.kind, done.error.retryable) == (ErrorKind.TRANSIENT, True)
    assert done.error.message == (
        f"upstream sent 100000 parts in one response object, above the limit of "
        f"{MAX_PARTS_PER_EVENT} (MAX_PARTS_PER_EVENT)"
    )
    assert done.usage is not None and done.usage.output_tokens == 1  # the event's usage kept
    assert waits and max(waits) < DESCRIBE_BOUND_S, waits
    assert after == "fine"


async def test_an_event_of_1000_large_calls_is_translated_off_the_loop_whole() -> None:
    blob = "x" * 4096
    parts = [{"functionCall": {"name": "f", "args": {"i": i, "blob": blob}}} for i in range(1000)]
    done, waits, after = await _run([_event(parts)])
    assert done.error is None and done.stop is not None
    assert done.stop.reason == StopReason.TOOL_USE
    calls = [b.tool_use for b in done.message.content if b.tool_use is not None]
    assert len(calls) == 1000 and len({c.id for c in calls}) == 1000
    assert calls[999].input is not None and calls[999].input.to_dict() == {"i": 999, "blob": blob}
    assert waits and max(waits) < DESCRIBE_BOUND_S, waits
    assert after == "fine"


@pytest.mark.parametrize(
    "part",
    [
        {"functionCall": {"name": "f", "args": {}}},
        {"text": "why", "thought": True},
        {"text": ""},
    ],
    ids=["function_call", "thought", "text"],
)
async def test_a_15_mib_thought_signature_ends_classified_naming_the_bound(
    part: dict[str, Any],
) -> None:
    signature = "A" * (15 * 1024 * 1024)
    head = _event([{"text": "before"}], finish=None)
    done, waits, after = await _run([head, _event([{**part, "thoughtSignature": signature}])])
    assert done.error is not None and done.stop is None
    assert (done.error.kind, done.error.retryable) == (ErrorKind.TRANSIENT, True)
    assert done.error.message == (
        f"upstream sent a thoughtSignature of {len(signature)} bytes, above the limit of "
        f"{MAX_SIGNATURE_BYTES} bytes a signature can travel back in (MAX_SIGNATURE_BYTES, "
        "the VendorData value limit)"
    )
    assert "AAAA" not in done.error.message  # the signature itself is never echoed
    assert [b.text.text for b in done.message.content if b.text is not None] == ["before"]
    assert done.usage is not None and done.usage.output_tokens == 1  # reported usage kept
    assert waits and max(waits) < DESCRIBE_BOUND_S, waits
    assert after == "fine"
