"""Probes of the reliability suite: google's upb classes from the committed buf image and a
provider that yields without pausing (the raw HTTP/2 client is tests/support/h2_client.py, the
/proc probes tests/support/proc.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import (
    Stop,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    StreamStart,
    TextDelta,
)

REPO = Path(__file__).resolve().parents[2]


def upb_class(full_name: str) -> Any:
    """google's upb class for ``full_name``, from the committed buf image."""
    return _POOL_CLASSES(full_name)


def _load_pool() -> Any:
    image = descriptor_pb2.FileDescriptorSet.FromString(
        (REPO / "gen" / "descriptor" / "protocol.binpb").read_bytes()
    )
    pool = descriptor_pool.DescriptorPool()
    for file in image.file:
        pool.Add(file)

    def get(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return get


_POOL_CLASSES = _load_pool()


class UnpacedProvider(ReferenceProvider):
    """Yields ``count`` text deltas of ``size`` characters without any await between them (or
    with ``block`` seconds of blocking CPU-like work before each), then stop; records how far it
    got and when it was closed."""

    def __init__(self, count: int = 21_000, size: int = 8, block: float = 0.0) -> None:
        super().__init__()
        self.count = count
        self.size = size
        self.block = block
        self.yielded = 0
        self.yield_times: list[float] = []
        self.stopped_at: float | None = None
        self.stopped = asyncio.Event()
        self.finished = False

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.yielded = 0
        self.yield_times = []
        self.stopped.clear()
        self.finished = False
        text = "x" * self.size
        try:
            yield StreamEvent(stream_start=StreamStart(provider_request_id="req_unpaced"))
            for _ in range(self.count):
                if self.block:
                    time.sleep(self.block)  # noqa: ASYNC251 - CPU work the loop cannot interrupt
                self.yielded += 1
                self.yield_times.append(time.monotonic())
                yield StreamEvent(text_delta=TextDelta(text=text))
            self.finished = True
            yield StreamEvent(stop=Stop(reason=StopReason.END_TURN, model_affirmed=True))
        finally:
            self.stopped_at = time.monotonic()
            self.stopped.set()
