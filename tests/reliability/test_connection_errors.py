"""An HTTP/2 connection error caused by one request (a header list over the advertised
SETTINGS_MAX_HEADER_LIST_SIZE) closes that connection with a GOAWAY carrying the error code
and one WARNING naming the peer and the rule; other connections keep working (grpclib used to
drop the connection without the GOAWAY h2 had prepared and without a log line).

A stream beyond SETTINGS_MAX_CONCURRENT_STREAMS is a stream error (RFC 9113 section 5.1.2):
that stream alone is reset with REFUSED_STREAM, its header block decoded so that the
connection's HPACK state stays in step (:mod:`protocol_py._compat.h2_refused_stream`), and the
connection's other streams go on."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import grpc
import h2.errors
from h2.settings import SettingCodes

from ..support.h2_client import RawH2, grpc_frame
from .conftest import SERVICE, Served, still_serving


def warnings_about(logs: Any, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in logs.records
        if r.levelno == logging.WARNING and text in r.getMessage()
    ]


def describe_with_metadata(address: str, metadata: list[tuple[str, str]]) -> str:
    with grpc.insecure_channel(address) as channel:
        try:
            channel.unary_unary(SERVICE + "Describe")(b"", timeout=10, metadata=metadata)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return "OK"


async def test_oversized_metadata_gets_goaway_and_one_warning_and_others_keep_serving(
    served: Served, logs: Any
) -> None:
    other = grpc.insecure_channel(served.address)
    try:
        before = await asyncio.to_thread(other.unary_unary(SERVICE + "Describe"), b"", timeout=10)
        outcome = await asyncio.to_thread(
            describe_with_metadata, served.address, [("x-big", "a" * 100_000)]
        )
        print(f"grpcio saw: {outcome}")
        assert outcome.startswith("UNAVAILABLE: "), outcome
        assert "GOAWAY received; Error code: 11" in outcome, outcome  # ENHANCE_YOUR_CALM
        # The other channel's connection is untouched.
        after = await asyncio.to_thread(other.unary_unary(SERVICE + "Describe"), b"", timeout=10)
        assert after == before
    finally:
        other.close()
    # One WARNING per closed connection (grpcio retries once on a new connection after a
    # GOAWAY), each naming the error code and the advertised limit.
    found = warnings_about(logs, "closing HTTP/2 connection from 127.0.0.1:")
    assert 1 <= len(found) <= 2, found
    for line in found:
        assert "GOAWAY ENHANCE_YOUR_CALM" in line, line
        assert "A header list larger than 65536 has been received" in line, line
    await still_serving(served)


async def test_the_101st_concurrent_stream_is_refused_alone_and_the_others_continue(
    served: Served, logs: Any
) -> None:
    def flood() -> dict[str, Any]:
        raw = RawH2(served.port)
        try:
            # Ignore the server's SETTINGS_MAX_CONCURRENT_STREAMS of 100, as a flooding client does.
            raw.conn.remote_settings._settings[SettingCodes.MAX_CONCURRENT_STREAMS] = (
                collections.deque([1000])
            )
            held = [raw.open("StreamCompletion", None, end=False, flush=False) for _ in range(100)]
            # The 101st adds its :path to the HPACK dynamic table: the later Describe refers to
            # that entry, so it decodes only if the refused stream's block was decoded.
            refused = raw.open("Describe", grpc_frame(b""), flush=False)
            raw.flush()
            refused_state = raw.outcome(refused)
            # one of the held streams ends (cancelled by the client), freeing a slot
            raw.conn.reset_stream(held[0], h2.errors.ErrorCodes.CANCEL)
            raw.flush()
            admitted = raw.outcome(raw.open("Describe", grpc_frame(b"")))
            others_reset = [raw.streams[i]["reset"] for i in held[1:]]
            return {
                "refused": refused_state["reset"],
                "refused_data": refused_state["data"],
                "admitted": admitted["trailers"].get("grpc-status"),
                "admitted_data": len(admitted["data"]),
                "others_reset": [r for r in others_reset if r is not None],
                "terminated": raw.terminated,
                "closed": raw.closed,
            }
        finally:
            raw.close()

    seen = await asyncio.to_thread(flood)
    assert seen["refused"] == h2.errors.ErrorCodes.REFUSED_STREAM, seen
    assert seen["refused_data"] == b"", seen
    assert seen["admitted"] == "0", seen
    assert seen["admitted_data"] > 5, seen
    assert seen["others_reset"] == [], seen  # the 99 other held streams are still open
    assert seen["terminated"] is None and not seen["closed"], seen
    assert warnings_about(logs, "closing HTTP/2 connection") == []
    await still_serving(served)


async def test_a_header_that_is_not_ascii_gets_goaway_one_warning_and_no_traceback(
    served: Served, logs: Any
) -> None:
    def send() -> tuple[Any, bool]:
        raw = RawH2(served.port)
        try:
            raw.open("Describe", None, extra_headers=[("x-meta", "\u00e9")])
            for _ in range(100):
                if raw.terminated is not None or not raw.pump(0.05):
                    break
            return raw.terminated, raw.closed
        finally:
            raw.close()

    for _ in range(3):
        terminated, _closed = await asyncio.to_thread(send)
        assert terminated is not None, "no GOAWAY received"
        assert terminated.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
    found = warnings_about(logs, "closing HTTP/2 connection from 127.0.0.1:")
    assert len(found) == 3, found
    assert all("a header that is not ASCII" in line for line in found), found
    assert not [r for r in logs.records if r.exc_info or r.levelno >= logging.ERROR]
    await still_serving(served)
