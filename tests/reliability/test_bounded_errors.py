"""Bounded error text.

A status that echoes caller text would make ``grpc-message`` as long as the input (HPACK is
quadratic: a 1 MiB ``payload_type`` can freeze a grpcio client for minutes). Every status
message is at most ``MAX_ERROR_MESSAGE_BYTES`` once percent-encoded, every echoed value is cut with
a marker and its length, log lines are capped the same way, and a list of problems says how
many it lists of how many. Checked through google's grpcio client with 1 MiB and 4 MiB inputs.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from protocol_py.bounded_text import (
    MAX_ECHOED_VALUE_CHARS,
    MAX_ERROR_MESSAGE_BYTES,
    bounded_message,
    encoded_size,
    listed,
    printable,
    quote_value,
)
from protocol_py.codec.structs import to_struct
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    CountTokensRequest,
    RenderRequest,
    StreamCompletionRequest,
    StreamEvent,
)

from .conftest import Captured, Served, acall, still_serving, user

MIB = 1024 * 1024
PROMPT_SECONDS = 30.0
"""A generous bound for "returns promptly" on a loaded 2-core machine (measured: well under
1 s; before the cap a 1 MiB value took about 2 minutes)."""


def assert_bounded(details: str) -> None:
    assert encoded_size(details) <= MAX_ERROR_MESSAGE_BYTES, len(details)


def assert_logs_bounded(logs: Captured) -> None:
    for record in logs.records:
        if record.name == "protocol_py.server":
            assert len(record.getMessage()) <= 4 * MAX_ERROR_MESSAGE_BYTES, record.getMessage()[
                :200
            ]
    assert logs.errors() == []


# -- the capping rule --------------------------------------------------------------------------


def test_quote_value_cuts_with_marker_and_length() -> None:
    assert quote_value("a" * MIB) == "'" + "a" * MAX_ECHOED_VALUE_CHARS + "…' (1048576 chars, cut)"
    assert quote_value("short") == "'short'"
    assert quote_value("a" * MAX_ECHOED_VALUE_CHARS) == repr("a" * MAX_ECHOED_VALUE_CHARS)


def test_bounded_message_fits_the_encoded_limit_for_multibyte_text() -> None:
    for text in ("x" * 5000, "é" * 100_000, "\U0001f600" * 3000, "%" * 2000):
        cut = bounded_message(text)
        assert encoded_size(cut) <= MAX_ERROR_MESSAGE_BYTES
        assert cut.endswith(f"… ({len(text)} chars, cut)")
    assert bounded_message("fits") == "fits"


def test_listed_counts_what_it_lists_and_the_total() -> None:
    items = [f"/k{i}: unknown property" for i in range(5000)]
    text = listed("invalid config", "error", items)
    match = re.match(r"invalid config: 5000 error\(s\), first (\d+) listed: (.*)$", text)
    assert match is not None, text
    shown = match.group(2).split("; ")
    assert len(shown) == int(match.group(1))
    assert shown == items[: len(shown)]
    assert encoded_size(text) <= MAX_ERROR_MESSAGE_BYTES
    assert listed("p", "error", ["a", "b"]) == "p: 2 error(s): a; b"


def test_listed_cuts_each_huge_item_and_always_names_one() -> None:
    text = listed("invalid request", "violation", ["x" * MIB] * 10)
    match = re.match(r"invalid request: 10 violation\(s\), first (\d+) listed: (.*)$", text)
    assert match is not None, text[:100]
    shown = match.group(2).split("; ")
    assert len(shown) == int(match.group(1)) >= 1
    assert all(item.endswith(f"… ({MIB} chars, cut)") for item in shown)
    assert encoded_size(text) <= MAX_ERROR_MESSAGE_BYTES
    tiny = listed("p", "error", ["y" * 1000, "z"], limit=120)
    assert tiny.startswith("p: 2 error(s), first 1 listed: yyy")
    assert encoded_size(tiny) <= 120


# -- through grpcio -----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [MIB, 4 * MIB])
async def test_render_huge_payload_type_returns_promptly_with_capped_message(
    served: Served, logs: Captured, size: int
) -> None:
    body = bytes(RenderRequest(payload_type="a" * size, payload=b"x"))
    result = await acall(served.address, "Render", body, timeout=120)
    print(f"Render payload_type of {size} chars: {result.code} in {result.seconds:.3f} s")
    assert result.code == "INVALID_ARGUMENT", result.code
    assert result.seconds < PROMPT_SECONDS
    assert result.details.startswith("payload_type: unknown payload type 'aaaa")
    assert result.details.endswith(f"…' ({size} chars, cut)")
    assert_bounded(result.details)
    assert_logs_bounded(logs)
    await still_serving(served)


@pytest.mark.parametrize("size", [MIB, 4 * MIB])
async def test_count_tokens_huge_model_id_is_capped(
    served: Served, logs: Captured, size: int
) -> None:
    body = bytes(CountTokensRequest(model_id="m" * size, messages=[user("hi")]))
    result = await acall(served.address, "CountTokens", body, timeout=120)
    print(f"CountTokens model_id of {size} chars: {result.code} in {result.seconds:.3f} s")
    assert result.code == "INVALID_ARGUMENT"
    assert result.seconds < PROMPT_SECONDS
    assert "model 'mmmm" in result.details
    assert f"…' ({size} chars, cut) is not served" in result.details
    assert_bounded(result.details)
    record = json.loads(
        next(r.getMessage() for r in logs.records if '"CountTokens"' in r.getMessage())
    )
    assert record["model"] == quote_value("m" * size)
    assert_logs_bounded(logs)
    await still_serving(served)


async def test_five_thousand_unknown_configure_keys_are_invalid_argument(
    served: Served, logs: Captured
) -> None:
    config: dict[str, Any] = {f"unknown_key_{i:05d}": 1 for i in range(5000)}
    body = bytes(ConfigureRequest(config=to_struct(config)))
    result = await acall(served.address, "Configure", body)
    assert result.code == "INVALID_ARGUMENT", result
    match = re.match(r"invalid config: 5000 error\(s\), first (\d+) listed: (.*)$", result.details)
    assert match is not None, result.details
    shown = match.group(2).split("; ")
    assert len(shown) == int(match.group(1)) > 0
    assert shown[0] == "/unknown_key_00000: unknown property (additionalProperties is false)"
    assert_bounded(result.details)
    record = next(r for r in logs.rpc_records() if r["rpc"] == "Configure")
    assert record["config_keys_total"] == 5000
    assert len(record["config_keys"]) == 32
    assert_logs_bounded(logs)
    await still_serving(served)


async def test_huge_configure_key_name_is_cut(served: Served, logs: Captured) -> None:
    body = bytes(ConfigureRequest(config=to_struct({"k" * MIB: 1})))
    result = await acall(served.address, "Configure", body, timeout=120)
    assert result.code == "INVALID_ARGUMENT"
    assert result.details.startswith("invalid config: 1 error(s): /kkkk")
    assert "chars, cut)" in result.details
    assert_bounded(result.details)
    assert_logs_bounded(logs)
    await still_serving(served)


async def test_stream_with_huge_model_id_gets_a_capped_in_band_error(
    served: Served, logs: Captured
) -> None:
    request = StreamCompletionRequest(model_id="z" * MIB, messages=[user("hi")])
    result = await acall(served.address, "StreamCompletion", bytes(request), stream=True)
    assert result.code == "OK"
    events = [StreamEvent.parse(r) for r in result.replies]
    assert len(events) == 1 and events[0].error is not None
    message = events[0].error.message
    assert message.startswith("invalid request: ")
    assert f"({MIB} chars, cut)" in message
    assert encoded_size(message) <= MAX_ERROR_MESSAGE_BYTES
    record = next(r for r in logs.rpc_records() if r["rpc"] == "StreamCompletion")
    assert record["model"] == quote_value("z" * MIB)
    assert_logs_bounded(logs)
    await still_serving(served)


def test_foreign_text_shows_every_character_python_does_not_print_escaped() -> None:
    """A vendor's error text with controls, line and paragraph separators, a bidi override, a
    zero-width space or a no-break space is shown with each escaped as ``repr`` escapes it;
    printable text, non-ASCII included, is shown as it is."""
    assert printable("a\x00b\nc\u2028d\u2029e\u202ef\u200bg\xa0h") == (
        "a\\x00b\\nc\\u2028d\\u2029e\\u202ef\\u200bg\\xa0h"
    )
    assert printable("café 東京 'quoted' \\ back") == "café 東京 'quoted' \\ back"
