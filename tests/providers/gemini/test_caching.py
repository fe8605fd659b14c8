"""Explicit cache breakpoints through ``cachedContents``, against the stub (docs/adapters.md
"Gemini", "Caching"): created once, found again by content hash while the TTL lasts, the system
instruction and tools moved into the cache, expired and evicted caches recreated, never shared
across keys, and what creating and storing one costs reported in the usage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from protocol_py.codec.structs import to_struct
from protocol_py.providers.gemini.caching import EXPIRY_MARGIN_S, ExplicitCaches
from protocol_py.providers.gemini.provider import GeminiProvider
from protocol_py.providers.http.base import HTTPProvider
from protocol_py.rules.cost import cost
from protocol_py.rules.fees import storage_cost
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, ContextSection, Message, Role, TextBlock
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    StreamCompletionRequest,
    StreamEvent,
    ToolDeclaration,
    Usage,
)

from ._gemini import GeminiStub, stream_reply, user

MODEL = "gemini-2.5-flash"
KEY = "AIza-cache-test-key-0001"


def _answer(cached: int | None) -> Any:
    usage: dict[str, Any] = {
        "promptTokenCount": 5000,
        "candidatesTokenCount": 10,
        "totalTokenCount": 5010,
    }
    if cached is not None:
        usage["cachedContentTokenCount"] = cached
    return stream_reply(
        {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
            ],
            "usageMetadata": usage,
            "responseId": "r",
            "modelVersion": MODEL,
        }
    )


def _reply(text: str) -> Message:
    return Message(
        role=Role.ASSISTANT,
        id=f"a-{text}",
        content=[ContentBlock(text=TextBlock(text=text))],
        produced_by_provider="gemini",
        produced_by_model_id=MODEL,
    )


def _request(
    turns: int, breakpoint: CacheBreakpoint | None = None, *, system: str = "Long manual."
) -> StreamCompletionRequest:
    messages = [user("document " * 50, "u0")]
    for i in range(1, turns):
        messages += [_reply(f"r{i}"), user(f"question {i}", f"u{i}")]
    return StreamCompletionRequest(
        model_id=MODEL,
        messages=messages,
        tools=[ToolDeclaration(name="lookup", input_schema=to_struct({"type": "object"}))],
        assembled_context=[
            ContextSection(provider="k", content=[ContentBlock(text=TextBlock(text=system))])
        ],
        call_context=CallContext(session_id="s", turn_id="t"),
        cache_breakpoints=[breakpoint or CacheBreakpoint(after_message_index=0)],
    )


async def _usage(provider: HTTPProvider, request: StreamCompletionRequest) -> Usage:
    events: list[StreamEvent] = [e async for e in provider.stream(request, CallContext())]
    assert events[-1].stop is not None, events[-1]
    usage = events[-2].usage
    assert usage is not None
    return usage


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _provider(stub: GeminiStub, clock: _Clock | None = None, key: str = KEY) -> GeminiProvider:
    provider = GeminiProvider(api_key=key, base_url=stub.url + "/v1beta")
    provider._caches = ExplicitCaches(clock=clock or _Clock())
    return provider


async def test_prefix_is_cached_once_and_found_again_by_its_hash() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(4096), _answer(4096))
        provider = _provider(stub)
        try:
            first = await _usage(provider, _request(2))
            second = await _usage(provider, _request(3))  # the history grew after the prefix
        finally:
            await provider.aclose()
    (create,) = stub.creates()
    assert create.path == "/v1beta/cachedContents"
    assert create.headers["x-goog-api-key"] == KEY
    sent = create.json()
    assert list(sent) == ["model", "systemInstruction", "tools", "contents", "ttl"]
    assert sent["model"] == "models/gemini-2.5-flash"
    assert sent["systemInstruction"] == {"parts": [{"text": "Long manual."}]}
    assert sent["contents"] == [{"role": "user", "parts": [{"text": "document " * 50}]}]
    assert sent["ttl"] == "3600s"
    bodies = [s.json() for s in stub.streams()]
    for body in bodies:  # Google refuses system instruction, tools or tool config beside a cache
        assert body["cachedContent"] == "cachedContents/c1"
        assert not {"systemInstruction", "tools", "toolConfig"} & body.keys()
        assert list(body)[-1] == "contents"
    # each request sends only what follows the cached prefix
    assert [c["parts"][0]["text"] for c in bodies[0]["contents"]] == ["r1", "question 1"]
    assert [c["parts"][0]["text"] for c in bodies[1]["contents"]] == [
        "r1",
        "question 1",
        "r2",
        "question 2",
    ]
    # creating the cache is charged once, with its storage for the whole lifetime
    assert (first.input_tokens, first.cache_read_tokens, first.cache_write_tokens) == (904, 0, 4096)
    assert first.cache_storage_token_seconds == 4096 * 3600
    assert (second.input_tokens, second.cache_read_tokens, second.cache_write_tokens) == (
        904,
        4096,
        None,
    )
    assert second.cache_storage_token_seconds is None


async def test_a_breakpoint_after_the_last_message_still_sends_that_message() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(4096))
        provider = _provider(stub)
        try:
            await _usage(provider, _request(2, CacheBreakpoint(after_message_index=2)))
        finally:
            await provider.aclose()
    cached = stub.creates()[0].json()["contents"]
    assert [c["parts"][0]["text"] for c in cached] == ["document " * 50, "r1"]
    (body,) = [s.json() for s in stub.streams()]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "question 1"}]}]


async def test_breakpoint_ttl_is_the_cache_lifetime_and_prices_its_storage() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(4096))
        provider = _provider(stub)
        try:
            usage = await _usage(
                provider, _request(1, CacheBreakpoint(after_tools=Empty(), ttl_seconds=300))
            )
        finally:
            await provider.aclose()
    sent = stub.creates()[0].json()
    assert sent["ttl"] == "300s" and "contents" not in sent  # system and tools only
    assert usage.cache_storage_token_seconds == 4096 * 300


async def test_expired_cache_is_created_again() -> None:
    clock = _Clock()
    async with GeminiStub() as stub:
        stub.queue(_answer(4096), _answer(4096), _answer(4096))
        provider = _provider(stub, clock)
        try:
            await _usage(provider, _request(2))
            clock.now += 3600 - EXPIRY_MARGIN_S - 1  # still usable
            kept = await _usage(provider, _request(2))
            clock.now += 2  # less than the margin left
            renewed = await _usage(provider, _request(2))
        finally:
            await provider.aclose()
    assert [s.json()["cachedContent"] for s in stub.streams()] == [
        "cachedContents/c1",
        "cachedContents/c1",
        "cachedContents/c2",
    ]
    assert (kept.cache_write_tokens, renewed.cache_write_tokens) == (None, 4096)


async def test_evicted_cache_is_recreated_and_the_request_sent_again() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(4096), _answer(4096))
        provider = _provider(stub)
        try:
            await _usage(provider, _request(2))
            stub.evict("cachedContents/c1")  # deleted upstream before its TTL ended
            usage = await _usage(provider, _request(2))
        finally:
            await provider.aclose()
    names = [s.json().get("cachedContent") for s in stub.streams()]
    assert names == ["cachedContents/c1", "cachedContents/c1", "cachedContents/c2"]
    assert len(stub.creates()) == 2
    assert usage.cache_write_tokens == 4096  # the new cache's creation is charged


async def test_a_cache_is_never_shared_across_keys() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(4096), _answer(4096), _answer(4096))
        provider = _provider(stub)
        try:
            await _usage(provider, _request(1))
            await provider.configure({"api_key": "AIza-other-key-0002"})
            await _usage(provider, _request(1))
        finally:
            await provider.aclose()
        other = _provider(stub, key="AIza-third-key-0003")
        try:
            await _usage(other, _request(1))
        finally:
            await other.aclose()
    assert [s.headers["x-goog-api-key"] for s in stub.creates()] == [
        KEY,
        "AIza-other-key-0002",
        "AIza-third-key-0003",
    ]
    assert ExplicitCaches.key("a", MODEL, {"x": 1}, 60) != ExplicitCaches.key(
        "b", MODEL, {"x": 1}, 60
    )


async def test_a_prefix_google_refuses_to_cache_goes_uncached_and_is_not_retried() -> None:
    async with GeminiStub() as stub:
        stub.cache_status = 400
        stub.queue(_answer(None), _answer(None))
        provider = _provider(stub)
        try:
            first = await _usage(provider, _request(2))
            await _usage(provider, _request(3))
        finally:
            await provider.aclose()
    assert len(stub.creates()) == 1
    for body in (s.json() for s in stub.streams()):
        assert "cachedContent" not in body
        assert body["systemInstruction"] == {"parts": [{"text": "Long manual."}]}
    assert (first.cache_write_tokens, first.cache_storage_token_seconds) == (None, None)


async def test_concurrent_requests_with_one_prefix_create_one_cache() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(4096), _answer(4096), _answer(4096))
        provider = _provider(stub)
        try:
            usages = await asyncio.gather(*(_usage(provider, _request(1)) for _ in range(3)))
        finally:
            await provider.aclose()
    assert len(stub.creates()) == 1
    assert sorted(u.cache_write_tokens or 0 for u in usages) == [0, 0, 4096]


async def test_breakpoints_are_ignored_where_the_model_declares_no_explicit_markers() -> None:
    async with GeminiStub() as stub:
        stub.queue(_answer(None))
        provider = _provider(stub)
        spec = provider.spec_for(MODEL)
        assert spec is not None and spec.caching is not None
        spec.caching.explicit_markers = False
        try:
            await _usage(provider, _request(1))
        finally:
            await provider.aclose()
    assert stub.creates() == []
    assert "cachedContent" not in stub.streams()[0].json()


async def test_creating_and_storing_a_cache_cost_exactly_what_google_bills() -> None:
    """Google bills the creation at the input rate, the generate call's read of those tokens at
    the cache-read rate, and the storage per token-hour: 2.5 Flash 0.30 / 0.03 / 1.00."""
    async with GeminiStub() as stub:
        stub.queue(_answer(4096), _answer(4096))
        provider = _provider(stub)
        try:
            created = await _usage(provider, _request(2))
            reused = await _usage(provider, _request(3))
        finally:
            await provider.aclose()
    spec = provider.spec_for(MODEL)
    assert spec is not None and spec.pricing is not None
    at = datetime(2026, 12, 1, tzinfo=UTC)
    first = cost(spec.pricing, created, at)
    tier = spec.pricing.tiers[first.tier_index or 0]
    assert {k: first.terms[k] for k in ("input", "output", "cache_read", "cache_write_5m")} == {
        "input": Decimal("0.0002712"),  # 904 x 0.30
        "output": Decimal("0.000025"),  # 10 x 2.50
        "cache_read": Decimal("0"),
        "cache_write_5m": Decimal("0.00135168"),  # 4096 x (0.30 created + 0.03 read)
    }
    assert storage_cost(created, tier, 0) == Decimal("0.004096")  # 4096 tokens for one hour
    assert first.terms["cache_storage"] == Decimal("0.004096")
    assert first.total == Decimal("0.00574388")  # every term above, nothing else
    second = cost(spec.pricing, reused, at)
    assert second.terms["cache_read"] == Decimal("0.00012288")  # 4096 x 0.03
    assert (second.terms["cache_write_5m"], second.terms["cache_storage"]) == (0, 0)
    assert second.total == Decimal("0.00041908")  # 904 x 0.30 + 0.00012288 + 10 x 2.50
