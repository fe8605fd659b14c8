"""Large unary replies held at once are bounded by a byte
budget; one over it gets RESOURCE_EXHAUSTED at once, and the budget is given back when the
holding client disconnects. A large Render reply is counted before it is encoded, and encoded
in a worker thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.server import (
    HELD_COPIES,
    LARGE_REPLY_BYTES,
    REPLY_BUDGET_BYTES,
    ReplyBudget,
    handlers,
)
from protocol_py.server.grpc_layer.limits import EncodedReply, encode_reply
from protocol_py_gen.model.v1 import RenderRequest, RenderResponse

from ..support.h2_client import RawH2, grpc_frame
from ..support.proc import rss_bytes
from ..support.servers import spawn_server
from .conftest import Served, acall, serve, still_serving
from .test_memory_release import REPLY_MIB, TOLERANCE, render, render_request, settle, stop

MIB = 1024 * 1024


def render_body(mib: int, unit: str = "x") -> bytes:
    payload = json.dumps({"text": unit * 1024, "times": mib * 1024}).encode()
    return bytes(RenderRequest(payload_type="reference.repeat", payload=payload))


def test_reply_budget_constants_are_the_documented_ones() -> None:
    assert REPLY_BUDGET_BYTES == 256 * MIB
    assert LARGE_REPLY_BYTES == MIB


async def wait_held(served: Served, at_least: int, limit: float = 10.0) -> int:
    deadline = time.monotonic() + limit
    while served.server.reply_budget.held < at_least and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    return served.server.reply_budget.held


async def test_a_large_reply_beyond_the_budget_is_refused_and_the_budget_returns(
    served: Served,
) -> None:
    served.server.reply_budget = ReplyBudget(limit=16 * MIB)
    holder = await asyncio.to_thread(RawH2, served.port, auto_ack=False)
    try:
        # A 5 MiB reply the client never reads: held (the window lets through far less).
        holder.open("Render", grpc_frame(render_body(5)))
        held = await wait_held(served, 5 * MIB)
        assert held == HELD_COPIES * (5 * MIB + 7), held  # 5 MiB of text, 7 bytes of framing
        # A second one would take the server to 20 MiB: refused at once, nothing else held.
        second = await acall(served.address, "Render", render_body(5))
        assert second.code == "RESOURCE_EXHAUSTED", second
        assert second.details.startswith(
            f"reply of {5 * MIB + 7} bytes: the server already holds {held} bytes"
        ), second.details
        assert f"reply budget is {16 * MIB} bytes" in second.details, second.details
        assert served.server.reply_budget.held == held
        # Small replies are not counted and never refused.
        small = await acall(served.address, "Render", render_body(0))
        assert small.code == "OK", small
        await still_serving(served)
    finally:
        await asyncio.to_thread(holder.close)
    deadline = time.monotonic() + 10
    while served.server.reply_budget.held and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    assert served.server.reply_budget.held == 0
    again = await acall(served.address, "Render", render_body(5))
    assert again.code == "OK", again
    assert len(RenderResponse.parse(again.replies[0]).text) == 5 * MIB
    await still_serving(served)


def test_a_reservation_counts_its_lower_bound_then_the_exact_size_until_its_block_ends() -> None:
    budget = ReplyBudget(limit=16 * MIB)
    with budget.reserve(4 * MIB) as reservation:
        assert budget.held == HELD_COPIES * 4 * MIB
        reservation.grow(5 * MIB)
        assert budget.held == HELD_COPIES * 5 * MIB
        reservation.grow(3 * MIB)  # never shrinks below what was counted
        assert budget.held == HELD_COPIES * 5 * MIB
        with pytest.raises(GRPCError) as raised:
            reservation.grow(9 * MIB)  # 18 MiB would pass the 16 MiB budget
        assert raised.value.status is Status.RESOURCE_EXHAUSTED
        assert budget.held == HELD_COPIES * 5 * MIB
    assert budget.held == 0
    with budget.reserve(5 * MIB), pytest.raises(GRPCError), budget.reserve(5 * MIB):
        pass  # refused before the block runs
    assert budget.held == 0


async def test_a_large_non_ascii_reply_is_counted_by_its_encoded_bytes(served: Served) -> None:
    served.server.reply_budget = ReplyBudget(limit=16 * MIB)
    holder = await asyncio.to_thread(RawH2, served.port, auto_ack=False)
    try:
        # 3 Mi characters of two UTF-8 bytes each, never read: 6 MiB of text held
        holder.open("Render", grpc_frame(render_body(3, "\u00e9")))
        held = await wait_held(served, HELD_COPIES * 6 * MIB)
        assert held == HELD_COPIES * (6 * MIB + 7), held
        second = await acall(served.address, "Render", render_body(3, "\u00e9"))
        assert second.code == "RESOURCE_EXHAUSTED", second
        # refused at once on the text's length, a lower bound, before its exact size is known
        assert second.details.startswith(f"reply of at least {3 * MIB} bytes: the server"), (
            second.details
        )
        assert served.server.reply_budget.held == held
        await still_serving(served)
    finally:
        await asyncio.to_thread(holder.close)


async def test_a_large_reply_is_encoded_in_a_worker_thread(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []

    def recording(message: Any, max_send: int) -> EncodedReply:
        threads.append(threading.current_thread().name)
        return encode_reply(message, max_send)

    monkeypatch.setattr(handlers, "encode_reply", recording)
    result = await acall(served.address, "Render", render_body(2))
    assert result.code == "OK", result
    assert len(RenderResponse.parse(result.replies[0]).text) == 2 * MIB
    assert threads and threading.main_thread().name not in threads
    assert served.server.reply_budget.held == 0
    await still_serving(served)


async def test_one_reply_larger_than_the_whole_budget_is_sent_when_nothing_is_held(
    served: Served,
) -> None:
    served.server.reply_budget = ReplyBudget(limit=4 * MIB)
    result = await acall(served.address, "Render", render_body(3))
    assert result.code == "OK", result
    assert served.server.reply_budget.held == 0
    await still_serving(served)


async def test_a_reply_larger_than_the_whole_memory_budget_is_refused_without_retry_later() -> None:
    served = await serve(memory_budget=2 * MIB)
    try:
        result = await acall(served.address, "Render", render_body(4))
        assert result.code == "RESOURCE_EXHAUSTED", result
        assert "more than the whole server memory budget of 2097152 bytes" in result.details
        assert "(bound --memory-budget)" in result.details
        assert "retry later" not in result.details
        assert served.server.memory.held == 0 and served.server.reply_budget.held == 0
        await still_serving(served)
    finally:
        await served.server.shutdown(grace_period=0)


def test_unread_60_mib_replies_from_4_clients_stay_within_the_budget() -> None:
    """On a ``protocol-py serve`` subprocess: 4 raw HTTP/2 clients each ask
    for 5 Render replies of 60 MiB, read nothing, then disconnect. Only replies fitting the
    256 MiB budget are held; the others are refused, so the peak RSS stays near the budget."""
    sub = spawn_server("--log-level", "WARNING")
    try:
        assert render(sub.address, render_request(1)) == "OK"  # warm-up (lazy imports)
        time.sleep(0.5)
        baseline = rss_bytes(sub.proc.pid)
        body = grpc_frame(render_request(REPLY_MIB).SerializeToString())
        peak = [baseline]
        clients = [RawH2(sub.port, auto_ack=False) for _ in range(4)]
        try:
            streams = [[raw.open("Render", body) for _ in range(5)] for raw in clients]
            refused = 0
            deadline = time.monotonic() + 60
            for raw, ids in zip(clients, streams, strict=True):
                for stream_id in ids:
                    while time.monotonic() < deadline:
                        peak[0] = max(peak[0], rss_bytes(sub.proc.pid))
                        state = raw.streams[stream_id]
                        if state["ended"] or state["reset"] is not None or state["headers"]:
                            break
                        raw.pump(0.02)
                    if raw.streams[stream_id]["headers"].get("grpc-status") == "8":
                        refused += 1
            for _ in range(20):
                peak[0] = max(peak[0], rss_bytes(sub.proc.pid))
                time.sleep(0.05)
        finally:
            for raw in clients:
                raw.close()
        final = settle(sub.proc.pid, int(baseline * (1 + TOLERANCE)))
        print(
            f"baseline {baseline / MIB:.0f} MiB, peak {peak[0] / MIB:.0f} MiB "
            f"(+{(peak[0] - baseline) / MIB:.0f} MiB), final {final / MIB:.0f} MiB; "
            f"{refused} of 20 replies refused"
        )
        held = REPLY_BUDGET_BYTES // (HELD_COPIES * REPLY_MIB * MIB)
        assert refused == 20 - held  # 2 replies of 60 MiB (2 copies each) fit 256 MiB
        # The budget plus the replies being built at once (at most two worker threads, each
        # text only: a finished reply is counted before it is encoded), with margin; when
        # finished replies waited for the loop to encode them, uncounted, it was 540 MiB.
        assert peak[0] - baseline < REPLY_BUDGET_BYTES + 3 * REPLY_MIB * MIB
        assert final <= baseline * (1 + TOLERANCE)
        assert render(sub.address, render_request(1)) == "OK"  # still serving
    finally:
        stop(sub)
