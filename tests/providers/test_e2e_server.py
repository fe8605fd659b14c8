"""End to end: stub upstream -> vendor provider -> grpclib server -> client, per vendor.

Also the client-side halves of C11 (a retry hint longer than the gRPC deadline: DEADLINE_EXCEEDED
at the deadline, one upstream request) and of cancellation (the client leaving the stream makes
the stub upstream see its connection closed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.client.client import ModelClient
from protocol_py.providers.http.base import HTTPProvider
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.server import ModelServer
from protocol_py_gen.model.v1 import StopReason

from ..support.adapters import VENDOR, kinds, load_fixture
from ..support.stub_upstream import Reply, StubUpstream
from ._compare import assert_events
from .test_providers_stub import MODEL, make, request

CASES = [
    ("openai", "openai_text_include_usage"),
    ("deepseek", "deepseek_reasoning_cache_keepalive"),
    ("anthropic", "anthropic_thinking_signature"),
]


class Served:
    def __init__(self, server: ModelServer, client: ModelClient) -> None:
        self.server = server
        self.client = client


async def serve(provider: HTTPProvider) -> AsyncIterator[Served]:
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        yield Served(server, client)
    finally:
        client.close()
        await server.shutdown(grace_period=0)


def _stub_reply(name: str) -> Reply:
    meta, body = load_fixture(VENDOR / f"{name}.json")
    headers = {k: v for k, v in meta["http"]["headers"].items() if k != "content-length"}
    return Reply(status=meta["http"]["status"], headers=headers, chunks=[body[:700], body[700:]])


@pytest.mark.parametrize(("vendor", "name"), CASES)
async def test_vendor_through_grpc_server(vendor: str, name: str) -> None:
    meta, _ = load_fixture(VENDOR / f"{name}.json")
    async with StubUpstream() as stub:
        stub.queue(_stub_reply(name), _stub_reply(name))
        provider = make(vendor, stub.url)
        async for served in serve(provider):
            events = [e async for e in served.client.stream(request(MODEL[vendor]), timeout=10)]
            assert_events(events, meta["expected_events"])
            done = await served.client.complete(request(MODEL[vendor]), timeout=10)
            assert done.error is None
            assert done.stop is not None
            assert done.stop.reason == StopReason.END_TURN
            assert done.usage is not None
            assert done.usage.output_tokens == meta["expected_events"][-2]["usage"]["output_tokens"]
            assert done.cost is not None  # priced with the catalog tier
    assert len(stub.seen) == 2


async def test_client_cancel_closes_upstream() -> None:
    body = (VENDOR / "anthropic_text_plain.sse").read_bytes()
    head = body[: body.index(b"event: content_block_delta") + 200]
    head = head[: head.rindex(b"\n\n") + 2]
    async with StubUpstream() as stub:
        stub.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=[head], hold=True))
        provider = make("anthropic", stub.url)
        async for served in serve(provider):
            got: list[Any] = []
            async for event in served.client.stream(request(MODEL["anthropic"]), timeout=10):
                got.append(event)
                if kinds(got)[-1] == "text_delta":
                    break
            await asyncio.wait_for(stub.closed.wait(), 2)
    assert stub.seen[0].closed_at is not None


async def test_retry_never_outlives_grpc_deadline() -> None:
    async with StubUpstream() as stub:
        stub.queue(Reply(status=429, headers={"retry-after": "2"}, chunks=[b"{}"]))
        provider = make("openai", stub.url, retry=RetryPolicy())
        async for served in serve(provider):
            start = time.monotonic()
            with pytest.raises((GRPCError, asyncio.TimeoutError)) as info:
                async for _ in served.client.stream(request(MODEL["openai"]), timeout=1.0):
                    pass
            took = time.monotonic() - start
            if isinstance(info.value, GRPCError):
                assert info.value.status == Status.DEADLINE_EXCEEDED
            assert 0.9 <= took <= 1.6
            await asyncio.sleep(1.5)  # past the 2 s hint: no second attempt must arrive
    assert len(stub.seen) == 1


async def test_echoed_api_key_never_reaches_grpc_status_events_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from protocol_py.providers.anthropic.provider import AnthropicProvider  # noqa: PLC0415
    from protocol_py_gen.model.v1 import CountTokensRequest  # noqa: PLC0415

    key = "GATEWAY-KEY-77f0c1d2e3"
    echo = (
        b'{"type":"error","error":{"type":"authentication_error",'
        b'"message":"invalid x-api-key GATEWAY-KEY-77f0c1d2e3"}}'
    )
    caplog.set_level("DEBUG")
    async with StubUpstream() as stub:
        headers = {"content-type": "application/json", "content-length": str(len(echo))}
        stub.queue(Reply(status=401, headers=headers, chunks=[echo]))
        stub.queue(Reply(status=401, headers=headers, chunks=[echo]))
        provider = AnthropicProvider(api_key=key, base_url=stub.url)
        async for served in serve(provider):
            with pytest.raises(GRPCError) as info:
                await served.client.count_tokens(
                    CountTokensRequest(model_id=MODEL["anthropic"], messages=request("x").messages),
                    timeout=5,
                )
            assert info.value.status == Status.UNAUTHENTICATED
            assert "<redacted>" in str(info.value.message)
            assert key not in str(info.value.message) and key not in str(info.value.details)
            events = [e async for e in served.client.stream(request(MODEL["anthropic"]), timeout=5)]
            assert kinds(events) == ["error"]
            assert events[0].error is not None and key not in events[0].error.message
    assert key not in caplog.text
    assert "<redacted>" in caplog.text or "AUTHENTICATION" in caplog.text


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://x", "notaurl", "ftp://user:SECRETPASS@h/?key=SECRETQ"],
)
async def test_configure_rejects_non_http_base_url_with_invalid_argument(url: str) -> None:
    provider = make("openai", "http://127.0.0.1:1/v1")
    async for served in serve(provider):
        with pytest.raises(GRPCError) as info:
            await served.client.configure({"base_url": url}, timeout=10)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "base_url" in (info.value.message or "")
    assert "SECRETPASS" not in (info.value.message or "")
    assert "SECRETQ" not in (info.value.message or "")
    assert provider.base_url == "http://127.0.0.1:1/v1"
