"""Every per-RPC log line stays under MAX_LOG_LINE_BYTES bytes after JSON encoding, also
for 32 long non-ASCII Configure keys (each kept character written as itself, never escaped as
``\\u00e9``)."""

from __future__ import annotations

import json

from protocol_py.bounded_text import MAX_ECHOED_VALUE_CHARS
from protocol_py.codec.structs import to_struct
from protocol_py.server.records import (
    MAX_LOG_LINE_BYTES,
    MAX_LOGGED_CONFIG_KEYS,
    RPC_RECORD_ATTR,
    RpcRecord,
)
from protocol_py_gen.model.v1 import ConfigureRequest

from .conftest import Captured, Served, acall, still_serving


def _lines(logs: Captured) -> list[str]:
    return [r.getMessage() for r in logs.records if getattr(r, RPC_RECORD_ATTR, False)]


async def test_configure_with_32_long_non_ascii_keys_logs_a_bounded_line(
    served: Served, logs: Captured
) -> None:
    keys = [chr(0x4E00 + i) * 4096 for i in range(MAX_LOGGED_CONFIG_KEYS)]  # 3 bytes each
    body = bytes(ConfigureRequest(config=to_struct(dict.fromkeys(keys, 1))))
    result = await acall(served.address, "Configure", body)
    assert result.code == "INVALID_ARGUMENT", result
    line = next(text for text in _lines(logs) if '"Configure"' in text)
    print(f"Configure log line: {len(line.encode())} bytes")
    assert len(line.encode()) <= MAX_LOG_LINE_BYTES
    record = json.loads(line)
    assert record["config_keys_total"] == MAX_LOGGED_CONFIG_KEYS  # says how many there were
    assert 0 < len(record["config_keys"]) < MAX_LOGGED_CONFIG_KEYS
    first = keys[0][:MAX_ECHOED_VALUE_CHARS]
    assert record["config_keys"][0].startswith("'" + first)  # as itself, not \\u escapes
    await still_serving(served)


def test_a_record_under_the_bound_keeps_every_key(logs: Captured) -> None:
    record = RpcRecord("Configure", outcome="invalid_request", detail="é" * 300)
    record.config_keys = ["é" * 10, "b"]
    record.emit()
    line = _lines(logs)[0]
    assert json.loads(line)["config_keys"] == ["é" * 10, "b"]
    assert "config_keys_total" not in json.loads(line)
    assert "é" * 300 in line and "\\u00e9" not in line
