"""``protocol-py serve`` with a stderr pipe that nobody reads: the pipe fills after 64 KiB of log
lines, and the server keeps serving, honours SIGTERM and exits, its log lines written by a
thread through a bounded queue (docs/decisions.md#d42)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time

from protocol_py.client.client import ModelClient

from ..support.servers import make_request, spawn_server

CALLS = 1_200
"""RPCs made while stderr is unread: each writes one record of 150-300 bytes, about 250 KB in
all, four times what a Linux pipe holds."""


async def _calls(address: str) -> int:
    async with ModelClient.connect(address) as client:
        done = 0

        async def one(i: int) -> None:
            nonlocal done
            if i % 2:
                await client.describe(timeout=10)
            else:
                async for _ in client.stream(make_request(f"hello {i}"), timeout=10):
                    pass
            done += 1

        for start in range(0, CALLS, 20):
            await asyncio.gather(*(one(i) for i in range(start, min(start + 20, CALLS))))
        return done


def test_a_full_stderr_pipe_never_stops_serving_and_sigterm_still_ends_the_server() -> None:
    sub = spawn_server()
    try:
        done = asyncio.run(asyncio.wait_for(_calls(sub.address), 120))
        assert done == CALLS

        async def still_serving() -> str:
            async with ModelClient.connect(sub.address) as client:
                return (await client.describe(timeout=5)).name

        assert asyncio.run(still_serving())
        sub.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        # stderr is still unread: the exit must not wait for it beyond the bounded flush
        status = sub.proc.wait(timeout=20)
        waited = time.monotonic() - started
    except subprocess.TimeoutExpired:
        sub.proc.kill()
        raise AssertionError("the server did not exit on SIGTERM with stderr full") from None
    finally:
        err = sub.stop()
    assert status == 0, err[-2000:]
    assert waited < 15
    lines = err.splitlines()
    if not err.endswith("\n"):
        # the exit abandoned a write blocked on the full pipe: only its last line is cut
        lines.pop()
    records = [json.loads(line) for line in lines if line.startswith("{")]  # whole lines
    # what the pipe held is whole lines, in order, starting with the start-up lines
    assert any("serving reference" in line for line in lines[:5]), lines[:5]
    assert records and all(r["outcome"] == "ok" for r in records)
    # the pipe filled: far from every call's record reached it
    assert len(records) < CALLS, len(records)
