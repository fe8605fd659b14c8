"""Base URLs (docs/adapters.md "Base URL"): parsed once, joined path-before-query, rejected when
unusable (CLI exit 2, Configure INVALID_ARGUMENT), a misconfigured URL is PERMANENT, and no log
line shows the URL's userinfo or query values."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from protocol_py import cli
from protocol_py.providers import provider_class
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.base import HTTPProvider, request_failure
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.http.url import (
    RedactURLFilter,
    join_url,
    parse_base_url,
    parsed_url,
    redact_text,
    redact_url,
    safe_location,
    url_secrets,
)
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ...support.stub_upstream import Reply, StubUpstream
from ..test_providers_stub import request

OPENAI_BODY = (
    b'data: {"id":"c1","model":"gpt-6-sol","choices":[{"index":0,"delta":{"content":"hi"},'
    b'"finish_reason":null}]}\n\n'
    b'data: {"id":"c1","model":"gpt-6-sol","choices":[{"index":0,"delta":{},'
    b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
)
SSE = {"content-type": "text/event-stream"}


async def _collect(provider: HTTPProvider, model: str = "gpt-6-sol") -> list[StreamEvent]:
    try:
        return [e async for e in provider.stream(request(model), CallContext())]
    finally:
        await provider.aclose()


# --- joining -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "path", "expected"),
    [
        ("http://h/v1", "/chat/completions", "http://h/v1/chat/completions"),
        ("http://h/v1/", "/chat/completions", "http://h/v1/chat/completions"),
        ("http://h", "/v1/messages", "http://h/v1/messages"),
        ("http://h/v1?key=X", "/chat/completions", "http://h/v1/chat/completions?key=X"),
        (
            "https://r.example/openai/deployments/d?api-version=2024-10-21",
            "/chat/completions",
            "https://r.example/openai/deployments/d/chat/completions?api-version=2024-10-21",
        ),
    ],
)
def test_join_url_appends_path_before_query(base: str, path: str, expected: str) -> None:
    assert join_url(parse_base_url(base), path) == expected


async def test_base_url_query_survives_on_the_wire() -> None:
    async with StubUpstream() as stub:
        stub.queue(Reply(headers=SSE, chunks=[OPENAI_BODY]))
        provider = OpenAIProvider(
            api_key="k", base_url=stub.url + "/v1?api-version=2024-10-21&key=X"
        )
        events = await _collect(provider)
    assert [e.text_delta.text for e in events if e.text_delta is not None] == ["hi"]
    (seen,) = stub.seen
    assert seen.path == "/v1/chat/completions?api-version=2024-10-21&key=X"


# --- rejection ---------------------------------------------------------------------------

BAD_URLS = [
    "notaurl",
    "ftp://x",
    "file:///etc/passwd",
    "http://",
    "http:///v1",
    "//host/v1",
    "http://h:99999/v1",
    "http://h/v1 ",
    "http://h/v1#frag",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_bad_base_url_is_rejected_at_from_cli(url: str) -> None:
    with pytest.raises(ValueError, match="--base-url"):
        provider_class("openai").from_cli(base_url=url, discover=False, env={})


@pytest.mark.parametrize("url", ["ftp://x", "notaurl"])
def test_bad_base_url_makes_serve_exit_2(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["serve", "--provider", "openai", "--base-url", url])
    assert status == 2
    err = capsys.readouterr().err
    assert "--base-url" in err and "must be an absolute http(s) URL" in err


def test_bad_base_url_error_does_not_echo_credentials() -> None:
    with pytest.raises(ValueError) as info:
        parse_base_url("ftp://user:SECRETPASS@h/x?key=SECRETQ")
    assert "SECRETPASS" not in str(info.value) and "SECRETQ" not in str(info.value)


@pytest.mark.parametrize("url", BAD_URLS)
async def test_bad_base_url_at_configure_is_value_error_and_nothing_applied(url: str) -> None:
    provider = OpenAIProvider(api_key="old", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="base_url"):
        await provider.configure({"api_key": "new", "base_url": url})
    assert (provider.api_key, provider.base_url) == ("old", "http://127.0.0.1:1/v1")
    await provider.aclose()


@pytest.mark.parametrize(
    "exc", [httpx.UnsupportedProtocol("no"), httpx.InvalidURL("no")], ids=lambda e: type(e).__name__
)
def test_unusable_url_transport_error_is_permanent(exc: Exception) -> None:
    err = request_failure(exc, "upstream request")
    assert (err.kind, err.retryable) == (ErrorKind.PERMANENT, False)
    err = request_failure(httpx.ConnectError("refused"), "upstream request")
    assert (err.kind, err.retryable) == (ErrorKind.TRANSIENT, True)


class _Unsupported(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.UnsupportedProtocol("Request URL has an unsupported protocol")


async def test_unsupported_protocol_during_stream_is_permanent_error_event() -> None:
    provider = OpenAIProvider(
        api_key="k",
        base_url="http://127.0.0.1:1/v1",
        transport=_Unsupported(),
        retry=RetryPolicy(max_attempts=3),
    )
    events = await _collect(provider)
    assert len(events) == 1 and events[0].error is not None
    assert (events[0].error.kind, events[0].error.retryable) == (ErrorKind.PERMANENT, False)


# --- credentials never logged ------------------------------------------------------------


def test_redact_text_hides_userinfo_and_query_values() -> None:
    line = 'HTTP Request: POST http://user:PW@h:1/v1/chat/completions?key=Q&api-version=2 "200"'
    assert redact_text(line) == (
        'HTTP Request: POST http://***@h:1/v1/chat/completions?key=***&api-version=*** "200"'
    )
    assert url_secrets("http://user:P%40W@h/v1?key=Q") == [
        "user:P%40W",
        "user:P@W",
        "P%40W",
        "P@W",
        "Q",
    ]


def test_url_secrets_skip_short_non_credential_query_values() -> None:
    # a short api-version would otherwise blank ordinary text in every error message
    assert url_secrets("https://h/d?api-version=2024-10-21&token=abc") == ["abc"]
    long_opaque = "x" * 16
    assert url_secrets(f"https://h/d?sv=1&x={long_opaque}") == [long_opaque]
    assert url_secrets("https://TOKEN-1234567@h/") == ["TOKEN-1234567"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_credentials_in_base_url_never_reach_a_log_line(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    anthropic_body = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","usage":'
        b'{"input_tokens":1,"output_tokens":1}}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    async with StubUpstream() as stub:
        stub.queue(
            Reply(headers=SSE, chunks=[anthropic_body if kind == "anthropic" else OPENAI_BODY])
        )
        root = "" if kind == "anthropic" else "/v1"
        base = stub.url + root + "?key=SECRETQ"
        cls: Any = AnthropicProvider if kind == "anthropic" else OpenAIProvider
        with caplog.at_level(logging.DEBUG):
            provider = cls(api_key="k", base_url=base)
            model = "claude-sonnet-5-5" if kind == "anthropic" else "gpt-6-sol"
            events = await _collect(provider, model)
    assert events[-1].stop is not None
    assert stub.seen[0].path.endswith("?key=SECRETQ")
    lines = [r.getMessage() for r in caplog.records]
    assert any("HTTP Request" in line for line in lines)  # httpx did log the request
    for line in lines:
        assert "SECRETQ" not in line, line


def test_url_redaction_filter_covers_every_httpcore_logger() -> None:
    import httpcore  # noqa: PLC0415 - loads httpcore's module loggers

    del httpcore
    names = [n for n in logging.root.manager.loggerDict if n.startswith(("httpx", "httpcore"))]
    assert "httpcore.http11" in names and "httpcore.connection" in names
    for name in names:
        assert any(isinstance(f, RedactURLFilter) for f in logging.getLogger(name).filters), name


# -- secret-looking path segments ----------------------------------------------------------------


def test_secret_looking_path_segments_are_redacted_everywhere_a_url_is_shown() -> None:
    url = "https://gw.example.com/v1/keys/sk-ant-api03-abcdefghijkl/openai?api-version=2024-10-21"
    assert redact_url(url) == "https://gw.example.com/v1/keys/***/openai?api-version=***"
    assert safe_location(url) == "https://gw.example.com:443/v1/keys/***/openai"
    assert "sk-ant-api03-abcdefghijkl" in url_secrets(url)
    # percent-encoded, and a random-looking token without a vendor prefix
    hexed = "http://h/t/9b2e7deaec5f07e2759100dbccc0ab5c14aa33f2/x"
    assert redact_url(hexed) == "http://h/t/***/x"
    assert redact_url("http://h/k/sk%2Dant%2Dapi03%2Dabcdefgh") == "http://h/k/***"


def test_ordinary_paths_are_shown_unchanged() -> None:
    for url in (
        "http://127.0.0.1:8080/v1",
        "https://api.anthropic.com/v1/messages",
        "https://x.openai.azure.com/openai/deployments/gpt-4o-mini-2024-07-18/chat/completions",
        "https://h/",
    ):
        assert redact_url(url) == url
    assert safe_location("http://h:9/v1beta/models") == "http://h:9/v1beta/models"


def test_a_call_url_is_joined_and_parsed_once_and_stays_equal_to_a_fresh_parse() -> None:
    joined = join_url("https://api.example.com/v1/?k=1", "/chat/completions")
    assert joined == "https://api.example.com/v1/chat/completions?k=1"
    assert join_url("https://api.example.com/v1/?k=1", "/chat/completions") is joined
    parsed = parsed_url(joined)
    assert parsed is parsed_url(joined)
    assert parsed == httpx.URL(joined) and str(parsed) == joined
    with pytest.raises(httpx.InvalidURL):
        parsed_url("http://[::1")
    with pytest.raises(httpx.InvalidURL):  # a failure is not kept
        parsed_url("http://[::1")
