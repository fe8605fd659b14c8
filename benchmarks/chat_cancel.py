"""``protocol-py chat``: how fast Ctrl-C ends a stream, and what ``import protocol_py`` costs.

Usage: ``.venv/bin/python benchmarks/chat_cancel.py [REPEATS]`` (default 5).

Starts ``protocol-py serve --port 0 --handshake`` (reference provider, paced to 30 tokens/s so a
stream is still running), then REPEATS times runs ``protocol-py chat "Hello there"``, sends
SIGINT once the first bytes arrive and times the exit (status 130). Prints the median, against
the median start-to-exit time of ``protocol-py version`` measured in the same run (the floor
any CLI exit costs here). Also prints the median of ``import protocol_py`` (the lazy package
root) against ``import protocol_py.server`` (what the root would cost if it imported eagerly).
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from protocol_py.client.client import ModelClient

BIN = Path(sys.executable).parent


def timed_run(argv: list[str], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


async def pace(address: str) -> None:
    async with ModelClient.connect(address) as client:
        await client.configure({"pace_tokens_per_second": 30}, timeout=10)


def cancel_latency(address: str, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        proc = subprocess.Popen(
            [str(BIN / "protocol-py"), "chat", "--server", address, "Hello there"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        if not select.select([proc.stdout], [], [], 60)[0]:
            proc.kill()
            raise SystemExit("chat printed nothing within 60 s")
        os.read(proc.stdout.fileno(), 100)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        runs.append(time.perf_counter() - t0)
        if proc.returncode != 130:
            raise SystemExit(f"chat exited {proc.returncode}, expected 130")
    return statistics.median(runs)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    server = subprocess.Popen(
        [str(BIN / "protocol-py"), "serve", "--port", "0", "--handshake"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        address = server.stdout.readline().split("|")[2]
        asyncio.run(pace(address))
        cancel = cancel_latency(address, repeats)
        floor = timed_run([str(BIN / "protocol-py"), "version"], repeats)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"SIGINT -> chat exit: median {cancel * 1000:.0f} ms; `protocol-py version` start to "
        f"exit: {floor * 1000:.0f} ms; ratio {cancel / floor:.2f} ({repeats} runs each)"
    )
    root = timed_run([sys.executable, "-c", "import protocol_py"], repeats)
    eager = timed_run([sys.executable, "-c", "import protocol_py.server"], repeats)
    print(
        f"import protocol_py: median {root * 1000:.0f} ms; import protocol_py.server: "
        f"{eager * 1000:.0f} ms; ratio {eager / root:.1f}"
    )


if __name__ == "__main__":
    main()
