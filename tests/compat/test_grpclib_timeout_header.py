"""grpclib_timeout_header: a client's grpc-timeout never shortens its deadline, and fits the 8
digits gRPC allows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpclib.client
import pytest
from grpclib.metadata import decode_timeout
from hypothesis import given
from hypothesis import strategies as st

from protocol_py._compat import grpclib_timeout_header
from protocol_py._compat.grpclib_timeout_header import MAX_TIMEOUT_VALUE, encode_timeout
from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ..support.servers import make_request, start_server


@pytest.mark.parametrize(
    ("seconds", "header"),
    [
        (10.9, "10900000u"),  # grpclib: "10S", 0.9 s early
        (120.0, "120000m"),  # chat's default turn timeout
        (0.05, "50000000n"),
        (20.5, "20500000u"),
        (1e-12, "1n"),
        (200_000.0, "200000S"),
        (1e9, "16666667M"),
        (1e13, "99999999H"),
    ],
)
def test_timeouts_are_written_in_the_finest_unit_that_fits(seconds: float, header: str) -> None:
    assert encode_timeout(seconds) == header


@given(st.floats(min_value=1e-9, max_value=3e11, allow_nan=False))
def test_the_header_never_shortens_the_timeout_and_has_at_most_8_digits(seconds: float) -> None:
    header = encode_timeout(seconds)
    value, unit = header[:-1], header[-1]
    assert value.isdigit() and 1 <= int(value) <= MAX_TIMEOUT_VALUE and len(value) <= 8
    sent = decode_timeout(header)
    assert sent >= seconds * (1 - 1e-12)
    # at most one unit late, relative to the value (a unit is at most 1e-8 of 8 digits)
    assert sent <= seconds * (1 + 1e-7) + decode_timeout(f"1{unit}")


def test_install_replaces_the_function_grpclib_calls() -> None:
    assert grpclib_timeout_header.install()
    assert grpclib.client.encode_timeout is encode_timeout
    assert grpclib_timeout_header.install()  # idempotent


class _Stalled(ReferenceProvider):
    """The reference provider, but its stream never yields: the call ends only by a deadline."""

    async def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        await asyncio.sleep(3600)
        yield StreamEvent()  # never reached


async def test_a_timeout_over_10_s_ends_by_the_clients_own_deadline() -> None:
    run = await start_server(_Stalled())
    try:
        async with ModelClient.connect(run.address) as client:
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                async for _ in client.stream(make_request(), timeout=10.9):
                    pass
            assert time.monotonic() - started >= 10.9
    finally:
        await run.server.shutdown(grace_period=0)
