"""Benchmark: unary errors that echo huge caller values, through google's grpcio client.

Usage: ``.venv/bin/python benchmarks/bounded_errors.py [REPEATS]`` (default REPEATS = 5).

Starts the reference server in-process (its own event loop in a thread) and, with one grpcio
channel, times Render calls whose ``payload_type`` is 1 KiB, 1 MiB and 4 MiB (each answered
INVALID_ARGUMENT "unknown payload type", the value echoed cut), a CountTokens with a 4 MiB
``model_id`` and a Configure with 5,000 unknown keys. Prints the median wall time of each, its
ratio against a Render with an 8-character ``payload_type`` measured in the same run, and the
length of the ``grpc-message`` received (at most 1 KiB: :mod:`protocol_py.bounded_text`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time

import grpc  # type: ignore[import-untyped]

from protocol_py.codec.structs import to_struct
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import ConfigureRequest, CountTokensRequest, RenderRequest

SERVICE = "/model.v1.ModelService/"
MIB = 1024 * 1024


def start() -> tuple[asyncio.AbstractEventLoop, ModelServer, int]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def make() -> tuple[ModelServer, int]:
        server = ModelServer(ReferenceProvider())
        return server, await server.start("127.0.0.1", 0)

    server, port = asyncio.run_coroutine_threadsafe(make(), loop).result(30)
    return loop, server, port


def timed(channel: grpc.Channel, rpc: str, body: bytes, repeats: int) -> tuple[float, str, int]:
    runs = []
    code, length = "", 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        try:
            channel.unary_unary(SERVICE + rpc)(body, timeout=600)
            code = "OK"
        except grpc.RpcError as exc:
            code, length = exc.code().name, len((exc.details() or "").encode())
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), code, length


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    loop, server, port = start()
    options = [("grpc.max_send_message_length", 64 * MIB)]
    cases = [
        ("Render payload_type 1 KiB", "Render", RenderRequest(payload_type="a" * 1024)),
        ("Render payload_type 1 MiB", "Render", RenderRequest(payload_type="a" * MIB)),
        ("Render payload_type 4 MiB", "Render", RenderRequest(payload_type="a" * 4 * MIB)),
        ("CountTokens model_id 4 MiB", "CountTokens", CountTokensRequest(model_id="m" * 4 * MIB)),
        (
            "Configure 5,000 unknown keys",
            "Configure",
            ConfigureRequest(config=to_struct({f"k{i:05d}": 1 for i in range(5000)})),
        ),
    ]
    print(f"bounded-errors benchmark: grpcio client, median of {repeats} runs")
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        small = bytes(RenderRequest(payload_type="a" * 8))
        timed(channel, "Render", small, 1)  # connect first: the baseline is one call's cost
        base, _, _ = timed(channel, "Render", small, repeats)
        print(f"  baseline Render payload_type 8 chars: {base * 1000:8.2f} ms")
        for label, rpc, request in cases:
            median, code, length = timed(channel, rpc, bytes(request), repeats)
            print(
                f"  {label:30s} {median * 1000:8.2f} ms  x{median / base:7.1f}  "
                f"{code}, grpc-message {length} bytes"
            )
    asyncio.run_coroutine_threadsafe(server.shutdown(grace_period=0), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
