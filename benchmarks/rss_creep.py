"""RSS of a ``protocol-py serve`` subprocess before and after large StreamCompletions: how much of
the memory large calls took the process keeps once they end.

Each call sends a conversation of ``--messages`` messages (about 1.5 MiB for 20,000) through
google's grpcio client; the RSS (from /proc) is read after a warm-up call (baseline), at its
highest during the calls (peak) and 3 s after the last one (final). ``--runs`` servers are
measured one after the other and the medians printed. Set ``PYTHONMALLOC=malloc`` in the
environment to see the share of pymalloc's arenas (1 MiB each, kept while any small object in
them lives).

Usage: ``.venv/bin/python benchmarks/rss_creep.py [--calls 10] [--messages 20000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import grpc  # type: ignore[import-untyped]
from _harness import MIB, rss, spawn_serve
from reliability import request

from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock

STREAM_PATH = "/model.v1.ModelService/StreamCompletion"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run(args.calls, args.messages) for _ in range(args.runs)]
    for baseline, peak, final in runs:
        print(f"baseline {baseline:.1f} MiB, peak {peak:.1f} MiB, final {final:.1f} MiB")
    base = statistics.median(r[0] for r in runs)
    final = statistics.median(r[2] for r in runs)
    print(
        f"median of {args.runs}: baseline {base:.1f} MiB, final {final:.1f} MiB "
        f"({final / base:.2f} x baseline) after {args.calls} calls of {args.messages} messages"
    )


if __name__ == "__main__":
    main()
