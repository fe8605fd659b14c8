"""``protocol-py serve`` logs: each RPC's line on stderr is exactly one
JSON object (no prefix); Configure's line names the keys set and never a value; other lines are
``<time> <LEVEL> <logger> <message>``."""

from __future__ import annotations

import json
import re

from protocol_py.client.client import ModelClient
from protocol_py_gen.model.v1 import StopReason

from ..support.servers import make_request, spawn_server

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \S+ ")


async def test_serve_logs_each_rpc_as_one_bare_json_line() -> None:
    sub = spawn_server()
    try:
        async with ModelClient.connect(sub.address) as client:
            await client.configure({"api_key": "sk-SECRET-123", "max_tokens": 4096}, timeout=5)
            done = await client.complete(make_request("Hello there"), timeout=10)
            assert done.stop is not None and done.stop.reason == StopReason.END_TURN
    finally:
        err = sub.stop()
    assert "sk-SECRET-123" not in err
    records = []
    for line in err.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
        else:
            assert TEXT_LINE.match(line), line
    assert [r["rpc"] for r in records] == ["Configure", "GetCapabilities", "StreamCompletion"]
    configure = records[0]
    assert configure["outcome"] == "ok"
    assert configure["config_keys"] == ["api_key", "max_tokens"]
    assert "config" not in configure
    completion = records[2]
    assert completion["stop"] == "END_TURN" and completion["model"] == "reference-large"
    assert "configured provider" not in err
