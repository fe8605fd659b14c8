"""A client that enforces its own deadline resets the stream at that deadline, measured from its
send time, so the reset reaches the server just before the server's own deadline timer; the RPC
record must say what grpcio reports, DEADLINE_EXCEEDED. A reset within ``DEADLINE_RESET_MARGIN``
seconds plus ``DEADLINE_ROUNDING_FRACTION`` of the timeout before the ``grpc-timeout`` deadline
is recorded as ``deadline_exceeded``; an earlier reset stays ``cancelled``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from types import SimpleNamespace
from typing import Any

import h2.exceptions
import pytest

from protocol_py.server.grpc_layer.connections import DEADLINE_RESET_MARGIN, cancel_outcome

from ..support.h2_client import RawH2, grpc_frame
from ..support.servers import make_request, start_server
from ._probes import UnpacedProvider
from .test_cancellation_reaches_provider import records, still_serving


def fake_stream(remaining: float | None) -> Any:
    """A grpclib server stream whose call ended without an error of its own (a reset)."""
    deadline = None if remaining is None else SimpleNamespace(time_remaining=lambda: remaining)
    return SimpleNamespace(_stream=SimpleNamespace(wrapper=None), deadline=deadline)


@pytest.mark.parametrize(
    ("remaining", "outcome"),
    [
        (None, "cancelled"),  # no grpc-timeout
        (5.0, "cancelled"),  # reset long before the deadline: the client cancelled
        (DEADLINE_RESET_MARGIN + 0.01, "cancelled"),
        (DEADLINE_RESET_MARGIN * 0.6, "deadline_exceeded"),  # the client's deadline timer
        (0.0, "deadline_exceeded"),
        (-0.2, "deadline_exceeded"),
    ],
)
def test_cancel_outcome_counts_a_reset_at_the_deadline_as_deadline_exceeded(
    remaining: float | None, outcome: str
) -> None:
    assert cancel_outcome(fake_stream(remaining)) == (outcome, None)


@pytest.mark.parametrize(
    ("timeout", "remaining", "outcome"),
    [
        (25.0, 0.1, "deadline_exceeded"),  # grpcio sent 25100m for 25 s: its reset 0.1 s early
        (25.0, 0.17, "deadline_exceeded"),  # 24.93 s sent as 25100m
        (25.0, 0.4, "cancelled"),  # beyond the margin and 1% of 25 s: the client cancelled
        (2.0, 0.076, "deadline_exceeded"),  # a new channel's first call: timed before connecting
        (2.0, 0.2, "cancelled"),
        (300.0, 3.0, "deadline_exceeded"),
        (300.0, 4.0, "cancelled"),
    ],
)
def test_the_margin_grows_with_the_timeout_as_grpcio_rounds_its_header_up(
    timeout: float, remaining: float, outcome: str
) -> None:
    """grpcio rounds ``grpc-timeout`` up to three significant digits, so its own deadline timer
    resets the stream up to 1% of the timeout (DEADLINE_ROUNDING_FRACTION) plus
    DEADLINE_RESET_MARGIN before the server's deadline: such a reset is the deadline."""
    started = time.monotonic() - (timeout - remaining)
    assert cancel_outcome(fake_stream(remaining), started) == (outcome, None)


def reset_after(port: int, timeout: str, seconds: float) -> float:
    """Open a StreamCompletion with ``grpc-timeout: timeout``, read until its first response
    data (so the server has the call and started its deadline clock), then for ``seconds``
    more, and reset it the way a client's deadline timer does; the seconds waited after the
    first data. Timing from the first data, not from the send, keeps the reset within the
    server's deadline margin however late the headers reached a busy server."""
    raw = RawH2(port)
    try:
        sid = raw.open("StreamCompletion", grpc_frame(bytes(make_request())), timeout=timeout)
        first_by = time.monotonic() + 10
        while not raw.streams[sid]["data"] and time.monotonic() < first_by:
            raw.pump(0.005)
        assert raw.streams[sid]["data"], "no response data within 10 s"
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            raw.pump(0.01)
        waited = time.monotonic() - started
        # the server's own deadline timer may have ended the stream first: also deadline_exceeded
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            raw.conn.reset_stream(sid, error_code=8)  # CANCEL
        raw.flush()
        raw.pump(0.2)
        return waited
    finally:
        raw.close()


async def test_a_client_reset_at_its_deadline_is_recorded_as_deadline_exceeded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    run = await start_server(UnpacedProvider(count=50_000_000, block=0.0005))
    try:
        waited = await asyncio.to_thread(
            reset_after, run.port, "400m", 0.4 - DEADLINE_RESET_MARGIN / 2
        )
        early = await asyncio.to_thread(reset_after, run.port, "10S", 0.2)
        await asyncio.sleep(0.3)
        print(f"resets {waited:.3f} s after the first data (0.4 s deadline), {early:.3f} s (10 s)")
        outcomes = [record["outcome"] for record in records(caplog)]
        assert outcomes == ["deadline_exceeded", "cancelled"]
        await still_serving(run)
    finally:
        await run.server.shutdown(grace_period=0)
