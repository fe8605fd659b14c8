"""A closed httpx response is freed by reference counting, not by the cyclic collector
(:mod:`protocol_py._compat.httpx_response_cycle`): the adapters' responses, their requests and
the vendor bodies they carry go as soon as the call ends, even while the server has the
collector paused."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import httpx
import pytest
from httpx import _client

from protocol_py._compat import httpx_response_cycle
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

from ..support.adapters import VENDOR
from ..support.stub_upstream import Reply, StubUpstream


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """The cyclic collector off, as the server has it while a large job runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def _chunks() -> AsyncIterator[bytes]:
    yield b"data: {}\n\n"


def _sse(request: httpx.Request) -> httpx.Response:
    """A streamed reply, as an upstream's (a reply given as bytes is read and closed before
    httpx binds its stream)."""
    return httpx.Response(200, content=_chunks(), headers={"content-type": "text/event-stream"})


def _sse_sync(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=iter([b"data: {}\n\n"]))


def test_it_installs_on_the_pinned_httpx_and_is_idempotent() -> None:
    assert httpx_response_cycle.install()
    assert _client.BoundAsyncStream.aclose is httpx_response_cycle.bound_async_stream_aclose
    assert _client.BoundSyncStream.close is httpx_response_cycle.bound_sync_stream_close
    assert httpx_response_cycle.install()


def test_it_is_a_no_op_on_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    class BoundAsyncStream:  # a release whose stream no longer holds its response
        async def aclose(self) -> None:
            return None

    monkeypatch.setattr(_client, "BoundAsyncStream", BoundAsyncStream)
    own = BoundAsyncStream.__dict__["aclose"]
    assert httpx_response_cycle.install() is False
    assert BoundAsyncStream.__dict__["aclose"] is own
    monkeypatch.delattr(_client, "BoundSyncStream")
    assert httpx_response_cycle.install() is False


async def test_a_closed_async_response_and_its_body_are_freed_at_once(
    collector_paused: None,
) -> None:
    assert httpx_response_cycle.install()
    body = b"x" * 1_200_000
    async with httpx.AsyncClient(transport=httpx.MockTransport(_sse)) as client:
        request = client.build_request("POST", "http://upstream/chat", content=body)
        response = await client.send(request, stream=True)
        assert await response.aread() == b"data: {}\n\n"
        await response.aclose()
        assert isinstance(response.elapsed, timedelta) and response.elapsed.total_seconds() >= 0
        gone_response, gone_request = weakref.ref(response), weakref.ref(request)
        del response, request
        assert gone_response() is None
        assert gone_request() is None


def test_a_closed_sync_response_is_freed_at_once(collector_paused: None) -> None:
    assert httpx_response_cycle.install()
    with httpx.Client(transport=httpx.MockTransport(_sse_sync)) as client:
        with client.stream("POST", "http://upstream/chat", content=b"{}") as response:
            response.read()
        assert response.elapsed.total_seconds() >= 0
        gone = weakref.ref(response)
        del response
        assert gone() is None


async def test_a_second_close_keeps_the_first_elapsed(collector_paused: None) -> None:
    assert httpx_response_cycle.install()
    async with httpx.AsyncClient(transport=httpx.MockTransport(_sse)) as client:
        response = await client.send(client.build_request("GET", "http://upstream/"), stream=True)
        await response.aclose()
        first = response.elapsed
        await response.stream.aclose()
        assert response.elapsed == first


async def test_an_adapter_turn_leaves_no_response_for_the_collector(
    collector_paused: None,
) -> None:
    # The OpenAI-compatible adapter against a stub upstream, a megabyte request: once its
    # stream ends, nothing of the upstream call waits for a collection.
    assert httpx_response_cycle.install()
    sse = (VENDOR / "openai_text_include_usage.sse").read_bytes()
    text = "drwxr-xr-x  4 agent agent  4096 src/module.py\n" * 25_000
    request = StreamCompletionRequest(
        model_id="gpt-6-sol",
        messages=[
            Message(role=Role.USER, id="u1", content=[ContentBlock(text=TextBlock(text=text))])
        ],
        call_context=CallContext(session_id="s", turn_id="t"),
    )
    async with StubUpstream() as stub:
        provider = OpenAIProvider(api_key="sk-test-key", base_url=stub.url)
        try:
            for _ in range(3):
                stub.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=[sse]))
                events = [e async for e in provider.stream(request, CallContext())]
                assert events[-1].stop is not None
            alive = [o for o in gc.get_objects() if isinstance(o, httpx.Response | httpx.Request)]
            assert alive == []
            assert len(stub.seen) == 3 and all(len(s.body) > len(text) for s in stub.seen)
        finally:
            await provider.aclose()
