"""Peak RSS of a ``protocol-py serve`` subprocess against its ``--memory-budget``, under the two
shapes of ``tests/reliability/test_memory_budget_rss.py``: K concurrent near-limit
StreamCompletions (a million repeated elements each, 5.2 MiB) and 8 concurrent 18.6 MiB
one-block texts, RSS sampled every 50 ms and a Describe every 100 ms from another client.

For each shape and run it prints the baseline, the peak, ``(peak - baseline) / budget``, the RSS
once idle after the calls (from 3 s after them, the test's ``settled_rss``), the outcomes
(STOP, OVERLOADED, ...) and the worst Describe; then the medians over ``--runs``.
``--compare-off N`` also runs N calls of each shape with the budget off
(the same run's reference for what the budget saves; keep N small: a near-limit call costs about
500 MB without a budget).

Usage: ``.venv/bin/python benchmarks/memory_budget.py [--budget 256MiB] [--calls 32] [--runs 3]
[--compare-off 2]``
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]

from protocol_py.server.grpc_layer.memory_budget import parse_memory_budget

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# the test's shapes and sampler, loaded at run time (the suite is not type-checked with this)
_SHAPES: Any = importlib.import_module("tests.reliability.test_memory_budget_rss")
_SERVERS: Any = importlib.import_module("tests.support.servers")
DESCRIBE: str = _SHAPES.DESCRIBE
Run = Any

MIB = 1024 * 1024


def measure(budget: str, body: bytes, calls: int) -> Run:
    server = _SERVERS.spawn_server("--memory-budget", budget, "--log-level", "WARNING")
    try:
        with grpc.insecure_channel(server.address) as channel:
            channel.unary_unary(DESCRIBE)(b"", timeout=10)
        return _SHAPES.storm(server.address, server.proc.pid, body, calls)
    finally:
        server.proc.terminate()
        server.proc.communicate(timeout=30)


def report(label: str, runs: list[Run], budget: int | None) -> None:
    for run in runs:
        ratio = f"{(run.peak - run.baseline) / budget:.2f}" if budget else "n/a"
        outcomes = {c: run.codes.count(c) for c in sorted(set(run.codes))}
        print(
            f"  {label}: baseline {run.baseline / MIB:.0f} MiB, peak {run.peak / MIB:.0f} MiB, "
            f"(peak-baseline)/budget {ratio}, after {run.after / MIB:.0f} MiB, {outcomes}, "
            f"worst Describe {run.describe_worst * 1000:.0f} ms"
        )
    peak = statistics.median((r.peak - r.baseline) / MIB for r in runs)
    after = statistics.median((r.after - r.baseline) / MIB for r in runs)
    describe = statistics.median(r.describe_worst * 1000 for r in runs)
    ratio = f"{peak * MIB / budget:.2f}" if budget else "n/a"
    print(
        f"  {label} median: peak +{peak:.0f} MiB (ratio {ratio}), after +{after:.0f} MiB, "
        f"worst Describe {describe:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="256MiB")
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compare-off", type=int, default=0, metavar="N")
    args = parser.parse_args()
    budget = parse_memory_budget(args.budget) or None
    shapes = {
        "near-limit": (_SHAPES.near_limit_body(), args.calls),
        "large-text": (_SHAPES.large_text_body(), 8),
    }
    for name, (body, calls) in shapes.items():
        print(f"{name}: {calls} x {len(body) / MIB:.1f} MiB, --memory-budget {args.budget}")
        report("budget", [measure(args.budget, body, calls) for _ in range(args.runs)], budget)
        if args.compare_off:
            off = [measure("off", body, args.compare_off) for _ in range(args.runs)]
            report(f"off, {args.compare_off} calls", off, budget)


if __name__ == "__main__":
    main()
