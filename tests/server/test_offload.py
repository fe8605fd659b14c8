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
