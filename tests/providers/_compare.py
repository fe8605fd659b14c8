"""Compare translated StreamEvents with a transcript's ``expected_events`` (fixtures README)."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import betterproto2

from protocol_py.providers.http.errors import parse_go_duration, parse_rfc3339
from protocol_py_gen.model.v1 import RateLimitKind, RateLimitSnapshot, StreamEvent

_RESOURCE = {
    "requests": RateLimitKind.REQUESTS,
    "tokens": RateLimitKind.TOKENS,
    "input_tokens": RateLimitKind.INPUT_TOKENS,
    "output_tokens": RateLimitKind.OUTPUT_TOKENS,
}


def _rate_limit(actual: RateLimitSnapshot, expected: dict[str, Any], where: str) -> None:
    assert actual.kind == _RESOURCE[expected["resource"]], where
    assert actual.limit == expected.get("limit"), where
    assert actual.remaining == expected.get("remaining"), where
    reset = expected.get("reset")
    if reset is None:
        assert actual.resets_at is None and actual.resets_after is None, where
        return
    when = parse_rfc3339(reset)
    if when is not None:
        assert actual.resets_at == when.astimezone(UTC), where
        assert actual.resets_after is None, where
    else:
        secs = parse_go_duration(reset)
        assert secs is not None, where
        assert actual.resets_after == timedelta(seconds=secs), where
        assert actual.resets_at is None, where


def assert_events(actual: list[StreamEvent], expected: list[dict[str, Any]]) -> None:
    """Assert event-by-event equality on every normative and indicative field (README)."""
    got = [betterproto2.which_one_of(e, "event")[0] for e in actual]
    want = [next(iter(e)) for e in expected]
    assert got == want
    for i, (event, exp_obj) in enumerate(zip(actual, expected, strict=True)):
        case, value = betterproto2.which_one_of(event, "event")
        exp = exp_obj[case]
        where = f"event {i} ({case})"
        if case in ("text_delta", "thinking_delta"):
            assert value.text == exp["text"], where
        elif case == "thinking_signature":
            assert value.signature == exp["signature"].encode("utf-8"), where
        elif case == "redacted_thinking":
            assert value.data == exp["data"].encode("utf-8"), where
        elif case == "tool_call_start":
            assert (value.id, value.name) == (exp["id"], exp["name"]), where
        elif case == "tool_call_delta":
            assert (value.id, value.arguments_fragment) == (
                exp["id"],
                exp["arguments_fragment"],
            ), where
        elif case == "tool_call_done":
            assert value.id == exp["id"], where
        elif case == "stream_start":
            assert value.provider_request_id == exp["provider_request_id"], where
        elif case == "metadata":
            for key in ("actual_model", "system_fingerprint", "service_tier"):
                assert getattr(value, key) == exp.get(key), f"{where}.{key}"
            assert list(value.rate_limits) == [], where
        elif case == "usage":
            for key in ("input_tokens", "output_tokens"):
                assert getattr(value, key) == exp[key], f"{where}.{key}"
            for key in (
                "cache_read_tokens",
                "cache_write_tokens",
                "reasoning_tokens",
                "reasoning_already_counted",
            ):
                assert getattr(value, key) == exp.get(key), f"{where}.{key}"
            assert value.vendor_total_tokens == exp.get("vendor_total_tokens"), where
            if "cache_write_1h_tokens" in exp:
                assert value.cache_write_1h_tokens == exp["cache_write_1h_tokens"], where
            cost = exp.get("vendor_cost")
            if cost is None:
                assert value.vendor_cost is None, where
            else:
                assert value.vendor_cost is not None, where
                assert (value.vendor_cost.amount, value.vendor_cost.unit) == (
                    cost["amount"],
                    cost["unit"],
                ), where
            limits = exp.get("rate_limits", [])
            assert len(value.rate_limits) == len(limits), where
            for snap, exp_snap in zip(value.rate_limits, limits, strict=True):
                _rate_limit(snap, exp_snap, where)
        elif case == "stop":
            assert value.reason.name.lower() == exp["reason"], where
            assert value.matched_stop_sequence == exp.get("matched_stop_sequence"), where
            for key in ("vendor_reason", "model_affirmed"):
                if key in exp:
                    assert getattr(value, key) == exp[key], f"{where}.{key}"
        elif case == "error":
            assert value.kind.name.lower() == exp["kind"], where
            if "http_status" in exp:
                assert value.http_status == exp["http_status"], where
            code = exp.get("vendor_code", exp.get("provider_code"))
            if code is not None:
                assert value.vendor_code == code, where
            if "message" in exp:
                assert value.message == exp["message"], where
            if "retry_after_ms" in exp:
                assert value.retry_after == timedelta(milliseconds=exp["retry_after_ms"]), where
            if "provider_request_id" in exp:
                assert value.provider_request_id == exp["provider_request_id"], where
        else:  # pragma: no cover - a new event case needs a comparison here
            raise AssertionError(f"no comparison for {case}")
