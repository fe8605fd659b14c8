"""The fast codec's functions are built when the server starts, not by its first call on the
event loop (where it stalled a fresh server for tens of milliseconds)."""

from __future__ import annotations

import time

import pytest

from protocol_py.codec.wire_gen import GENERATOR
from protocol_py.server.codec_warmup import REPLY_TYPES
from protocol_py.server.grpc_layer.limits import REQUEST_TYPES

from .conftest import serve, still_serving


async def test_server_start_builds_every_request_decoder_and_reply_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(GENERATOR, "decoders", {})  # as in a fresh process
    monkeypatch.setattr(GENERATOR, "encoders", {})
    started = time.monotonic()
    run = await serve()
    print(f"start with the codec build: {time.monotonic() - started:.3f} s")
    try:
        assert set(REQUEST_TYPES) <= set(GENERATOR.decoders)
        assert set(REPLY_TYPES) <= set(GENERATOR.encoders)
        built = (len(GENERATOR.decoders), len(GENERATOR.encoders))
        await still_serving(run)
        assert (len(GENERATOR.decoders), len(GENERATOR.encoders)) == built  # nothing new
    finally:
        await run.server.shutdown(grace_period=0)
