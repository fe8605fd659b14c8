"""Usage normalisation (docs/adapters.md "Usage normalisation"): whatever usage object a vendor
sends, the usage event an adapter emits passes the StreamAccumulator's checks and
:func:`protocol_py.rules.cost.cost`; a bad figure is dropped with a warning, the answer is
kept."""

from __future__ import annotations

import json
import logging
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from protocol_py.providers.anthropic.stream import map_anthropic_usage
from protocol_py.providers.openai.stream import map_openai_usage
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.cost import cost
from protocol_py_gen.model.v1 import Pricing, PricingTier, Stop, StopReason, StreamEvent, Usage

from ..support.adapters import kinds, lines_to_bytes, translate_body

AT = datetime(2026, 1, 1, tzinfo=UTC)
ALL_RATES = Pricing(
    currency="USD",
    tiers=[
        PricingTier(
            input_per_mtok=1.0,
            output_per_mtok=2.0,
            cache_write_per_mtok=1.25,
            cache_read_per_mtok=0.1,
            cache_write_1h_per_mtok=2.0,
            batch_input_per_mtok=0.5,
            batch_output_per_mtok=1.0,
        )
    ],
)


def assert_accepted(usage: Usage) -> None:
    """The usage passes the accumulator's order/usage checks and prices without error."""
    events = [
        StreamEvent(usage=usage),
        StreamEvent(stop=Stop(reason=StopReason.END_TURN, model_affirmed=True)),
    ]
    result = accumulate(events)
    assert result.usage is not None
    cost(ALL_RATES, usage, AT)
    assert Usage.parse(bytes(usage)) == usage  # encodes as a proto (int64 range)


# --- vendor usage objects, exact expected values ------------------------------------------


def test_anthropic_split_without_total_gives_total_as_sum() -> None:
    usage = map_anthropic_usage(
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20},
        }
    )
    assert usage.cache_write_tokens == 30
    assert usage.cache_write_1h_tokens == 20
    assert_accepted(usage)


def test_anthropic_1h_above_reported_total_raises_total_to_split_sum() -> None:
    usage = map_anthropic_usage(
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_creation_input_tokens": 300,
            "cache_creation": {"ephemeral_1h_input_tokens": 400},
        }
    )
    assert usage.cache_write_tokens == 400
    assert usage.cache_write_1h_tokens == 400
    assert_accepted(usage)


def test_anthropic_consistent_split_keeps_reported_total() -> None:
    usage = map_anthropic_usage(
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_creation_input_tokens": 300,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
        }
    )
    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens) == (300, 200)


def test_openai_negative_completion_tokens_is_dropped_with_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="protocol_py.providers"):
        usage = map_openai_usage({"prompt_tokens": 7, "completion_tokens": -1, "total_tokens": 6})
    assert usage.output_tokens == 0
    assert usage.input_tokens == 7
    assert any("usage.completion_tokens" in r.getMessage() for r in caplog.records)
    assert_accepted(usage)


def test_anthropic_stream_with_split_only_usage_finishes_with_text_and_stop() -> None:
    lines = [
        "event: message_start",
        "data: "
        + json.dumps(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "model": "m",
                    "usage": {
                        "input_tokens": 5,
                        "output_tokens": 1,
                        "cache_creation": {
                            "ephemeral_5m_input_tokens": 10,
                            "ephemeral_1h_input_tokens": 20,
                        },
                    },
                },
            }
        ),
        "",
        "event: content_block_start",
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        "",
        "event: content_block_delta",
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}',
        "",
        "event: content_block_stop",
        'data: {"type":"content_block_stop","index":0}',
        "",
        "event: message_delta",
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        '"usage":{"output_tokens":-3}}',
        "",
        "event: message_stop",
        'data: {"type":"message_stop"}',
        "",
    ]
    events = translate_body(
        "anthropic", 200, {"content-type": "text/event-stream"}, lines_to_bytes(lines)
    )
    assert "error" not in kinds(events)
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason == StopReason.END_TURN
    assert result.usage is not None
    assert result.usage.cache_write_tokens == 30
    assert result.usage.cache_write_1h_tokens == 20
    assert result.usage.output_tokens == 0  # the later -3 is dropped, not emitted
    texts = [e.text_delta.text for e in events if e.text_delta is not None]
    assert texts == ["x"]


# --- property: random malformed vendor usage always translates to an accepted Usage ------

_BAD: list[Any] = [-1, -(2**70), 1.5, float("nan"), "12", "", True, None, [], {}, 2**64, 1e300]


def _count(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.5:
        return rng.randint(0, 5000)
    if roll < 0.6:
        return float(rng.randint(0, 5000))
    return rng.choice(_BAD)


def _maybe(rng: random.Random, obj: dict[str, Any], key: str, value: Any) -> None:
    if rng.random() < 0.7:
        obj[key] = value


def _random_anthropic(rng: random.Random) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for key in (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ):
        _maybe(rng, raw, key, _count(rng))
    creation: dict[str, Any] = {}
    _maybe(rng, creation, "ephemeral_5m_input_tokens", _count(rng))
    _maybe(rng, creation, "ephemeral_1h_input_tokens", _count(rng))
    _maybe(rng, raw, "cache_creation", creation if rng.random() < 0.9 else rng.choice(_BAD))
    _maybe(rng, raw, "output_tokens_details", {"thinking_tokens": _count(rng)})
    return raw


def _random_openai(rng: random.Random) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for key in (
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_cache_hit_tokens",
        "prompt_cache_miss_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "cost_in_usd_ticks",
    ):
        if rng.random() < 0.5:
            raw[key] = _count(rng)
    pdetails: dict[str, Any] = {}
    _maybe(rng, pdetails, "cached_tokens", _count(rng))
    _maybe(rng, pdetails, "cache_write_tokens", _count(rng))
    _maybe(rng, raw, "prompt_tokens_details", pdetails if rng.random() < 0.9 else "x")
    cdetails: dict[str, Any] = {}
    _maybe(rng, cdetails, "reasoning_tokens", _count(rng))
    _maybe(rng, raw, "completion_tokens_details", cdetails)
    return raw


@pytest.mark.parametrize("seed", range(4))
def test_random_vendor_usage_always_passes_accumulator_and_pricing(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        anthropic_raw = _random_anthropic(rng)
        assert_accepted(map_anthropic_usage(anthropic_raw))
        openai_raw = _random_openai(rng)
        for convention in (None, True, False):
            assert_accepted(map_openai_usage(openai_raw, reasoning_in_completion=convention))


@pytest.mark.parametrize("seed", range(2))
def test_random_anthropic_iteration_usage_passes_through_the_stream(seed: int) -> None:
    rng = random.Random(1000 + seed)
    for _ in range(60):
        start_usage = _random_anthropic(rng)
        delta_usage: dict[str, Any] = _random_anthropic(rng)
        if rng.random() < 0.5:
            delta_usage["iterations"] = [_random_anthropic(rng) for _ in range(rng.randint(1, 3))]
        lines = [
            "event: message_start",
            "data: "
            + json.dumps(
                {"type": "message_start", "message": {"id": "m1", "usage": start_usage}},
                allow_nan=True,
            ),
            "",
            "event: message_delta",
            "data: "
            + json.dumps(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": delta_usage,
                },
                allow_nan=True,
            ),
            "",
            "event: message_stop",
            'data: {"type":"message_stop"}',
            "",
        ]
        events = translate_body(
            "anthropic", 200, {"content-type": "text/event-stream"}, lines_to_bytes(lines)
        )
        assert kinds(events)[-2:] == ["usage", "stop"], (start_usage, delta_usage)
        result = accumulate(events)
        assert result.usage is not None
        cost(ALL_RATES, result.usage, AT)


def test_openai_reasoning_above_the_completion_that_includes_it_is_dropped_with_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,  # prompt + completion = total: reasoning is inside completion
        "completion_tokens_details": {"reasoning_tokens": 9},
    }
    with caplog.at_level(logging.WARNING, logger="protocol_py.providers"):
        usage = map_openai_usage(raw)
    assert usage.output_tokens == 5
    assert usage.reasoning_tokens is None
    assert usage.reasoning_already_counted is None
    assert "reasoning_tokens" in caplog.text and "exceed" in caplog.text
    assert_accepted(usage)


def test_openai_reasoning_outside_completion_may_exceed_it() -> None:
    raw = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 24,  # prompt + completion + reasoning = total (xAI convention)
        "completion_tokens_details": {"reasoning_tokens": 9},
    }
    usage = map_openai_usage(raw)
    assert (usage.output_tokens, usage.reasoning_tokens) == (5, 9)
    assert usage.reasoning_already_counted is None
    assert_accepted(usage)


def test_anthropic_thinking_above_output_is_dropped_with_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = {"input_tokens": 3, "output_tokens": 4, "output_tokens_details": {"thinking_tokens": 7}}
    with caplog.at_level(logging.WARNING, logger="protocol_py.providers"):
        usage = map_anthropic_usage(raw)
    assert usage.output_tokens == 4
    assert usage.reasoning_tokens is None
    assert usage.reasoning_already_counted is None
    assert "thinking_tokens" in caplog.text
    assert_accepted(usage)
