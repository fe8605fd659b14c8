"""Secrets that reach no event and no log record, each pinned.

* an upstream that echoes the Authorization header in ``x-request-id`` (or any other
  vendor-supplied string that reaches an event: metadata, error codes, safety notices, stop
  reasons) never puts the key in an event;
* httpcore's DEBUG records (response headers) never show the key: logging at DEBUG for every
  logger, everything captured;
* the built-in reference provider never echoes a ``base_url``'s credentials in its metadata;
* a 401 echo is replaced whole, scheme included: ``<redacted>``, never ``Bearer <redacted>``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import betterproto2
import pytest

from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.errors import redact
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ..support.adapters import served_client
from ..support.stub_upstream import Reply, StubUpstream
from .test_providers_stub import MODEL, request

KEY = "GW-KEY-4c1d9a7e22b04f0e"
"""Not vendor-shaped (no ``sk-`` prefix): only the literal rule can catch it."""


def _sse(*chunks: dict[str, Any]) -> bytes:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n"


def _leaks(events: list[StreamEvent]) -> list[str]:
    """The events whose wire bytes or field values contain the key (any letter case)."""
    found = []
    for event in events:
        text = json.dumps(event.to_dict()).lower()
        if KEY.lower() in text or KEY.lower().encode() in bytes(event).lower():
            found.append(betterproto2.which_one_of(event, "event")[0])
    return found


ECHOING_STREAM = _sse(
    {
        "id": f"chatcmpl-{KEY}",
        "model": f"model-for-{KEY}",
        "system_fingerprint": f"fp_{KEY}",
        "service_tier": KEY,
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
    },
    {
        "id": "c",
        "moderation": {
            "output": {
                "model": KEY,
                "results": [{"flagged": True, "categories": {KEY: True}}],
            }
        },
        "choices": [{"index": 0, "delta": {}, "finish_reason": f"weird-{KEY}"}],
    },
)


async def test_request_id_echoing_authorization_never_reaches_stream_start() -> None:
    async with StubUpstream() as stub:
        headers = {"content-type": "text/event-stream", "x-request-id": f"Bearer {KEY}"}
        stub.queue(Reply(headers=headers, chunks=[ECHOING_STREAM]))
        stub.queue(Reply(headers=headers, chunks=[ECHOING_STREAM]))
        provider = OpenAIProvider(api_key=KEY, base_url=stub.url)
        direct = [e async for e in provider.stream(request(MODEL["openai"]), CallContext())]
        async for client in served_client(provider):
            served = [e async for e in client.stream(request(MODEL["openai"]), timeout=10)]
        await provider.aclose()
    for events in (direct, served):
        assert events[0].stream_start is not None
        assert events[0].stream_start.provider_request_id == "<redacted>"  # scheme included
        assert _leaks(events) == []
        kinds = [betterproto2.which_one_of(e, "event")[0] for e in events]
        assert kinds == ["stream_start", "metadata", "text_delta", "safety_notice", "stop"]
        meta = events[1].metadata
        assert meta is not None
        assert (meta.actual_model, meta.system_fingerprint, meta.service_tier) == (
            "model-for-<redacted>",
            "fp_<redacted>",
            "<redacted>",
        )
        notice = events[3].safety_notice
        assert notice is not None and notice.attrs["categories"] == "<redacted>"
        assert events[-1].stop is not None and events[-1].stop.vendor_reason == "weird-<redacted>"


async def test_anthropic_request_id_and_error_code_echoing_the_key_are_redacted() -> None:
    body = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"model":"claude-x","usage":'
        b'{"input_tokens":3,"output_tokens":1}}}\n\n'
        b"event: error\n"
        b'data: {"type":"error","error":{"type":"'
        + KEY.encode()
        + b'","message":"bad key '
        + KEY.encode()
        + b'"}}\n\n'
    )
    async with StubUpstream() as stub:
        headers = {"content-type": "text/event-stream", "request-id": KEY.upper()}
        stub.queue(Reply(headers=headers, chunks=[body]))
        provider = AnthropicProvider(api_key=KEY, base_url=stub.url)
        events = [e async for e in provider.stream(request(MODEL["anthropic"]), CallContext())]
        await provider.aclose()
    assert [betterproto2.which_one_of(e, "event")[0] for e in events] == [
        "stream_start",
        "metadata",
        "usage",
        "error",
    ]
    assert _leaks(events) == []
    error = events[-1].error
    assert error is not None
    assert (error.message, error.vendor_code, error.provider_request_id) == (
        "bad key <redacted>",
        "<redacted>",
        "<redacted>",
    )


@pytest.mark.parametrize(
    ("echo", "expected"),
    [
        (f"Incorrect API key provided: Bearer {KEY}", "Incorrect API key provided: <redacted>"),
        (f"header was 'bearer  {KEY}'", "header was '<redacted>'"),  # case and spacing differ
        (f"Authorization: Bearer {KEY.lower()}.", "Authorization: <redacted>."),
        (
            "Bearer sk-proj-ABCDEF1234567890 is not valid",  # a key-shaped value, not configured
            "<redacted> is not valid",
        ),
    ],
)
async def test_401_echo_replaces_the_whole_header_value_scheme_included(
    echo: str, expected: str
) -> None:
    body = json.dumps({"error": {"message": echo, "code": "invalid_api_key"}}).encode()
    async with StubUpstream() as stub:
        stub.queue(Reply(status=401, headers={"content-type": "application/json"}, chunks=[body]))
        provider = OpenAIProvider(api_key=KEY, base_url=stub.url)
        events = [e async for e in provider.stream(request(MODEL["openai"]), CallContext())]
        await provider.aclose()
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.AUTHENTICATION
    assert error.message == expected
    assert "bearer" not in error.message.lower()


def test_redact_removes_the_scheme_with_the_value_in_every_form() -> None:
    secrets = [f"Bearer {KEY}", KEY]
    assert redact(f"got Bearer {KEY}", secrets) == "got <redacted>"
    assert redact(f"got Basic {KEY}", secrets) == "got <redacted>"
    assert redact(f"got token\t{KEY}", secrets) == "got <redacted>"
    assert redact(f"got {KEY} alone", secrets) == "got <redacted> alone"
    assert redact("a bearer of good news", secrets) == "a bearer of good news"


async def test_key_never_in_any_log_record_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # the root logger: every logger's records, every level
    for name in ("httpx", "httpcore", "grpclib", "hpack", "h2", "protocol_py", "asyncio"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    echo = json.dumps({"error": {"message": f"bad key Bearer {KEY}", "code": "invalid_api_key"}})
    try:
        async with StubUpstream() as stub:
            headers = {
                "content-type": "text/event-stream",
                "x-request-id": f"Bearer {KEY}",
                "x-echo-authorization": f"Bearer {KEY}",
            }
            stub.queue(Reply(headers=headers, chunks=[ECHOING_STREAM]))
            stub.queue(
                Reply(
                    status=401,
                    headers={"content-type": "application/json", "x-request-id": KEY},
                    chunks=[echo.encode()],
                )
            )
            provider = OpenAIProvider(api_key=KEY, base_url=stub.url)
            async for client in served_client(provider):
                ok = [e async for e in client.stream(request(MODEL["openai"]), timeout=10)]
                failed = [e async for e in client.stream(request(MODEL["openai"]), timeout=10)]
            await provider.aclose()
    finally:
        for name in ("httpx", "httpcore", "grpclib", "hpack", "h2", "protocol_py", "asyncio"):
            logging.getLogger(name).setLevel(logging.NOTSET)
    assert ok[-1].stop is not None
    assert failed[-1].error is not None and failed[-1].error.kind == ErrorKind.AUTHENTICATION
    # the path under test ran: httpcore logged the response headers, redacted
    headers_logged = [
        r for r in caplog.records if "receive_response_headers.complete" in r.getMessage()
    ]
    assert headers_logged and all("<redacted>" in r.getMessage() for r in headers_logged)
    assert KEY.lower() not in caplog.text.lower()
    for record in caplog.records:
        assert KEY.lower() not in record.getMessage().lower(), record.name


async def test_reference_provider_never_echoes_base_url_credentials() -> None:
    provider = ReferenceProvider()
    await provider.configure(
        {"base_url": "https://operator:S3CRET-PASS@gw.example/v1?api_key=S3CRET-Q&x=1"}
    )
    model = provider.capabilities().models[0].id
    events = [e async for e in provider.stream(request(model), CallContext())]
    meta = next(e.metadata for e in events if e.metadata is not None)
    assert meta.attrs == {"base_url": "https://***@gw.example/v1?api_key=***&x=***"}
    assert all(b"S3CRET" not in bytes(e) for e in events)


async def test_the_secrets_follow_a_new_key_base_url_or_auth_header() -> None:
    """The secrets are worked out once per key, base URL and authentication headers: a
    Configure that changes the key or the base URL, or a token that changes the headers,
    gives the new secrets (and no longer the old ones) on the next call."""
    provider = OpenAIProvider(api_key="sk-first-key-0001", base_url="http://127.0.0.1:9/v1")
    assert "sk-first-key-0001" in provider.secrets()
    assert provider.secrets() == provider.secrets()
    await provider.configure(
        {"api_key": "sk-second-key-0002", "base_url": "http://127.0.0.1:9/v1?token=t-in-url-123"}
    )
    found = provider.secrets()
    assert "sk-second-key-0002" in found and "t-in-url-123" in found
    assert not any("sk-first-key-0001" in secret for secret in found)

    class Rotating(OpenAIProvider):
        token = "tok-one-aaaaaaaa"

        def auth_headers(self) -> dict[str, str]:
            return {"authorization": f"Bearer {self.token}"}

    rotating = Rotating(api_key="sk-k", base_url="http://127.0.0.1:9/v1")
    assert "tok-one-aaaaaaaa" in rotating.secrets()
    rotating.token = "tok-two-bbbbbbbb"
    assert "tok-two-bbbbbbbb" in rotating.secrets()
    assert "tok-one-aaaaaaaa" not in rotating.secrets()
    await provider.aclose()
    await rotating.aclose()


async def test_a_key_configured_during_the_retry_wait_is_redacted_from_the_echo() -> None:
    """Configure sets a new key while the call waits to retry a 503; the retry goes out with
    it and the upstream echoes it in its 401: the error carries neither key."""
    new_key = "GW-KEY-second-222222cccc"
    echo = json.dumps(
        {"error": {"message": f"Incorrect API key provided: Bearer {new_key}", "code": new_key}}
    ).encode()
    async with StubUpstream() as stub:
        stub.queue(
            Reply(status=503, headers={"retry-after-ms": "300"}, chunks=[b"{}"]),
            Reply(
                status=401,
                headers={"content-type": "application/json", "x-request-id": new_key},
                chunks=[echo],
            ),
        )
        provider = OpenAIProvider(api_key=KEY, base_url=stub.url)
        try:

            async def run() -> list[StreamEvent]:
                return [e async for e in provider.stream(request(MODEL["openai"]), CallContext())]

            call = asyncio.ensure_future(run())
            deadline = time.monotonic() + 10
            while not stub.seen and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            assert len(stub.seen) == 1  # the first attempt, answered 503: the call waits
            await provider.configure({"api_key": new_key})
            events = await call
        finally:
            await provider.aclose()
    assert [s.headers["authorization"] for s in stub.seen] == [f"Bearer {KEY}", f"Bearer {new_key}"]
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.AUTHENTICATION
    text = json.dumps([e.to_dict() for e in events])
    assert new_key not in text and KEY not in text
    assert "<redacted>" in error.message
