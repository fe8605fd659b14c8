"""Runs testdata/conformance/accumulate.json (format: testdata/conformance/README.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import betterproto2
import pytest
from ulid import ULID

from protocol_py.codec import protojson
from protocol_py.errors import StreamOrderError
from protocol_py.rules.accumulate import StreamAccumulator, accumulate
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py_gen.content.v1 import Message
from protocol_py_gen.model.v1 import (
    ModelError,
    SafetyNotice,
    Stop,
    StreamEvent,
    StreamMetadata,
    Usage,
)

DATA = Path(__file__).resolve().parents[2] / "testdata" / "conformance"
VECTORS = json.loads((DATA / "accumulate.json").read_text(encoding="utf-8"))["vectors"]
IDS = [v["name"] for v in VECTORS]


def _events(vector: dict[str, Any]) -> list[StreamEvent]:
    return [protojson.decode_or_raise(StreamEvent, e) for e in vector["events"]]


def _canonical(cls: type[betterproto2.Message], data: Any) -> Any:
    """Expected proto3 JSON re-encoded canonically (strict decode, then protojson.encode)."""
    return protojson.encode(protojson.decode_or_raise(cls, data))


_TYPES: dict[str, Callable[[Any], Any]] = {
    "message": lambda d: _canonical(Message, d),
    "usage": lambda d: _canonical(Usage, d),
    "stop": lambda d: _canonical(Stop, d),
    "error": lambda d: _canonical(ModelError, d),
    "metadata": lambda d: _canonical(StreamMetadata, d),
    "safety_notices": lambda d: [_canonical(SafetyNotice, n) for n in d],
}


def _normalize(key: str, value: Any) -> Any:
    """Expected proto values are compared as messages (defaults omitted, numbers as numbers)."""
    if value is None or key not in _TYPES:
        return value
    return _TYPES[key](value)


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_accumulate_vector(vector: dict[str, Any]) -> None:
    events = _events(vector)
    if "expected_violation" in vector:
        expected = vector["expected_violation"]
        with pytest.raises(StreamOrderError) as info:
            accumulate(events)
        assert (info.value.index, info.value.rule) == (expected["index"], expected["rule"])
        # The bare order checker agrees with the accumulator.
        checker = StreamOrderChecker()
        with pytest.raises(StreamOrderError) as again:
            for event in events:
                checker.check(event)
        assert (again.value.index, again.value.rule) == (expected["index"], expected["rule"])
        return
    result = accumulate(events)
    actual = result.to_json()
    message = actual.pop("message")
    ULID.from_str(message.pop("id"))
    for key, value in vector["expected"].items():
        got = message if key == "message" else actual[key]
        assert got == _normalize(key, value), key
    # Every event of a valid stream passes the bare order checker too.
    checker = StreamOrderChecker()
    for event in events:
        checker.check(event)
    assert checker.terminated is result.complete


@pytest.mark.parametrize("vector", [v for v in VECTORS if "expected" in v], ids=lambda v: v["name"])
def test_incremental_feed_matches_batch(vector: dict[str, Any]) -> None:
    """Feeding one event at a time and asking for the result midway changes nothing."""
    events = _events(vector)
    acc = StreamAccumulator(message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")
    for event in events:
        acc.result()
        acc.feed(event)
    once = accumulate(events, message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV").to_json()
    assert acc.result().to_json() == once
