"""Benchmark: the cost of reading upstream chunks through ``cancel_once``.

Every upstream body read of the vendor adapters runs in a child task that is cancelled at most
once (:mod:`protocol_py.providers.http.cancel`), so a repeated cancellation never interrupts
httpcore
while it closes the connection. This prints the median time per read of an async generator
awaited directly (the baseline, same run) and through ``cancel_once``, the added microseconds
per read and the ratio. One read is one network chunk (one or more SSE events), so the figure is
an upper bound per event.

Usage: ``.venv/bin/python benchmarks/upstream_cancel.py [READS] [REPEATS]`` (defaults 50,000 and 5).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from protocol_py.providers.http.cancel import cancel_once


async def _chunks(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await asyncio.sleep(0)  # one event-loop turn, like a socket read that had to wait
        yield i


async def _direct(n: int) -> float:
    it = _chunks(n).__aiter__()
    start = time.perf_counter()
    for _ in range(n):
        await it.__anext__()
    return time.perf_counter() - start


async def _guarded(n: int) -> float:
    it = _chunks(n).__aiter__()
    start = time.perf_counter()
    for _ in range(n):
        await cancel_once(it.__anext__())
    return time.perf_counter() - start


async def _median(run: Callable[[int], Awaitable[float]], n: int, repeats: int) -> float:
    return statistics.median([await run(n) for _ in range(repeats)])


async def main(n: int, repeats: int) -> None:
    direct = await _median(_direct, n, repeats)
    guarded = await _median(_guarded, n, repeats)
    print(f"upstream reads: {n}, median of {repeats} runs")
    print(f"direct __anext__      : {direct / n * 1e6:7.2f} us/read")
    print(f"through cancel_once   : {guarded / n * 1e6:7.2f} us/read")
    print(f"added per read        : {(guarded - direct) / n * 1e6:7.2f} us")
    print(f"ratio guarded/direct  : {guarded / direct:.2f}")


if __name__ == "__main__":
    reads = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    asyncio.run(main(reads, runs))
