"""run_cpu_started_by: a call cancelled while it waits for the CPU slot never runs its step,
even when the slot is granted in the same loop turn as the cancel."""

from __future__ import annotations

import asyncio
import time

import pytest

from protocol_py.server import offload


async def test_a_step_cancelled_just_as_the_slot_is_granted_never_runs() -> None:
    slot = offload._slot(asyncio.get_running_loop())
    await slot.acquire()  # another step holds the one slot
    ran: list[int] = []
    waiting = asyncio.create_task(
        offload.run_cpu_started_by(time.monotonic() + 10, offload.OFFLOAD_MIN_BYTES, ran.append, 1)
    )
    await asyncio.sleep(0.05)
    assert not waiting.done()
    slot.release()  # granted to the waiter ...
    waiting.cancel()  # ... which is cancelled in the same turn
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert ran == []
    # the slot is free again: the next step runs
    assert await offload.run_cpu(offload.OFFLOAD_MIN_BYTES, lambda: 7) == 7
    assert not slot.locked()


async def test_a_step_that_gets_no_slot_in_time_is_not_started() -> None:
    slot = offload._slot(asyncio.get_running_loop())
    await slot.acquire()
    try:
        with pytest.raises(offload.JobNotStarted):
            await offload.run_cpu_started_by(
                time.monotonic() + 0.05, offload.OFFLOAD_MIN_BYTES, lambda: 1
            )
    finally:
        slot.release()
    assert await offload.run_cpu(offload.OFFLOAD_MIN_BYTES, lambda: 2) == 2


async def test_waiting_steps_take_turns_by_connection_and_arrive_in_order_within_one() -> None:
    """A connection that queued three steps delays another connection's one step by at most
    one of them: the slot goes A, B, A, A (each connection's own steps in arrival order), not
    A, A, A, B."""
    slot = offload._slot(asyncio.get_running_loop())
    await slot.acquire()  # a step already running
    order: list[str] = []

    async def step(owner: str, name: str) -> None:
        offload.CPU_OWNER.set(owner)
        await offload.run_cpu(offload.OFFLOAD_MIN_BYTES, order.append, name)

    tasks = [asyncio.create_task(step("A", f"A{i}")) for i in range(3)]
    await asyncio.sleep(0.01)
    tasks.append(asyncio.create_task(step("B", "B0")))
    await asyncio.sleep(0.01)
    assert order == [] and slot.locked()
    slot.release()
    await asyncio.gather(*tasks)
    assert order == ["A0", "B0", "A1", "A2"]
    assert not slot.locked() and slot.free == offload.MAX_CPU_JOBS


async def test_a_step_cancelled_while_waiting_leaves_its_connections_turn_to_the_next() -> None:
    """A waiting step cancelled before its turn is dropped from its connection's queue; the
    connection's next step keeps the turn, and the slot ends free."""
    slot = offload._slot(asyncio.get_running_loop())
    await slot.acquire()
    order: list[str] = []

    async def step(owner: str, name: str) -> None:
        offload.CPU_OWNER.set(owner)
        await offload.run_cpu(offload.OFFLOAD_MIN_BYTES, order.append, name)

    a0 = asyncio.create_task(step("A", "A0"))
    a1 = asyncio.create_task(step("A", "A1"))
    b0 = asyncio.create_task(step("B", "B0"))
    await asyncio.sleep(0.01)
    a0.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a0
    slot.release()
    await asyncio.gather(a1, b0)
    assert order == ["A1", "B0"]
    assert slot.free == offload.MAX_CPU_JOBS and not slot.locked()


async def test_a_connection_of_short_steps_goes_before_one_whose_steps_hold_the_slot_long() -> None:
    """Among waiting connections the slot goes to the one that has held it least: after A's
    0.2 s step, B's short steps all run before A's next one, though A queued first."""
    order: list[str] = []

    async def step(owner: str, name: str, seconds: float) -> None:
        offload.CPU_OWNER.set(owner)
        await offload.run_cpu(
            offload.OFFLOAD_MIN_BYTES, lambda: (time.sleep(seconds), order.append(name))
        )

    slot = offload._slot(asyncio.get_running_loop())
    first = asyncio.create_task(step("A", "A0", 0.2))  # runs at once: the slot was free
    await asyncio.sleep(0.01)
    tasks = [asyncio.create_task(step("A", f"A{i}", 0.2)) for i in (1, 2)]
    await asyncio.sleep(0.01)
    tasks += [asyncio.create_task(step("B", f"B{i}", 0.001)) for i in range(3)]
    await asyncio.sleep(0.01)
    assert slot.locked()
    await asyncio.gather(first, *tasks)
    assert order == ["A0", "B0", "B1", "B2", "A1", "A2"]
    assert slot.free == offload.MAX_CPU_JOBS and not slot.locked()


async def test_new_connections_arriving_all_along_hold_back_a_waiting_one_only_for_a_while() -> (
    None
):
    """After A's 0.2 s step, new connections keep coming, one always waiting beside A with a
    2 ms step: A's next step still runs once the slot's clock, advancing by each step's time
    shared between the two waiting, has caught up with A's use (about 200 of their steps), not
    after the new connections stop coming."""
    slot = offload._slot(asyncio.get_running_loop())
    order: list[str] = []

    async def step(owner: str, name: str, seconds: float) -> None:
        offload.CPU_OWNER.set(owner)
        await offload.run_cpu(
            offload.OFFLOAD_MIN_BYTES, lambda: (time.sleep(seconds), order.append(name))
        )

    first = asyncio.create_task(step("A", "A0", 0.2))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(step("A", "A1", 0.002))
    newcomers: list[asyncio.Task[None]] = []
    while not second.done() and len(newcomers) < 2000:
        if not any(isinstance(o, str) and o.startswith("N") for o in slot._owners):
            name = f"N{len(newcomers)}"
            newcomers.append(asyncio.create_task(step(name, name, 0.002)))
        await asyncio.sleep(0.0002)
    await asyncio.gather(first, second, *newcomers)
    before = order.index("A1") - 1  # the newcomers run between A0 and A1
    assert 50 <= before <= 400, before
    assert len(newcomers) < 2000
