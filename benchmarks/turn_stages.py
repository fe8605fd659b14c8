"""Per-stage cost of one warm turn on a long conversation, in this process.

The server's work on a StreamCompletion request, stage by stage, each timed on its own as the
server runs it on a kernel's repeated turns (the same conversation resent, warm caches): the
client's encode (``wire.encode``), the server's decode (``limits.decode_request``: upb check,
fast decode, marks and wire images), validation (``validate_request``) and the context-window
count (``check_context_window``: the vendor body of the OpenAI-compatible adapter). Also the
server's CPU per warm turn with the stub upstream and the server in their own processes
(``/proc/<pid>/stat``, all threads; less sensitive to a busy machine than wall time).

Usage: ``.venv/bin/python benchmarks/turn_stages.py [--messages 600] [--turns 12] [--repeat 5]
[--sweep-mib 32]``. Prints the median over ``--repeat`` runs of each stage's median over
``--turns`` turns. The stages run one after the other on caches the turn before left warm; in
the server, the request's transfer and the other processes pass between two turns, so its
stages find the kept messages in memory rather than in the CPU's caches. ``--sweep-mib N``
writes one byte in every 64 of an N MiB buffer before each turn's decode (32 MiB: more than
this machine's caches), so the stages are timed from memory as well.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import time

from server import start
from turn_latency import MODEL, _serve_plugin, _serve_stub, conversation, plugin_first_event

from protocol_py.client.client import ModelClient
from protocol_py.codec import wire
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.rules.request import validate_request
from protocol_py.server.context_window import check_context_window
from protocol_py.server.grpc_layer.limits import decode_request, strict_request_classes
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py_gen.model.v1 import StreamCompletionRequest

_EPOCHS = itertools.count(10_000)
"""Message-id epochs of cold turns in this process (unique: no cache keyed by id hits)."""


def stages(
    messages: int, turns: int, cold: bool = False, sweep: bytearray | None = None
) -> dict[str, float]:
    """Median seconds of each stage over ``turns`` turns (3 warm-up turns first): warm (the
    same messages resent with a new turn id) or, with ``cold``, every message id new each
    turn. ``sweep``: a buffer written one byte in every 64 after each turn's encode, before
    its decode (see the module docstring)."""
    strict = strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]
    provider = OpenAIProvider(api_key="bench", base_url="http://127.0.0.1:9")
    spec = provider.spec_for(MODEL)
    assert spec is not None
    times: dict[str, list[float]] = {}
    for i in range(turns + 3):
        request = conversation(messages, next(_EPOCHS) if cold else 0, turn=i)
        started = time.perf_counter()
        data = wire.encode(request)
        encoded = time.perf_counter()
        encode = encoded - started
        if sweep is not None:
            _sweep(sweep)
            encoded = time.perf_counter()
        decoded = decode_request(data, StreamCompletionRequest, strict)
        decoded_at = time.perf_counter()
        violations = validate_request(decoded, spec)
        validated = time.perf_counter()
        check_context_window(provider, decoded, spec)
        counted = time.perf_counter()
        decode = decoded_at - encoded
        check, count = validated - decoded_at, counted - validated
        assert not violations
        if i >= 3:
            for name, took in (
                ("client encode", encode),
                ("server decode", decode),
                ("validation", check),
                ("translation + JSON (context-window count)", count),
            ):
                times.setdefault(name, []).append(took)
    return {name: statistics.median(values) for name, values in times.items()}


def _sweep(buffer: bytearray) -> None:
    """Read and write back one byte in every 64 of ``buffer`` (a cache line each)."""
    buffer[::64] = buffer[::64]


def print_profile(messages: int, turns: int, repeat: int) -> None:
    """Print where the server's milliseconds go on a warm and on a cold turn of ``messages``
    messages after the first: each stage's median over ``repeat`` runs of ``turns`` turns."""
    for mode in ("warm", "cold"):
        runs = [stages(messages, turns, cold=mode == "cold") for _ in range(repeat)]
        print(f"{mode} profile, {messages + 1} messages (in one process; median ms):")
        total = 0.0
        for name in runs[0]:
            took = statistics.median(r[name] for r in runs) * 1e3
            total += took
            print(f"{name:>44}: {took:8.2f} ms")
        print(f"{'sum of the stages':>44}: {total:8.2f} ms")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _server_cpu(port: int, pid: int, messages: int, turns: int) -> float:
    request = conversation(messages)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        for _ in range(3):
            await plugin_first_event(client, request)
        before = _cpu_seconds(pid)
        for _ in range(turns):
            await plugin_first_event(client, request)
        return (_cpu_seconds(pid) - before) / turns
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=600, help="messages after the first")
    parser.add_argument("--turns", type=int, default=12, help="turns per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs (median)")
    parser.add_argument(
        "--sweep-mib",
        type=int,
        default=0,
        help="MiB of memory written before each turn's decode (0: none; see the docstring)",
    )
    args = parser.parse_args(argv)
    sweep = bytearray(args.sweep_mib << 20) if args.sweep_mib > 0 else None
    runs = [stages(args.messages, args.turns, sweep=sweep) for _ in range(args.repeat)]
    swept = f"; {args.sweep_mib} MiB swept before each decode" if sweep is not None else ""
    print(f"{args.messages + 1} messages; median of {args.repeat} runs x {args.turns} turns{swept}")
    for name in runs[0]:
        print(f"{name:>36}: {statistics.median(r[name] for r in runs) * 1e3:8.2f} ms")
    if sys.platform == "linux":
        stub, stub_port = start(_serve_stub)
        plugin, plugin_port = start(_serve_plugin, f"http://127.0.0.1:{stub_port}")
        try:
            cpu = [
                asyncio.run(_server_cpu(plugin_port, plugin.pid, args.messages, args.turns * 2))
                for _ in range(args.repeat)
            ]
        finally:
            for proc in (plugin, stub):
                proc.terminate()
                proc.join(5)
        name = "server CPU per warm turn (all threads)"
        print(f"{name:>36}: {statistics.median(cpu) * 1e3:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
