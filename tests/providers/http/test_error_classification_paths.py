"""One classifier for both error paths (docs/decisions.md#d10): the same vendor error body gives the
same ErrorKind (and retryable flag) over HTTP (non-2xx status), as an in-band SSE error, and as a
bare JSON error body on a 2xx event-stream response; and every adapter (openai, anthropic,
gemini) gives the kind its HTTP error status and body name, through a stub upstream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol_py.providers.gemini.provider import GeminiProvider
from protocol_py.providers.http.base import HTTPProvider
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ...support.adapters import translate_body
from ...support.stub_upstream import Reply, StubUpstream
from ..test_providers_stub import MODEL, collect, make

ADAPTER_MODEL = {**MODEL, "gemini": "gemini-2.5-flash"}

# (vendor, natural HTTP status, error body, expected kind)
TABLE: list[tuple[str, int, dict[str, Any], ErrorKind]] = [
    (
        "openai",
        401,
        {"error": {"message": "m", "code": "invalid_api_key", "type": "invalid_request_error"}},
        ErrorKind.AUTHENTICATION,
    ),
    (
        "openai",
        401,
        {"error": {"message": "m", "code": "invalid_api_key"}},
        ErrorKind.AUTHENTICATION,
    ),
    (
        "openai",
        404,
        {"error": {"message": "m", "code": "model_not_found", "type": "invalid_request_error"}},
        ErrorKind.NOT_FOUND,
    ),
    (
        "openai",
        404,
        {"error": {"message": "model x not found", "code": "model_not_found"}},
        ErrorKind.NOT_FOUND,
    ),
    ("openai", 404, {"error": {"message": "m", "code": "DeploymentNotFound"}}, ErrorKind.NOT_FOUND),
    (
        "openai",
        403,
        {"error": {"message": "m", "code": "unsupported_country_region_territory"}},
        ErrorKind.PERMISSION_DENIED,
    ),
    (
        "openai",
        429,
        {"error": {"message": "m", "code": "insufficient_quota", "type": "insufficient_quota"}},
        ErrorKind.QUOTA_EXHAUSTED,
    ),
    (
        "openai",
        429,
        {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}},
        ErrorKind.RATE_LIMITED,
    ),
    (
        "openai",
        400,
        {"error": {"message": "m", "code": "context_length_exceeded"}},
        ErrorKind.CONTEXT_OVERFLOW,
    ),
    (
        "openai",
        400,
        {"error": {"message": "bad", "type": "invalid_request_error"}},
        ErrorKind.INVALID_REQUEST,
    ),
    (
        "anthropic",
        401,
        {"type": "error", "error": {"type": "authentication_error", "message": "m"}},
        ErrorKind.AUTHENTICATION,
    ),
    (
        "anthropic",
        404,
        {"type": "error", "error": {"type": "not_found_error", "message": "model: x"}},
        ErrorKind.NOT_FOUND,
    ),
    (
        "anthropic",
        403,
        {"type": "error", "error": {"type": "permission_error", "message": "m"}},
        ErrorKind.PERMISSION_DENIED,
    ),
    (
        "anthropic",
        529,
        {"type": "error", "error": {"type": "overloaded_error", "message": "m"}},
        ErrorKind.OVERLOADED,
    ),
    (
        "anthropic",
        429,
        {"type": "error", "error": {"type": "rate_limit_error", "message": "m"}},
        ErrorKind.RATE_LIMITED,
    ),
]
IDS = [f"{v}-{s}-{b['error'].get('code') or b['error'].get('type')}" for v, s, b, _ in TABLE]
GEMINI_HTTP: list[tuple[str, int, Any, ErrorKind]] = [
    (
        "gemini",
        400,
        {
            "error": {
                "code": 400,
                "message": "API key not valid. Please pass a valid API key.",
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                    }
                ],
            }
        },
        ErrorKind.AUTHENTICATION,
    ),
    (
        "gemini",
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": "The input token count (1200000) exceeds the "
                    "maximum number of tokens allowed (1048576).",
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        ErrorKind.CONTEXT_OVERFLOW,
    ),
    (
        "gemini",
        400,
        {
            "error": {
                "code": 400,
                "message": "User location is not supported",
                "status": "FAILED_PRECONDITION",
            }
        },
        ErrorKind.QUOTA_EXHAUSTED,
    ),
    (
        "gemini",
        429,
        {
            "error": {
                "code": 429,
                "message": "Quota exceeded, limit: 0",
                "status": "RESOURCE_EXHAUSTED",
            }
        },
        ErrorKind.QUOTA_EXHAUSTED,
    ),
    (
        "gemini",
        429,
        {
            "error": {
                "code": 429,
                "message": "quota",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [{"quotaId": "GenerateRequestsPerDayPerProject"}],
                    }
                ],
            }
        },
        ErrorKind.QUOTA_EXHAUSTED,
    ),
    (
        "gemini",
        503,
        {
            "error": {
                "code": 503,
                "message": "This model is currently experiencing high demand.",
                "status": "UNAVAILABLE",
            }
        },
        ErrorKind.OVERLOADED,
    ),
    (
        "gemini",
        504,
        {"error": {"code": 504, "message": "Deadline", "status": "DEADLINE_EXCEEDED"}},
        ErrorKind.TRANSIENT,
    ),
    (
        "gemini",
        404,
        {"error": {"code": 404, "message": "models/x is not found", "status": "NOT_FOUND"}},
        ErrorKind.NOT_FOUND,
    ),
]
"""Gemini's error bodies (google.rpc.Status, some wrapped in an array) by HTTP status."""
HTTP_ROWS = TABLE + GEMINI_HTTP
HTTP_IDS = IDS + [f"gemini-{s}-{k.name.lower()}-{i}" for i, (_, s, _, k) in enumerate(GEMINI_HTTP)]
SSE = {"content-type": "text/event-stream"}


def _only_error(events: list[StreamEvent]) -> tuple[ErrorKind, bool]:
    errors = [e.error for e in events if e.error is not None]
    assert len(errors) == 1 and events[-1].error is errors[0], events
    return errors[0].kind, errors[0].retryable


def _adapter(vendor: str, url: str) -> HTTPProvider:
    retry = RetryPolicy(max_attempts=1)
    if vendor == "gemini":
        return GeminiProvider(api_key="gemini-test-key", base_url=url, retry=retry)
    return make(vendor, url, retry=retry)


def _in_band(vendor: str, body: dict[str, Any]) -> list[StreamEvent]:
    data = json.dumps(body)
    text = f"event: error\ndata: {data}\n\n" if vendor == "anthropic" else f"data: {data}\n\n"
    return translate_body(vendor, 200, SSE, text.encode())


@pytest.mark.parametrize(("vendor", "status", "body", "expected"), TABLE, ids=IDS)
async def test_same_error_body_same_kind_over_http_in_band_and_bare_json(
    vendor: str, status: int, body: dict[str, Any], expected: ErrorKind
) -> None:
    over_http = _only_error(translate_body(vendor, status, {}, json.dumps(body).encode()))
    in_band = _only_error(_in_band(vendor, body))
    async with StubUpstream() as stub:  # a gateway's bare JSON error with an SSE content type
        stub.queue(Reply(headers=SSE, chunks=[json.dumps(body).encode()]))
        provider = make(vendor, stub.url, retry=RetryPolicy(max_attempts=1))
        try:
            bare_json = _only_error(await collect(provider, MODEL[vendor]))
        finally:
            await provider.aclose()
    assert over_http[0] == expected
    assert in_band == over_http
    assert bare_json == over_http


def test_deterministic_in_band_error_is_not_retryable() -> None:
    kind, retryable = _only_error(
        _in_band("openai", {"error": {"message": "model x not found", "code": "model_not_found"}})
    )
    assert (kind, retryable) == (ErrorKind.NOT_FOUND, False)


@pytest.mark.parametrize(("vendor", "status", "body", "expected"), HTTP_ROWS, ids=HTTP_IDS)
async def test_http_error_status_and_body_give_the_kind_through_each_adapter(
    vendor: str, status: int, body: Any, expected: ErrorKind
) -> None:
    async with StubUpstream() as stub:
        json_headers = {"content-type": "application/json"}
        stub.queue(Reply(status=status, headers=json_headers, chunks=[json.dumps(body).encode()]))
        provider = _adapter(vendor, stub.url)
        try:
            events = await collect(provider, ADAPTER_MODEL[vendor])
        finally:
            await provider.aclose()
    assert len(events) == 1 and events[0].error is not None, events
    assert (events[0].error.kind, events[0].error.http_status) == (expected, status)
