"""Configure and Render's reference.repeat never do size-proportional work on the event loop:
a config of many keys is checked in a worker thread and logged with a bounded
key list; a reference.repeat payload over its bound is refused before it is parsed."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import pytest
from grpclib.exceptions import GRPCError

from protocol_py.codec.structs import to_struct
from protocol_py.providers.reference import MAX_REPEAT_PAYLOAD_BYTES, ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.server.records import MAX_LOGGED_CONFIG_KEYS, RpcRecord
from protocol_py_gen.model.v1 import ConfigureRequest, RenderFormat, RenderRequest


def test_a_config_of_many_keys_is_checked_off_the_event_loop_and_logged_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = ModelServer(ReferenceProvider())
    loop_thread: list[int] = []
    checked_in: list[int] = []
    original = server._checked_config

    def spy(message: ConfigureRequest) -> Any:
        checked_in.append(threading.get_ident())
        return original(message)

    server._checked_config = spy  # type: ignore[method-assign]
    keys = 5000
    request = ConfigureRequest(config=to_struct({f"k{i:05d}": i for i in range(keys)}))

    async def call() -> str:
        await server.prepare()
        loop_thread.append(threading.get_ident())
        try:
            await server.configure(request)
        except GRPCError as exc:
            return str(exc.message)
        return "accepted"

    message = asyncio.run(call())
    assert message.startswith("invalid config: 5000 error(s)")
    assert checked_in and checked_in[0] != loop_thread[0]

    record = RpcRecord(rpc="Configure")
    record.config_keys = sorted(request.config.fields)[:MAX_LOGGED_CONFIG_KEYS]
    record.config_keys_count = keys
    with caplog.at_level(logging.INFO, logger="protocol_py.server"):
        record.emit()
    line = json.loads(caplog.records[-1].getMessage())
    assert line["config_keys_total"] == keys
    assert len(line["config_keys"]) <= MAX_LOGGED_CONFIG_KEYS
    assert line["config_keys"][0] == "k00000"


def test_a_repeat_payload_over_its_bound_is_refused_before_parsing() -> None:
    provider = ReferenceProvider()
    nested = (
        b'{"text": "a", "times": 1, "x": [' + b"[]," * (MAX_REPEAT_PAYLOAD_BYTES // 3) + b"[]]}"
    )
    assert len(nested) > MAX_REPEAT_PAYLOAD_BYTES
    request = RenderRequest(
        payload_type="reference.repeat", payload=nested, format=RenderFormat.PLAIN_TEXT
    )

    async def call() -> str:
        try:
            await provider.render(request)
        except ValueError as exc:
            return str(exc)
        return "accepted"

    message = asyncio.run(call())
    assert f"over the {MAX_REPEAT_PAYLOAD_BYTES}-byte bound" in message
    assert len(message) < 300
    ok = RenderRequest(
        payload_type="reference.repeat",
        payload=json.dumps({"text": "ab", "times": 3}).encode(),
        format=RenderFormat.PLAIN_TEXT,
    )
    assert asyncio.run(provider.render(ok)).text == "ababab"
