"""RSS of a ``protocol-py serve`` subprocess before, at its peak during and after large calls: how
much of the memory large calls took the process keeps once they end.

Two modes:

* ``--flood SHAPES`` (comma-separated, or ``all``), each on a fresh server per run with
  ``--budget`` (``default``: no ``--memory-budget`` flag): ``near-limit``: 32 concurrent
  StreamCompletions just under the decoder's element bound (5.2 MiB, a million repeated
  elements each); ``large-text``: 8 concurrent 18.6 MiB one-block texts (both from
  ``tests/reliability/test_memory_budget_rss.py``, a Describe every 100 ms beside them);
  ``singles``: one after another a Configure of 1,000,000 keys, a StreamCompletion whose
  ``provider_options`` has just under a million entries, one holding a 60 MiB text block and a
  Render whose reply is 60 MiB (``benchmarks/loop_stall.py``'s ``config1m``, ``options1m``,
  ``60mib``, ``render60mib``). RSS (from /proc, sampled every 50 ms) is read after a warm-up
  call (baseline), at its highest during the calls (peak) and once idle, from 3 s after the last
  call ended (after: ``settled_rss`` of the test, not going down for 2 s); the medians of
  ``--runs`` runs are printed with the load average.
* otherwise, ``--calls`` sequential calls of a conversation of ``--messages`` messages (about
  1.5 MiB for 20,000) through google's grpcio client; baseline, peak and final as above.

Set ``PYTHONMALLOC=malloc`` in the environment to see the share of pymalloc's arenas (1 MiB
each, kept while any small object in them lives).

Usage: ``.venv/bin/python benchmarks/rss_creep.py [--flood all] [--budget 1GiB] [--runs 3]``
or ``[--calls 10] [--messages 20000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
from _harness import MIB, rss, spawn_serve
from loop_stall import huge_request
from reliability import request

from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# the test's shapes and sampler, loaded at run time (the suite is not type-checked with this)
_SHAPES: Any = importlib.import_module("tests.reliability.test_memory_budget_rss")

STREAM_PATH = "/model.v1.ModelService/StreamCompletion"
DESCRIBE_PATH = "/model.v1.ModelService/Describe"
SINGLES = ("config1m", "options1m", "60mib", "render60mib")
"""The ``singles`` flood's calls, in order (``benchmarks/loop_stall.py``'s kinds)."""
FLOODS = ("near-limit", "large-text", "singles")


def conversation(call: int, messages: int) -> bytes:
    """A StreamCompletionRequest of ``messages`` messages (alternating user and assistant,
    ending with a user message), distinct per ``call`` by its message ids."""
    body = request()
    body.messages = [
        Message(
            role=Role.USER if k % 2 == 0 or k == messages - 1 else Role.ASSISTANT,
            id=f"01J{call:05d}{k:018d}",
            content=[ContentBlock(text=TextBlock(text=f"message {k} " + "w " * 10))],
        )
        for k in range(messages)
    ]
    return bytes(body)


def one_run(calls: int, messages: int) -> tuple[float, float, float]:
    """(baseline, peak, final) RSS of one server, MiB."""
    proc, port = spawn_serve("--log-level", "WARNING")
    try:
        options = [("grpc.max_send_message_length", 64 * MIB)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            call = channel.unary_stream(STREAM_PATH)
            list(call(bytes(request()), timeout=60))
            time.sleep(1.5)
            baseline = peak = rss(proc.pid)
            for number in range(calls):
                list(call(conversation(number, messages), timeout=120))
                peak = max(peak, rss(proc.pid))
        time.sleep(3)
        final = rss(proc.pid)
        return baseline / MIB, peak / MIB, final / MIB
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def singles(address: str, pid: int) -> tuple[int, int, int, list[str]]:
    """The ``singles`` calls one after another: (baseline, peak, after) RSS in bytes and each
    call's outcome."""
    options = [
        ("grpc.max_send_message_length", 128 * MIB),
        ("grpc.max_receive_message_length", 128 * MIB),
    ]
    baseline = peak = rss(pid)
    done = threading.Event()
    peaks = [peak]

    def sample() -> None:
        while not done.is_set():
            peaks.append(rss(pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    outcomes: list[str] = []
    try:
        for kind in SINGLES:
            path, body = huge_request(kind)
            with grpc.insecure_channel(address, options=options) as channel:
                try:
                    if path == STREAM_PATH:
                        replies = list(channel.unary_stream(path)(body, timeout=120))
                        outcomes.append(f"{kind}: {len(replies)} events")
                    else:
                        reply = channel.unary_unary(path)(body, timeout=120)
                        outcomes.append(f"{kind}: {len(reply) / MIB:.0f} MiB")
                except grpc.RpcError as exc:
                    outcomes.append(f"{kind}: {exc.code().name}")
            del body
        time.sleep(3)
    finally:
        done.set()
        sampler.join()
    peak = max(peaks)
    return baseline, peak, _SHAPES.settled_rss(pid), outcomes


def flood_run(shape: str, budget: str) -> tuple[float, float, float, str]:
    """(baseline, peak, after) RSS of one server under ``shape``, MiB, and its outcomes."""
    extra = [] if budget == "default" else ["--memory-budget", budget]
    proc, port = spawn_serve(*extra, "--log-level", "WARNING")
    address = f"127.0.0.1:{port}"
    try:
        with grpc.insecure_channel(address) as channel:  # warm-up
            channel.unary_unary(DESCRIBE_PATH)(b"", timeout=10)
            list(channel.unary_stream(STREAM_PATH)(bytes(request()), timeout=60))
        time.sleep(1.5)
        if shape == "singles":
            baseline, peak, after, outcomes = singles(address, proc.pid)
            said = ", ".join(outcomes)
        else:
            make: Callable[[], bytes] = _SHAPES.SHAPES[shape][0]
            calls: int = _SHAPES.SHAPES[shape][1]
            run = _SHAPES.storm(address, proc.pid, make(), calls)
            baseline, peak, after = run.baseline, run.peak, run.after
            said = str({c: run.codes.count(c) for c in sorted(set(run.codes))})
        return baseline / MIB, peak / MIB, after / MIB, said
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def floods(shapes: list[str], budget: str, runs: int) -> None:
    for shape in shapes:
        results = []
        for _ in range(runs):
            baseline, peak, after, said = flood_run(shape, budget)
            load = os.getloadavg()[0]
            results.append((baseline, peak, after))
            print(
                f"  {shape} (budget {budget}): baseline {baseline:.0f} MiB, peak {peak:.0f} MiB, "
                f"after {after:.0f} MiB (+{after - baseline:.0f}); load {load:.2f}; {said}",
                flush=True,
            )
        base = statistics.median(r[0] for r in results)
        peak = statistics.median(r[1] for r in results)
        after = statistics.median(r[2] for r in results)
        grown = statistics.median(r[2] - r[0] for r in results)
        print(
            f"{shape} (budget {budget}), median of {runs}: baseline {base:.0f} MiB, peak "
            f"{peak:.0f} MiB, after {after:.0f} MiB (+{grown:.0f} MiB over baseline); load "
            f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", default="", help=f"{','.join(FLOODS)} or all")
    parser.add_argument("--budget", default="1GiB", help="--memory-budget, or default")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.flood:
        shapes = list(FLOODS) if args.flood == "all" else args.flood.split(",")
        unknown = [s for s in shapes if s not in FLOODS]
        if unknown:
            parser.error(f"--flood: unknown {', '.join(unknown)} (known: {', '.join(FLOODS)})")
        floods(shapes, args.budget, args.runs)
        return
    runs = [one_run(args.calls, args.messages) for _ in range(args.runs)]
    for baseline, peak, final in runs:
        print(f"baseline {baseline:.1f} MiB, peak {peak:.1f} MiB, final {final:.1f} MiB")
    base = statistics.median(r[0] for r in runs)
    final = statistics.median(r[2] for r in runs)
    print(
        f"median of {args.runs}: baseline {base:.1f} MiB, final {final:.1f} MiB "
        f"({final / base:.2f} x baseline) after {args.calls} calls of {args.messages} messages; "
        f"load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
