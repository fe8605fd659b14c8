"""Many concurrent heavy StreamCompletions against ``protocol-py serve``, from a second process.

A ``protocol-py serve`` subprocess (reference provider, ``--memory-budget``) gets ``--calls``
concurrent StreamCompletions of a near-limit body (a million one-letter messages, about
5.2 MiB on the wire) from an attacker subprocess (grpcio, one channel per call), while this
process samples the server's RSS every 50 ms and calls Describe every 100 ms on its own
channel. Printed per run and as medians of ``--runs``: the slowest Describe, the peak RSS over
the baseline, the outcomes, and the time each call took to its outcome as its client saw it
(the slowest refusal: docs/decisions.md#d32 bounds a call's wait for room to 2 s; the rest is
sending its body while 31 others send theirs).

Usage: ``.venv/bin/python benchmarks/heavy_calls.py [--budget 1GiB] [--calls 32] [--runs 3]``
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
from _harness import print_runs

from protocol_py_gen.model.v1 import StreamEvent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
_SHAPES: Any = importlib.import_module("tests.reliability.test_memory_budget_rss")
_SERVERS: Any = importlib.import_module("tests.support.servers")
_PROC: Any = importlib.import_module("tests.support.proc")

MIB = 1024 * 1024
PROBE_PAUSE_S = 0.1
"""Pause between two Describe calls of the prober, seconds."""


def attacker(address: str, calls: int, out: Any) -> None:
    """The second process: ``calls`` concurrent StreamCompletions; sends (outcome, seconds)."""
    body = _SHAPES.near_limit_body()
    results: list[tuple[str, float]] = []
    options = [("grpc.max_send_message_length", 64 * MIB)]

    def call() -> None:
        with grpc.insecure_channel(address, options=options) as channel:
            started = time.monotonic()
            try:
                replies = list(channel.unary_stream(_SHAPES.STREAM)(body, timeout=120))
                last = StreamEvent.parse(replies[-1]) if replies else None
                if last is None:
                    code = "EMPTY"
                elif last.error is not None:
                    code = last.error.kind.name
                else:
                    code = "STOP" if last.stop is not None else "OTHER"
            except grpc.RpcError as exc:
                code = exc.code().name
            results.append((code, time.monotonic() - started))

    workers = [threading.Thread(target=call) for _ in range(calls)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.send(json.dumps(results))


def measure(budget: str, calls: int) -> dict[str, Any]:
    server = _SERVERS.spawn_server("--memory-budget", budget, "--log-level", "WARNING")
    pid = server.proc.pid
    try:
        with grpc.insecure_channel(server.address) as channel:
            channel.unary_unary(_SHAPES.DESCRIBE)(b"", timeout=10)
        baseline = _PROC.rss_bytes(pid)
        peak = [baseline]
        worst = [0.0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _PROC.rss_bytes(pid))
                time.sleep(0.05)

        def probe() -> None:
            with grpc.insecure_channel(server.address) as channel:
                describe = channel.unary_unary(_SHAPES.DESCRIBE)
                while not done.is_set():
                    started = time.monotonic()
                    describe(b"", timeout=30)
                    worst[0] = max(worst[0], time.monotonic() - started)
                    time.sleep(PROBE_PAUSE_S)

        helpers = [threading.Thread(target=sample), threading.Thread(target=probe)]
        for helper in helpers:
            helper.start()
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        child = multiprocessing.get_context("spawn").Process(  # no fork beside grpc threads
            target=attacker, args=(server.address, calls, theirs)
        )
        child.start()
        results = json.loads(ours.recv())
        child.join()
        time.sleep(1.0)
        done.set()
        for helper in helpers:
            helper.join()
        refused = [t for c, t in results if c != "STOP"]
        return {
            "describe_worst_ms": worst[0] * 1000,
            "peak_over_mib": (peak[0] - baseline) / MIB,
            "outcomes": {c: [r[0] for r in results].count(c) for c in {r[0] for r in results}},
            "slowest_refusal_s": max(refused, default=0.0),
            "slowest_call_s": max(t for _, t in results),
        }
    finally:
        server.proc.terminate()
        server.proc.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="1GiB")
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = print_runs(
        args.runs,
        lambda: measure(args.budget, args.calls),
        lambda run: (
            f"Describe worst {run['describe_worst_ms']:.0f} ms, peak +{run['peak_over_mib']:.0f}"
            f" MiB, {run['outcomes']}, slowest refusal {run['slowest_refusal_s']:.1f} s, "
            f"slowest call {run['slowest_call_s']:.1f} s"
        ),
    )
    med = {
        k: statistics.median(r[k] for r in runs)
        for k in ("describe_worst_ms", "peak_over_mib", "slowest_refusal_s", "slowest_call_s")
    }
    print(
        f"median of {args.runs} ({args.calls} calls, --memory-budget {args.budget}): Describe "
        f"worst {med['describe_worst_ms']:.0f} ms, peak +{med['peak_over_mib']:.0f} MiB, slowest "
        f"refusal {med['slowest_refusal_s']:.1f} s, slowest call {med['slowest_call_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
