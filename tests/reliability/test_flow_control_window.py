"""Streams reset before their handler reads the body give
their bytes back to the connection window, so after any number of resets a new request on the
same connection goes through (https://github.com/vmagamedov/grpclib/issues/217)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocol_py_gen.model.v1 import CountTokensRequest, DescribeRequest

from ..support.h2_client import RawH2, grpc_frame
from ..support.servers import make_request, start_server

RESETS = 500
BODY = 60_000
"""Bytes of each reset request (the issue's 60 KB)."""


def reset_storm(port: int, resets: int) -> dict[str, Any]:
    """On one raw connection: ``resets`` times HEADERS + 60 KB DATA + RST_STREAM in a single
    write (so the server reads them in one go), waiting for the connection window to come back
    whenever it runs short; then one Describe on the same connection."""
    raw = RawH2(port)
    try:
        body = grpc_frame(
            bytes(CountTokensRequest(model_id="reference-large", messages=make_request().messages))
        )
        body += b"\x00" * (BODY - len(body))
        jammed_at = None
        for index in range(resets):
            waited = 0.0
            while raw.conn.outbound_flow_control_window < BODY and waited < 5.0:
                raw.pump(0.05)
                waited += 0.05
            if raw.conn.outbound_flow_control_window < BODY:
                jammed_at = index
                break
            sid = raw.open("CountTokens", body, end=False, flush=False)
            raw.conn.reset_stream(sid)
            raw.flush()
        window = raw.conn.outbound_flow_control_window
        sid = raw.open("Describe", grpc_frame(bytes(DescribeRequest())))
        state = raw.outcome(sid, limit=10)
        return {"jammed_at": jammed_at, "window": window, "describe": state}
    finally:
        raw.close()


@pytest.mark.parametrize("resets", [RESETS])
async def test_resets_before_the_handler_reads_never_shrink_the_connection_window(
    resets: int,
) -> None:
    run = await start_server()
    try:
        result = await asyncio.to_thread(reset_storm, run.port, resets)
        print(
            f"{resets} resets of {BODY} B: jammed at {result['jammed_at']}, "
            f"window before Describe {result['window']} B"
        )
        assert result["jammed_at"] is None
        describe = result["describe"]
        assert describe["headers"].get("grpc-status") == "0"
        assert describe["data"]  # the DescribeResponse
        # every reset stream was released: nothing left registered on the server's connections
        await asyncio.sleep(0.1)
        assert all(not p.processor.streams for p in run.server._protocols)
    finally:
        await run.server.shutdown(grace_period=0)
