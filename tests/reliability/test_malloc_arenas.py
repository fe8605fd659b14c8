"""``protocol-py serve`` limits glibc's malloc arenas so the
native heap of worker threads can be trimmed (why: the module docstring of
:mod:`protocol_py.server.malloc_arenas`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.server import serve as serving
from protocol_py.server.malloc_arenas import (
    MALLOC_ARENAS,
    MMAP_THRESHOLD_BYTES,
    TRIM_THRESHOLD_BYTES,
)


def test_malloc_arena_limit_is_one_and_glibc_accepts_it() -> None:
    assert MALLOC_ARENAS == 1
    # In a fresh interpreter (the setting is process-wide): glibc's mallopt returns 1.
    code = (
        "from protocol_py.server.malloc_arenas import limit_malloc_arenas;"
        "print(limit_malloc_arenas())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == "True"


def test_glibc_accepts_the_heap_thresholds_that_keep_a_turns_pages() -> None:
    # Blocks under 4 MiB come from the heap, and up to 16 MiB free at its top stay mapped.
    assert MMAP_THRESHOLD_BYTES == 4 * 1024 * 1024
    assert TRIM_THRESHOLD_BYTES == 16 * 1024 * 1024
    code = "from protocol_py.server.malloc_arenas import keep_freed_heap;print(keep_freed_heap())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == "True"


_FAULTS_PER_BUFFER = """
import resource
from protocol_py.server.malloc_arenas import keep_freed_heap
assert keep_freed_heap()
def faults(size, rounds=40):
    chunks = [memoryview(bytes(size // 4))] * 4
    b"".join(chunks)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        body = b"".join(chunks)  # a turn's buffer, freed before the next
        del body
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds
print(faults(1_200_000), faults(2 * MMAP))
""".replace("MMAP", str(MMAP_THRESHOLD_BYTES))


def test_a_turns_megabyte_buffer_reuses_its_pages_and_a_larger_one_goes_back() -> None:
    # A 1.2 MB buffer allocated and freed turn after turn lands on the same pages (no page
    # fault); one over the mmap threshold has its own mapping, returned when freed, so it is
    # faulted in again every time (a page per 4 KiB).
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS_PER_BUFFER],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    small, large = map(float, out.stdout.split())
    assert small < 5
    assert large >= 2 * MMAP_THRESHOLD_BYTES / 4096 * 0.9


def test_serve_sets_the_allocator_before_starting_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(serving, "limit_malloc_arenas", lambda: calls.append("arenas") or True)
    monkeypatch.setattr(serving, "keep_freed_heap", lambda: calls.append("heap") or True)

    def run(coro: Any) -> None:
        calls.append("loop")
        coro.close()

    monkeypatch.setattr(serving.asyncio, "run", run)
    serving.serve(ReferenceProvider())
    assert calls == ["arenas", "heap", "loop"]


async def test_a_call_that_leaves_its_connection_without_an_open_call_is_followed_by_a_trim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A small call can free megabytes its provider read upstream; what serve's heap keeps is
    # returned once the connection has no open call (large and aborted calls trim as before).
    server = ModelServer(ReferenceProvider())
    requested: list[object] = []
    monkeypatch.setattr(server._trimmer, "request", requested.append)
    port = await server.start("127.0.0.1", 0)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        caps = await client.get_capabilities(timeout=10)
        for _ in range(200):  # the call's end is handled just after its reply
            if requested:
                break
            await asyncio.sleep(0.01)
        assert len(requested) == 1 and caps.models
        assert (await client.get_capabilities(timeout=10)).models  # still serving
    finally:
        client.close()
        await server.shutdown(grace_period=0)
