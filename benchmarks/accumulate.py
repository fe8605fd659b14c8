"""Benchmark: folding text-delta streams of 10,000 and 100,000 events.

Usage: ``.venv/bin/python benchmarks/accumulate.py [REPEATS] [SIZES...]`` (default REPEATS = 5,
sizes 10000 100000).

For each size prints the median wall time of :func:`protocol_py.rules.accumulate.accumulate` (order
check + fold + building the Message) and of the bare order checker, each as a ratio against a
bare ``"".join`` of the same text measured in the same run, and the time per delta, whose
stability across sizes shows the growth is linear.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py_gen.model.v1 import Stop, StopReason, StreamEvent, TextDelta, Usage


def timed(fn: Callable[[], object], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    sizes = [int(a) for a in sys.argv[2:]] or [10_000, 100_000]
    print(f"accumulate benchmark: text-delta streams, median of {repeats} runs")
    per_delta: list[float] = []
    for n in sizes:
        pieces = [f"tok{i} " for i in range(n)]
        events = [StreamEvent(text_delta=TextDelta(text=p)) for p in pieces]
        events.append(StreamEvent(usage=Usage(input_tokens=10, output_tokens=n)))
        events.append(StreamEvent(stop=Stop(reason=StopReason.END_TURN)))

        def check(evts: list[StreamEvent] = events) -> None:
            checker = StreamOrderChecker()
            for event in evts:
                checker.check(event)

        base = timed(partial("".join, pieces), repeats)
        chk = timed(check, repeats)
        full = timed(partial(accumulate, events), repeats)
        per_delta.append(full / n)
        print(f"  {n:>9,} deltas")
        for label, secs in (('bare "".join', base), ("order check", chk), ("accumulate", full)):
            ms, ns = secs * 1e3, secs / n * 1e9
            print(f"    {label:<14} {ms:9.2f} ms {ns:8.0f} ns/delta {secs / base:7.1f}x")
    if len(per_delta) > 1:
        growth = per_delta[-1] / per_delta[0]
        print(
            f"  accumulate ns/delta at {sizes[-1]:,} vs {sizes[0]:,}: {growth:.2f}x (1.0 = linear)"
        )


if __name__ == "__main__":
    main()
