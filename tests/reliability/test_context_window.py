"""A request whose counted input exceeds the model's context window gets exactly one in-band
CONTEXT_OVERFLOW error, naming the count (or "more than <window> tokens" when counting stopped
once it passed the window) and the window, before the provider is called. The reference
provider counts exactly (its tokenizer, the CountTokens count); the vendor adapters by their
documented estimate, ceil(body bytes / 4).

The figure to hold is 100,000 messages to a 32,000-token model: that many go through
:func:`check_context_window` directly (the count takes about 0.6 s); through the server the
suite sends 3,000 messages (about 42,000 tokens), since decoding and validating 100,000
messages alone takes several seconds (tests/server/test_loop_stall.py covers that)."""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from protocol_py.provider import Provider
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.openai.provider import DeepSeekProvider, OpenAIProvider
from protocol_py.providers.reference import tokenizer
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server.context_window import check_context_window
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, ImageBlock, Message, Role
from protocol_py_gen.model.v1 import (
    CountTokensRequest,
    CountTokensResponse,
    ErrorKind,
    ModelSpec,
    StreamCompletionRequest,
    StreamEvent,
)

from .conftest import Captured, acall, serve, still_serving, user

WINDOW = 32_000
CONTEXT = CallContext(session_id="sess-1", turn_id="turn-1")


def many_messages(count: int) -> list[Message]:
    return [user(f"message number {i} says hi", msg_id=f"m{i}") for i in range(count)]


def small_spec(provider: Provider) -> ModelSpec:
    return next(m for m in provider.capabilities().models if m.context_window == WINDOW)


class Recording(ReferenceProvider):
    """The reference provider, remembering whether ``stream`` was ever called."""

    def __init__(self) -> None:
        super().__init__()
        self.streamed = 0

    def stream(
        self, request: StreamCompletionRequest, context: CallContext
    ) -> AsyncIterator[StreamEvent]:
        self.streamed += 1
        return super().stream(request, context)


class Fixed(Recording):
    """Counts every request as ``count`` tokens (None: cannot count)."""

    def __init__(self, count: int | None) -> None:
        super().__init__()
        self.count = count

    def count_input_tokens(self, request: StreamCompletionRequest) -> int | None:
        return self.count


def test_a_reference_subclass_overriding_the_count_alone_keeps_its_own_whole_count() -> None:
    request = StreamCompletionRequest(model_id="reference-small", messages=many_messages(10))
    assert Fixed(7).count_input_tokens_bounded(request, 5) == (7, True)
    assert Fixed(None).count_input_tokens_bounded(request, 5) is None
    counted = ReferenceProvider().count_input_tokens_bounded(request, 10**9)
    assert counted == (ReferenceProvider().count_input_tokens(request), True)


def test_hundred_thousand_messages_to_a_32000_token_model_overflow() -> None:
    provider = ReferenceProvider()
    request = StreamCompletionRequest(model_id="reference-small", messages=many_messages(100_000))
    started = time.perf_counter()
    event = check_context_window(provider, request, small_spec(provider))
    print(f"counted 100,000 messages in {time.perf_counter() - started:.2f} s")
    assert event is not None and event.error is not None
    counted = provider.count_input_tokens(request)
    assert counted is not None and counted > 1_000_000
    assert event.error.kind == ErrorKind.CONTEXT_OVERFLOW
    assert event.error.retryable is False
    assert event.error.message == (
        "context window exceeded: the input is more than 32000 tokens, over the 32000-token "
        "context window of model 'reference-small'"
    )


def test_an_input_just_over_the_window_names_its_exact_count() -> None:
    provider = ReferenceProvider()
    text = "!" * (WINDOW + 5)  # one token per character, in one message counted whole
    request = StreamCompletionRequest(model_id="reference-small", messages=[user(text)])
    event = check_context_window(provider, request, small_spec(provider))
    exact = provider.count_input_tokens(request)
    assert event is not None and event.error is not None and exact > WINDOW
    assert f"the input is {exact} tokens, over the 32000-token" in event.error.message


class _CountingPattern:
    """The tokenizer's regular expression, counting its ``findall`` calls (slices seen)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def findall(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> list[str]:
        self.calls += 1
        return self.pattern.findall(text, pos, endpos)


async def test_counting_stops_once_the_count_passes_the_window(
    monkeypatch: pytest.MonkeyPatch, logs: Captured
) -> None:
    counting = _CountingPattern(tokenizer._TOKEN_RE)
    monkeypatch.setattr(tokenizer, "_TOKEN_RE", counting)
    text = "!" * (4 * 1024 * 1024)  # 4 Mi one-character tokens: 1,024 slices counted whole
    provider = Recording()
    request = StreamCompletionRequest(
        model_id="reference-small", messages=[user(text)], call_context=CONTEXT
    )
    event = check_context_window(provider, request, small_spec(provider))
    assert event is not None and event.error is not None
    assert "the input is more than 32000 tokens, over the 32000-token" in event.error.message
    slices = WINDOW // tokenizer.TOKEN_SLICE_CHARS + 1  # the first slice past the window
    assert counting.calls <= slices + 2  # the message's header and trailer parts
    counting.calls = 0
    assert provider.count_input_tokens(request) == len(text) + 5  # "[user]\n" and "\n": 5
    assert counting.calls >= len(text) // tokenizer.TOKEN_SLICE_CHARS
    run = await serve(provider)
    try:
        counting.calls = 0
        result = await acall(run.address, "StreamCompletion", bytes(request), stream=True)
        events = [StreamEvent.parse(r) for r in result.replies]
        assert len(events) == 1 and events[0].error is not None
        assert events[0].error.kind == ErrorKind.CONTEXT_OVERFLOW
        assert "more than 32000 tokens" in events[0].error.message
        assert counting.calls <= slices + 2
        assert provider.streamed == 0
        assert logs.errors() == []
        await still_serving(run)
    finally:
        await run.server.shutdown(grace_period=0)


@pytest.mark.parametrize(("count", "refused"), [(WINDOW, False), (WINDOW + 1, True), (None, False)])
def test_the_window_itself_is_allowed_one_more_token_is_not(
    count: int | None, refused: bool
) -> None:
    provider = Fixed(count)
    request = StreamCompletionRequest(model_id="reference-small", messages=[user("hi")])
    event = check_context_window(provider, request, small_spec(provider))
    assert (event is not None) is refused
    if event is not None:
        assert event.error is not None
        assert f"the input is {WINDOW + 1} tokens, over the {WINDOW}-token" in event.error.message


def test_a_model_without_a_declared_window_is_not_checked() -> None:
    spec = ModelSpec(id="x", context_window=0)
    request = StreamCompletionRequest(model_id="x", messages=[user("hi")])
    assert check_context_window(Fixed(10**9), request, spec) is None


async def test_server_refuses_an_overflow_in_band_before_the_provider(logs: Captured) -> None:
    provider = Recording()
    run = await serve(provider)
    try:
        messages = many_messages(3_000)
        request = StreamCompletionRequest(
            model_id="reference-small", messages=messages, call_context=CONTEXT
        )
        result = await acall(run.address, "StreamCompletion", bytes(request), stream=True)
        assert result.code == "OK", result
        events = [StreamEvent.parse(r) for r in result.replies]
        assert len(events) == 1
        error = events[0].error
        assert error is not None and error.kind == ErrorKind.CONTEXT_OVERFLOW
        assert provider.streamed == 0
        counted = await acall(
            run.address,
            "CountTokens",
            bytes(CountTokensRequest(model_id="reference-small", messages=messages)),
        )
        exact = CountTokensResponse.parse(counted.replies[0]).input_tokens
        assert exact > WINDOW  # CountTokens counts to the end; the check stops past the window
        assert "the input is more than 32000 tokens, over the 32000-token context window" in (
            error.message
        )
        record = next(r for r in logs.rpc_records() if r["rpc"] == "StreamCompletion")
        assert record["error_kind"] == "CONTEXT_OVERFLOW"
        assert record["events"] == 1
        assert logs.errors() == []
        await still_serving(run)
        assert provider.streamed == 1  # the normal request of still_serving
    finally:
        await run.server.shutdown(grace_period=0)


def _no_network(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the upstream was called: {request.url}")


@pytest.mark.parametrize("cls", [OpenAIProvider, DeepSeekProvider, AnthropicProvider])
def test_adapters_estimate_ceil_body_bytes_over_four(cls: type[OpenAIProvider]) -> None:
    provider = cls(api_key="k", transport=httpx.MockTransport(_no_network))
    spec = provider.capabilities().models[0]
    request = StreamCompletionRequest(model_id=spec.id, messages=many_messages(50))
    body = dump_body(provider.build_body(request, spec))
    assert provider.count_input_tokens(request) == math.ceil(len(body) / 4)


async def test_openai_estimate_matches_its_count_tokens() -> None:
    provider = OpenAIProvider(api_key="k", transport=httpx.MockTransport(_no_network))
    spec = provider.capabilities().models[0]
    messages = many_messages(20)
    counted = await provider.count_tokens(CountTokensRequest(model_id=spec.id, messages=messages))
    estimate = provider.count_input_tokens(
        StreamCompletionRequest(model_id=spec.id, messages=messages)
    )
    assert estimate == counted.input_tokens


def test_adapters_do_not_estimate_a_request_with_an_image() -> None:
    provider = OpenAIProvider(api_key="k", transport=httpx.MockTransport(_no_network))
    spec = provider.capabilities().models[0]
    image = Message(
        role=Role.USER,
        id="img",
        content=[ContentBlock(image=ImageBlock(media_type="image/png", data=b"\x89PNG" * 10))],
    )
    request = StreamCompletionRequest(model_id=spec.id, messages=[image])
    assert provider.count_input_tokens(request) is None


async def test_server_refuses_an_adapter_overflow_without_calling_the_vendor(
    logs: Captured,
) -> None:
    provider = DeepSeekProvider(api_key="k", transport=httpx.MockTransport(_no_network))
    spec = provider.capabilities().models[0]
    text = "word " * (spec.context_window * 4 // 5 + 1000)  # > window * 4 bytes of body
    request = StreamCompletionRequest(model_id=spec.id, messages=[user(text)], call_context=CONTEXT)
    run = await serve(provider)
    try:
        result = await acall(run.address, "StreamCompletion", bytes(request), stream=True)
        events = [StreamEvent.parse(r) for r in result.replies]
        assert len(events) == 1 and events[0].error is not None
        assert events[0].error.kind == ErrorKind.CONTEXT_OVERFLOW
        estimate = provider.count_input_tokens(request)
        assert estimate is not None and estimate > spec.context_window
        assert f"the input is {estimate} tokens, over the {spec.context_window}-token" in (
            events[0].error.message
        )
        assert logs.errors() == []
    finally:
        await run.server.shutdown(grace_period=0)
