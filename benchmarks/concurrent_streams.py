"""Many concurrent small StreamCompletions on one connection against ``protocol-py serve``,
with a Describe every 100 ms from another process and connection.

A ``protocol-py serve`` subprocess (reference provider) gets ``--streams`` concurrent small
StreamCompletions on one grpcio channel from an attacker subprocess, ``--waves`` times in a
row, while this process calls Describe every 100 ms on its own channel. Printed per run and as
medians of ``--runs``: the worst Describe gap beyond the 100 ms period (target <= 100 ms,
docs/performance.md), the slowest Describe, and how many streams ended with their stop event.

Usage: ``.venv/bin/python benchmarks/concurrent_streams.py [--streams 100] [--waves 5] [--runs 3]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import threading
import time
from typing import Any

import grpc  # type: ignore[import-untyped]
from _harness import print_runs, spawn_serve, user_request

from protocol_py_gen.model.v1 import StreamEvent

STREAM = "/model.v1.ModelService/StreamCompletion"
DESCRIBE = "/model.v1.ModelService/Describe"
PROBE_PERIOD_S = 0.1
"""Pause between two Describe calls of the prober, seconds."""
CALL_TIMEOUT_S = 60.0
"""Deadline of each call, seconds."""


def attacker(port: int, streams: int, waves: int, out: Any) -> None:
    """The second process: ``waves`` times ``streams`` concurrent calls on one channel; sends
    the number that ended with a stop event."""
    body = bytes(user_request("reference-large", "hello there, tell me a short story"))
    stopped = 0
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_stream(STREAM)
        for _ in range(waves):
            replies = [call(body, timeout=CALL_TIMEOUT_S) for _ in range(streams)]
            for reply in replies:
                events = [StreamEvent.parse(raw) for raw in reply]
                stopped += bool(events) and events[-1].stop is not None
    out.send(json.dumps(stopped))


def measure(streams: int, waves: int) -> dict[str, Any]:
    server, port = spawn_serve("--log-level", "WARNING")
    try:
        address = f"127.0.0.1:{port}"
        with grpc.insecure_channel(address) as channel:
            channel.unary_unary(DESCRIBE)(b"", timeout=10)
        worst_gap = [0.0]
        worst_call = [0.0]
        done = threading.Event()

        def probe() -> None:
            with grpc.insecure_channel(address) as channel:
                describe = channel.unary_unary(DESCRIBE)
                last = time.monotonic()
                while not done.is_set():
                    started = time.monotonic()
                    describe(b"", timeout=30)
                    now = time.monotonic()
                    worst_call[0] = max(worst_call[0], now - started)
                    worst_gap[0] = max(worst_gap[0], now - last - PROBE_PERIOD_S)
                    last = now
                    time.sleep(PROBE_PERIOD_S)

        prober = threading.Thread(target=probe)
        prober.start()
        time.sleep(0.5)  # a quiet period first
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        child = multiprocessing.get_context("spawn").Process(  # no fork beside grpc threads
            target=attacker, args=(port, streams, waves, theirs)
        )
        child.start()
        stopped = json.loads(ours.recv())
        child.join()
        time.sleep(0.5)
        done.set()
        prober.join()
        return {
            "gap_ms": worst_gap[0] * 1000,
            "describe_worst_ms": worst_call[0] * 1000,
            "stopped": stopped,
            "load": os.getloadavg()[0],
        }
    finally:
        server.terminate()
        server.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = print_runs(
        args.runs,
        lambda: measure(args.streams, args.waves),
        lambda run: (
            f"Describe gap beyond {PROBE_PERIOD_S * 1000:.0f} ms: {run['gap_ms']:.1f} ms, "
            f"slowest Describe {run['describe_worst_ms']:.1f} ms, "
            f"{run['stopped']}/{args.streams * args.waves} stopped, load {run['load']:.2f}"
        ),
    )
    print(
        f"median of {args.runs} ({args.waves} x {args.streams} streams): Describe gap "
        f"{statistics.median(r['gap_ms'] for r in runs):.1f} ms (target <= 100 ms), slowest "
        f"Describe {statistics.median(r['describe_worst_ms'] for r in runs):.1f} ms"
    )


if __name__ == "__main__":
    main()
