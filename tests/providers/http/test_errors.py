"""Retry hints (C11), HTTP error classification (docs/decisions.md#d10) and rate-limit header
parsing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from protocol_py.providers.http.errors import (
    MAX_DURATION_S,
    RetryPolicy,
    anthropic_rate_limits,
    anthropic_reset_hint,
    duration_from_seconds,
    error_from_http,
    openai_rate_limits,
    parse_go_duration,
    parse_retry_after,
    redact,
)
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    RateLimitKind,
)

from ...support.adapters import load_case

NOW = datetime(2026, 10, 21, 7, 28, 0, tzinfo=UTC)


def _resolve(value: str) -> str:
    """Turn the C11 placeholders into concrete header values relative to NOW."""
    if value.startswith("<IMF-fixdate for now+3"):
        return format_datetime(NOW + timedelta(seconds=3), usegmt=True)
    if value.startswith("<IMF-fixdate 1 hour in the past"):
        return format_datetime(NOW - timedelta(hours=1), usegmt=True)
    if value.startswith("<RFC 3339 now+2"):
        return (NOW + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def test_rows_parse_to_expected_hints() -> None:
    case = load_case("C11")
    # hint per row in seconds (None: no hint, backoff), from expected.gap_between_attempts
    expected = [0.25, 2.0, 1.5, 3.0, None, None, None, None, 3600.0, 2.0, 2.0]
    rows = case["input"]["rows"]
    assert len(rows) == len(expected) == len(case["expected"]["gap_between_attempts"])
    for row, want in zip(rows, expected, strict=True):
        headers = {k: _resolve(v) for k, v in row["headers"].items()}
        hint = parse_retry_after(headers, now=NOW)
        if hint is None and row.get("vendor") == "anthropic":
            hint = anthropic_reset_hint(headers, now=NOW)
        if want is None:
            assert hint is None, row
        else:
            assert hint == pytest.approx(want), row


def test_policy_waits_or_gives_up() -> None:
    policy = RetryPolicy()
    for hint, expect in ((0.25, 0.25), (3600.0, None)):
        headers = {"retry-after": str(hint)}
        err = error_from_http(429, b"{}", headers, request_id_header="x-request-id", now=NOW)
        assert policy.delay(1, err) == expect
    err = error_from_http(429, b"{}", {"retry-after": "nan"}, request_id_header="x-request-id")
    assert err.retry_after is None
    assert policy.delay(1, err) == 0.5  # first backoff step
    assert policy.delay(2, err) == 1.0
    assert policy.delay(3, err) is None  # max_attempts reached
    big = error_from_http(429, b"{}", {"retry-after": "3600"}, request_id_header="x-request-id")
    assert big.kind == ErrorKind.RATE_LIMITED and big.retryable
    assert big.retry_after == timedelta(seconds=3600)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (429, {"error": {"message": "quota", "type": "insufficient_quota"}}, "QUOTA_EXHAUSTED"),
        (429, {"error": {"message": "x", "code": "insufficient_quota"}}, "QUOTA_EXHAUSTED"),
        (429, {"error": {"message": "slow down", "code": "rate_limit_exceeded"}}, "RATE_LIMITED"),
        (402, {"error": {"message": "pay"}}, "QUOTA_EXHAUSTED"),
        (
            400,
            {"error": {"message": "This model's maximum context length is 128000 tokens"}},
            "CONTEXT_OVERFLOW",
        ),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
            "CONTEXT_OVERFLOW",
        ),
        (400, {"error": {"message": "bad", "code": "context_length_exceeded"}}, "CONTEXT_OVERFLOW"),
        (400, {"error": {"message": "temperature out of range"}}, "INVALID_REQUEST"),
        (422, {"error": {"message": "bad"}}, "INVALID_REQUEST"),
        (
            401,
            {"error": {"message": "Incorrect API key provided: sk-abcdef123456"}},
            "AUTHENTICATION",
        ),
        (403, {"error": {"message": "no"}}, "PERMISSION_DENIED"),
        (404, {"error": {"message": "no model"}}, "NOT_FOUND"),
        (
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "OVERLOADED",
        ),
        (503, {"error": {"message": "Server overloaded"}}, "OVERLOADED"),
        (503, {"error": {"message": "x", "type": "insufficient_system_resource"}}, "OVERLOADED"),
        (500, {"error": {"message": "oops"}}, "TRANSIENT"),
        (502, "not json", "TRANSIENT"),
        (418, {}, "PERMANENT"),
    ],
)
def test_http_status_mapping(status: int, body: object, kind: str) -> None:
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    err = error_from_http(status, raw, {"x-request-id": "r1"}, request_id_header="x-request-id")
    assert err.kind == ErrorKind[kind]
    assert err.http_status == status
    assert err.retryable is (kind in ("RATE_LIMITED", "OVERLOADED", "TRANSIENT"))
    assert err.provider_request_id == "r1"
    assert "sk-abcdef" not in err.message
    assert err.message


def test_go_durations() -> None:
    assert parse_go_duration("12ms") == pytest.approx(0.012)
    assert parse_go_duration("3.048s") == pytest.approx(3.048)
    assert parse_go_duration("6m0s") == pytest.approx(360)
    assert parse_go_duration("1h2m3s") == pytest.approx(3723)
    assert parse_go_duration("soon") is None
    assert parse_go_duration("") is None


def test_rate_limit_headers_only_what_was_sent() -> None:
    snaps = openai_rate_limits(
        {"X-RateLimit-Remaining-Tokens": "5", "x-ratelimit-reset-tokens": "bad"}
    )
    assert len(snaps) == 1
    assert (snaps[0].kind, snaps[0].limit, snaps[0].remaining) == (RateLimitKind.TOKENS, None, 5)
    assert snaps[0].resets_after is None and snaps[0].resets_at is None
    snaps = anthropic_rate_limits(
        {"anthropic-ratelimit-output-tokens-reset": "2026-05-14T09:50:00Z"}
    )
    assert [(s.kind, s.limit, s.remaining) for s in snaps] == [
        (RateLimitKind.OUTPUT_TOKENS, None, None)
    ]
    assert snaps[0].resets_at == datetime(2026, 5, 14, 9, 50, tzinfo=UTC)
    assert openai_rate_limits({}) == [] and anthropic_rate_limits({}) == []


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "99999999999999999999"}, float(MAX_DURATION_S)),
        ({"retry-after-ms": "1" + "0" * 30}, float(MAX_DURATION_S)),
        ({"retry-after": "9" * 400}, float(MAX_DURATION_S)),
        ({"retry-after": "1e200"}, None),
        ({"retry-after-ms": "1e15"}, None),
        ({"retry-after": "1_0"}, None),
        ({"retry-after-ms": "2_500"}, None),
        ({"retry-after": "+2"}, None),
        ({"retry-after": "0x10"}, None),
        ({"retry-after": "\uff11\uff10"}, None),  # full-width digits are not HTTP DIGITs
        ({"retry-after": " 2 "}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "1_0"}, 0.25),
        ({"retry-after-ms": "1_0", "retry-after": "3"}, 3.0),
    ],
)
def test_retry_after_follows_the_http_number_grammar_and_duration_range(
    headers: dict[str, str], expected: float | None
) -> None:
    assert parse_retry_after(headers) == expected


@pytest.mark.parametrize("raw", ["99999999999999999999", "1e200", "1" + "0" * 40])
def test_huge_retry_after_is_rate_limited_not_retried_and_serializable(raw: str) -> None:
    err = error_from_http(
        429, b'{"error":{"message":"slow down"}}', {"retry-after": raw}, request_id_header="x"
    )
    assert (err.kind, err.retryable) == (ErrorKind.RATE_LIMITED, True)
    if err.retry_after is not None:
        assert err.retry_after.total_seconds() <= MAX_DURATION_S
        assert RetryPolicy().delay(1, err) is None  # not waited for
    decoded = ModelError.parse(bytes(err))
    assert decoded.kind == ErrorKind.RATE_LIMITED


def test_duration_from_seconds_clamps_to_the_protobuf_range() -> None:
    assert duration_from_seconds(1e300) == timedelta(seconds=MAX_DURATION_S)
    assert duration_from_seconds(float("inf")) == timedelta(seconds=MAX_DURATION_S)
    assert duration_from_seconds(-1e300) == timedelta(seconds=-MAX_DURATION_S)
    assert duration_from_seconds(float("nan")) == timedelta(0)
    assert duration_from_seconds(2.5) == timedelta(seconds=2.5)


def test_rate_limit_headers_take_only_plain_digits_and_clamp_resets() -> None:
    snaps = openai_rate_limits(
        {
            "x-ratelimit-limit-requests": "1_000",
            "x-ratelimit-remaining-requests": "99999999999999999999999",
            "x-ratelimit-reset-requests": "99999999999999h",
            "x-ratelimit-limit-tokens": "500",
        }
    )
    assert snaps[0].limit is None and snaps[0].remaining is None
    assert snaps[0].resets_after == timedelta(seconds=MAX_DURATION_S)
    assert snaps[1].limit == 500


_ANTHROPIC_400 = "invalid_request_error"


@pytest.mark.parametrize(
    ("status", "vtype", "message", "expected"),
    [
        (400, _ANTHROPIC_400, "tools: Number of tools exceeds the maximum of 128", "INVALID"),
        (
            400,
            _ANTHROPIC_400,
            "max_tokens: 100000 exceeds the maximum allowed value of 64000 for this model",
            "INVALID",
        ),
        (400, _ANTHROPIC_400, "Image exceeds the maximum size of 5 MB", "INVALID"),
        (400, _ANTHROPIC_400, "stop: too many stop sequences; exceeds the maximum of 4", "INVALID"),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
            "INVALID",
        ),
        (400, None, "string too long. Expected a string with maximum length 1048576", "INVALID"),
        (400, _ANTHROPIC_400, "prompt is too long: 210000 tokens > 200000 maximum", "OVERFLOW"),
        (
            400,
            _ANTHROPIC_400,
            "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000",
            "OVERFLOW",
        ),
        (400, None, "This model's maximum context length is 4096 tokens.", "OVERFLOW"),
        (400, None, "This model's maximum prompt length is 131072 but got 140000", "OVERFLOW"),
        (400, None, "Input tokens exceed the configured limit of 272000 tokens.", "OVERFLOW"),
        (400, None, "the input length exceeds the context length", "OVERFLOW"),
        (
            400,
            None,
            "The input token count (1200000) exceeds the maximum number of tokens allowed",
            "OVERFLOW",
        ),
        (400, None, "Requested 9000 tokens which exceeds the model's context window", "OVERFLOW"),
    ],
)
def test_context_overflow_only_when_the_prompt_did_not_fit(
    status: int, vtype: str | None, message: str, expected: str
) -> None:
    err: dict[str, Any] = {"message": message}
    if vtype:
        err["type"] = vtype
    body = json.dumps({"type": "error", "error": err}).encode()
    got = error_from_http(status, body, {}, request_id_header="request-id", anthropic=True)
    want = ErrorKind.CONTEXT_OVERFLOW if expected == "OVERFLOW" else ErrorKind.INVALID_REQUEST
    assert got.kind == want, message


def test_context_length_exceeded_code_is_overflow_whatever_the_message() -> None:
    body = b'{"error":{"message":"Please reduce the length.","code":"context_length_exceeded"}}'
    got = error_from_http(400, body, {}, request_id_header="x-request-id")
    assert got.kind == ErrorKind.CONTEXT_OVERFLOW


def test_redact_matches_secrets_literally_never_as_patterns() -> None:
    # regular-expression syntax in a secret is plain text: only its literal occurrence goes
    assert redact("a.b(c and aXb(c and A.B(C", ["a.b(c"]) == "<redacted> and aXb(c and <redacted>"
    # the longer secret wins over a shorter one inside it; overlapping occurrences merge
    assert redact("key=abcdef1234 and abcd", ["abcd", "abcdef1234"]) == (
        "key=<redacted> and <redacted>"
    )
    assert redact("xaaaaay", ["aaa"]) == "x<redacted>aay"
    # a large secret set on a long text stays linear (no alternation compiled from them)
    secrets = [f"secret-value-{i:04d}-padding" for i in range(256)]
    text = ("ordinary text " * 10_000) + secrets[17]
    assert redact(text, secrets).endswith("ordinary text <redacted>")
