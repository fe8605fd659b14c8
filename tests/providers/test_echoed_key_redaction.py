"""An API key a vendor echoes back (in a 401 body, a mid-stream error, a CountTokens or discovery
error, in another letter case) is redacted from every error and log record, and an unexpected
exception never carries it out of the adapter."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from protocol_py.provider import ProviderError, ProviderStartError
from protocol_py.providers.http.errors import (
    redact,
    secret_values,
)
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    ErrorKind,
)

from ..support.adapters import kinds
from ..support.stub_upstream import Reply, StubUpstream
from ._vendor_calls import KEY, MODEL, SSE, collect, json_reply, make, sse_body, user, value

_ECHO_401 = {
    "openai": {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at ...",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    },
    "deepseek": {
        "error": {
            "message": f"Authentication Fails, Your api key: {KEY} is invalid",
            "type": "authentication_error",
        }
    },
    "anthropic": {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    },
}


@pytest.mark.parametrize("vendor", ["openai", "deepseek", "anthropic"])
async def test_api_key_echoed_by_a_401_is_redacted_from_the_error_and_logs(
    vendor: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with StubUpstream() as stub:
        stub.queue(json_reply(401, _ECHO_401[vendor]))
        provider = make(vendor, stub.url)
        try:
            events = await collect(provider, MODEL[vendor])
        finally:
            await provider.aclose()
    assert kinds(events) == ["error"]
    err = value(events[0])
    assert err.kind == ErrorKind.AUTHENTICATION
    assert KEY not in err.message and "<redacted>" in err.message
    assert KEY not in bytes(err).decode("utf-8", "replace")
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    "line",
    [
        'data: {"error":{"message":"bad key %s","type":"invalid_request_error"}}',
        'event: error\ndata: {"error":{"message":"key %s rejected"}}',
    ],
)
async def test_api_key_echoed_in_a_midstream_error_is_redacted(line: str) -> None:
    chunk = 'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}'
    body = sse_body(chunk, line % KEY)
    async with StubUpstream() as stub:
        stub.queue(Reply(headers=SSE, chunks=[body]))
        provider = make("openai", stub.url)
        try:
            events = await collect(provider, MODEL["openai"])
        finally:
            await provider.aclose()
    assert kinds(events)[-2:] == ["text_delta", "error"]
    assert KEY not in value(events[-1]).message


async def test_api_key_echoed_by_anthropic_count_tokens_401_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with StubUpstream() as stub:
        stub.queue(json_reply(401, _ECHO_401["anthropic"]))
        provider = make("anthropic", stub.url)
        try:
            with pytest.raises(ProviderError) as info:
                await provider.count_tokens(
                    CountTokensRequest(model_id=MODEL["anthropic"], messages=[user("hi")])
                )
        finally:
            await provider.aclose()
    assert info.value.error.kind == ErrorKind.AUTHENTICATION
    for text in (info.value.error.message, str(info.value), repr(info.value.args)):
        assert KEY not in text
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert KEY not in caplog.text


def test_redact_removes_the_key_and_credential_header_values() -> None:
    secrets = secret_values("k3y-Value", {"Authorization": "Bearer tok-123", "x-api-key": "xk"})
    assert set(secrets) >= {"k3y-Value", "Bearer tok-123", "tok-123", "xk"}
    text = "a k3y-Value b Bearer tok-123 c tok-123 d sk-abcdefgh1234 e"
    assert redact(text, secrets) == "a <redacted> b <redacted> c <redacted> d <redacted> e"


async def test_an_unexpected_exception_never_escapes_with_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = OpenAIProvider(api_key=KEY, base_url="http://127.0.0.1:9")

    def boom(*_: object) -> dict[str, Any]:
        raise RuntimeError(f"exploded while holding {KEY}")

    provider.build_body = boom  # type: ignore[method-assign]
    try:
        with pytest.raises(ProviderError) as info:
            await collect(provider, MODEL["openai"])
    finally:
        await provider.aclose()
    assert info.value.error.kind == ErrorKind.PERMANENT
    assert KEY not in str(info.value) and KEY not in caplog.text
    assert "RuntimeError" in caplog.text


def test_echoed_key_in_another_letter_case_is_redacted() -> None:
    assert redact("key topsecret-qwerty-0123456789 bad", [KEY]) == "key <redacted> bad"


async def test_api_key_echoed_to_discover_is_redacted() -> None:
    async with StubUpstream() as stub:
        stub.queue(json_reply(401, _ECHO_401["openai"]))
        provider = OpenAIProvider(api_key=KEY, base_url=stub.url, discover=True)
        try:
            with pytest.raises(ProviderStartError) as info:
                await provider.start()
        finally:
            await provider.aclose()
    assert "<redacted>" in str(info.value) and KEY not in str(info.value)
