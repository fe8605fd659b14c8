"""One classifier for both error paths (docs/decisions.md#d10): the same vendor error body gives the
same ErrorKind (and retryable flag) over HTTP (non-2xx status), as an in-band SSE error, and as a
bare JSON error body on a 2xx event-stream response."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol_py.providers.http.errors import RetryPolicy
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ...support.adapters import translate_body
from ...support.stub_upstream import Reply, StubUpstream
from ..test_providers_stub import MODEL, collect, make

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
SSE = {"content-type": "text/event-stream"}


def _only_error(events: list[StreamEvent]) -> tuple[ErrorKind, bool]:
    errors = [e.error for e in events if e.error is not None]
    assert len(errors) == 1 and events[-1].error is errors[0], events
    return errors[0].kind, errors[0].retryable


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
