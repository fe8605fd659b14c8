"""The server-wide memory budget: its default, its flag's syntax, waiting and refusing, and the
decode bounded by the room there is."""

from __future__ import annotations

import asyncio
import time

import pytest

from protocol_py.codec.wire_gen import varint_bytes
from protocol_py.server.grpc_layer.memory_budget import (
    BODY_COPIES,
    MAX_DEFAULT_BUDGET,
    MIN_DEFAULT_BUDGET,
    OBJECT_BYTES,
    SMALL_REQUEST_BYTES,
    CallMemory,
    MemoryBudget,
    MemoryBudgetError,
    default_memory_budget,
    in_flight_estimate,
    machine_memory,
    parse_memory_budget,
)
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

MiB = 1024 * 1024


def ld(number: int, payload: bytes) -> bytes:
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload


def test_the_flag_takes_bytes_units_and_off() -> None:
    assert parse_memory_budget("536870912") == 512 * MiB
    assert parse_memory_budget("512MiB") == 512 * MiB
    assert parse_memory_budget("2GiB") == 2 * 1024 * MiB
    assert parse_memory_budget("1GB") == 1000**3
    assert parse_memory_budget("8GiB") == 8 * 1024 * MiB  # past the 4 GiB of message sizes
    assert parse_memory_budget("off") == 0
    assert parse_memory_budget("0") == 0
    with pytest.raises(ValueError, match=r"invalid memory budget 'lots'.*512MiB.*off"):
        parse_memory_budget("lots")


def test_the_default_is_a_quarter_of_memory_within_its_bounds() -> None:
    assert default_memory_budget(24 * 1024 * MiB) == 6 * 1024 * MiB
    assert default_memory_budget(512 * MiB) == MIN_DEFAULT_BUDGET
    assert default_memory_budget(1024 * 1024 * MiB) == MAX_DEFAULT_BUDGET
    memory = machine_memory()
    assert memory is not None and memory > 0  # Linux: /proc/meminfo
    assert MIN_DEFAULT_BUDGET <= default_memory_budget() <= MAX_DEFAULT_BUDGET


async def test_a_call_that_does_not_fit_waits_then_is_refused_naming_the_bound() -> None:
    budget = MemoryBudget(10 * MiB, wait=0.2)
    first = CallMemory(budget)
    await first.reserve_body(4 * MiB)  # 8 MiB charged
    assert budget.held == BODY_COPIES * 4 * MiB and budget.calls == 1
    second = CallMemory(budget)
    started = time.monotonic()
    with pytest.raises(MemoryBudgetError) as refused:
        await second.reserve_body(2 * MiB)
    assert time.monotonic() - started >= 0.19
    assert refused.value.message == (
        f"request message of {2 * MiB} bytes (needs {4 * MiB} bytes more): "
        f"server memory budget of {10 * MiB} bytes in use "
        f"({8 * MiB} held by 1 calls; bound --memory-budget); retry later"
    )
    assert budget.refused == 1 and second.held == 0
    first.release()
    assert budget.held == 0 and budget.calls == 0


async def _second_call_waiting(
    budget: MemoryBudget,
) -> tuple[CallMemory, CallMemory, asyncio.Task[None]]:
    """A first call holding 8 MiB of a 10 MiB budget and a second one waiting for 4 MiB."""
    first = CallMemory(budget)
    await first.reserve_body(4 * MiB)
    second = CallMemory(budget)
    waiting = asyncio.create_task(second.reserve_body(2 * MiB))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    return first, second, waiting


async def test_a_waiting_call_is_admitted_when_another_releases() -> None:
    budget = MemoryBudget(10 * MiB, wait=5.0)
    first, second, waiting = await _second_call_waiting(budget)
    first.release()
    await asyncio.wait_for(waiting, 1.0)
    assert budget.held == BODY_COPIES * 2 * MiB and budget.calls == 1
    second.release()
    assert budget.held == 0


async def test_small_requests_are_never_refused_and_one_larger_than_the_budget_is_at_once() -> None:
    budget = MemoryBudget(1 * MiB, wait=5.0)
    big = CallMemory(budget)
    started = time.monotonic()
    with pytest.raises(MemoryBudgetError) as refused:
        await big.reserve_body(3 * MiB)  # could never fit: no wait
    assert time.monotonic() - started < 1.0
    assert refused.value.message == (
        f"request message of {3 * MiB} bytes needs about {6 * MiB} bytes, more than the whole "
        f"server memory budget of {1 * MiB} bytes (bound --memory-budget)"
    )
    hog = CallMemory(budget)
    hog.resize(1 * MiB)
    small = CallMemory(budget)
    await small.reserve_body(SMALL_REQUEST_BYTES - 1)  # a Describe: charged, not refused
    assert budget.held == 1 * MiB + BODY_COPIES * (SMALL_REQUEST_BYTES - 1)
    for call in (big, small, hog):
        call.release()
    assert budget.held == 0 and budget.calls == 0


async def test_the_context_manager_releases_on_an_exception() -> None:
    budget = MemoryBudget(10 * MiB)
    with pytest.raises(RuntimeError), budget.call() as memory:
        await memory.reserve_body(1 * MiB)
        assert budget.held == 2 * MiB
        raise RuntimeError("boom")
    assert budget.held == 0 and budget.calls == 0


async def test_a_decode_gets_as_many_elements_as_there_is_room_for() -> None:
    # 200,000 empty messages: 400 KB on the wire, about 60 MB of objects
    body = ld(2, b"reference-small") + b"\x0a\x00" * 200_000
    budget = MemoryBudget(8 * MiB, wait=0.1)
    other = CallMemory(budget)
    other.resize(1 * MiB)  # another call holds bytes: this one does not run alone
    with budget.call() as memory:
        await memory.reserve_body(len(body))
        with pytest.raises(MemoryBudgetError) as refused:
            await memory.decode(body, StreamCompletionRequest, None)
    assert refused.value.message is not None
    assert refused.value.message.startswith(f"request message of {len(body)} bytes holds more ")
    assert f"server memory budget of {8 * MiB} bytes in use" in refused.value.message
    assert budget.held == 1 * MiB and budget.refused == 1
    # alone too: all its elements would need more than the whole budget, refused at once
    other.release()
    with budget.call() as memory:
        await memory.reserve_body(len(body))
        started = time.monotonic()
        with pytest.raises(MemoryBudgetError, match=r"elements there is room for"):
            await memory.decode(body, StreamCompletionRequest, None)
        assert time.monotonic() - started < 5.0
    assert budget.held == 0
    # the same room decodes a text of the same size at once, charged what it holds
    text = "x" * len(body)
    data = bytes(
        StreamCompletionRequest(
            model_id="reference-small",
            messages=[Message(role=Role.USER, content=[ContentBlock(text=TextBlock(text=text))])],
        )
    )
    with budget.call() as memory:
        await memory.reserve_body(len(data))
        decoded = await memory.decode(data, StreamCompletionRequest, None)
        assert decoded.messages[0].content[0].text is not None
        assert memory.held == in_flight_estimate(len(data), 2)  # one message, one block
    assert budget.held == 0


async def test_an_unlimited_budget_counts_without_refusing() -> None:
    budget = MemoryBudget(None, wait=0.01)
    body = ld(2, b"reference-small") + b"\x0a\x00" * 1000
    with budget.call() as memory:
        await memory.reserve_body(len(body))
        await memory.decode(body, StreamCompletionRequest, None)
        assert memory.held == in_flight_estimate(len(body), 1000)
        assert budget.held == 2 * (len(body) + OBJECT_BYTES * 1000)
    assert budget.held == 0 and budget.peak > 0


async def test_a_call_cancelled_just_as_room_is_made_stays_cancelled_and_holds_nothing() -> None:
    # room is made and the waiting call is cancelled in one loop turn: the cancel wins (on
    # Python 3.11, asyncio.wait_for returned normally here and the call went on, charged)
    budget = MemoryBudget(10 * MiB, wait=5.0)
    first, second, waiting = await _second_call_waiting(budget)
    first.release()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert second.held == 0 and budget.held == 0 and budget.calls == 0
