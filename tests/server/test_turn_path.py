"""The server's per-turn path does each piece of work once:

* an *exact* fast decode (every field known, with its wire type) skips the upb unknown-field
  walk, and a clean one the Struct gap fill; anything else still gets both, so a wrong wire
  type is refused and a Struct entry without a value becomes null exactly as before;
* a decoded request keeps the wire image of each conversation message, which keys the
  OpenAI-compatible translation cache once (the body is byte for byte a fresh translation);
* the vendor body built for the context-window count is the one the stream sends;
* a large request is decoded, validated and counted in one worker-thread step.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

import pytest
from grpclib.exceptions import GRPCError

from protocol_py.client.client import ModelClient
from protocol_py.codec import metadata, wire
from protocol_py.codec.decode_memo import DecodeMemo, split_message_id
from protocol_py.codec.structs import from_struct
from protocol_py.providers.http.history import NOT_EXECUTED, HistoryMemo
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.http.translation_cache import TranslationCache
from protocol_py.providers.openai import request as openai_request
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.providers.openai.request import (
    OpenAICompat,
    build_openai_body,
    build_openai_content,
)
from protocol_py.rules.request_memo import request_images
from protocol_py.server import handlers
from protocol_py.server.grpc_layer import limits, memory_budget
from protocol_py.server.offload import OFFLOAD_MIN_BYTES
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock, ToolUseBlock
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import GenerationParams, StreamCompletionRequest

from ..codec.test_wire import conversation as wire_conversation
from ..support.servers import make_request, start_server

MODEL = "gpt-6-sol"
MESSAGES = metadata.field_number(StreamCompletionRequest, "messages")


def conversation(pairs: int) -> StreamCompletionRequest:
    """test_wire's conversation (text, tool calls with Struct input, tool results) for MODEL."""
    request = wire_conversation(pairs)
    request.model_id = MODEL
    return request


@pytest.fixture(scope="module")
def strict() -> Any:
    return limits.strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]


def test_exact_report_says_whether_every_field_was_known() -> None:
    data = wire.encode(conversation(2))
    message, clean, exact = wire.decode_report(StreamCompletionRequest, data)
    assert (clean, exact) == (True, True)
    assert message == StreamCompletionRequest.parse(data)
    # field 999 (unknown to the class), varint: kept, decode not exact
    unknown = data + b"\xb8\x3e\x01"
    message, clean, exact = wire.decode_report(StreamCompletionRequest, unknown)
    assert (clean, exact) == (True, False)
    assert message == StreamCompletionRequest.parse(unknown)
    # model_id (field 2) sent as a varint: betterproto2 decides, not exact
    _, clean, exact = wire.decode_report(StreamCompletionRequest, b"\x08\x05")
    assert (clean, exact) == (False, False)


def test_decode_request_skips_the_walk_only_after_an_exact_decode(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks: list[object] = []
    walk = limits.wrong_wire_type

    def counting(message: Any) -> str | None:
        walks.append(message)
        return walk(message)

    monkeypatch.setattr(limits, "wrong_wire_type", counting)
    data = wire.encode(conversation(3))
    assert limits.decode_request(data, StreamCompletionRequest, strict) == (
        StreamCompletionRequest.parse(data)
    )
    assert walks == []
    limits.decode_request(data + b"\xb8\x3e\x01", StreamCompletionRequest, strict)
    assert len(walks) == 1
    # a nested known field with the wrong wire type is still refused, naming it
    wrong_type = b"\x0a\x02\x18\x01"  # messages[0].id (field 3, a string) sent as a varint
    with pytest.raises(GRPCError) as refused:
        limits.decode_request(wrong_type, StreamCompletionRequest, strict)
    assert refused.value.message is not None
    assert refused.value.message.endswith(
        "StreamCompletionRequest.messages[0].id has wire type varint, expected length-delimited"
    )
    assert len(walks) == 2


def test_struct_entry_without_value_still_becomes_null(strict: Any) -> None:
    entry = b"\x0a\x01a"  # Struct map entry: key "a", no value (legal protobuf)
    struct = b"\x0a" + bytes([len(entry)]) + entry
    body = wire.encode(conversation(1)) + b"\x42" + bytes([len(struct)]) + struct
    _, clean, exact = wire.decode_report(StreamCompletionRequest, body)
    assert (clean, exact) == (False, True)
    decoded = limits.decode_request(body, StreamCompletionRequest, strict)
    assert decoded.provider_options is not None
    assert from_struct(decoded.provider_options) == {"a": None}
    assert wire.take_images(decoded, "messages") is None  # not clean: no images kept


def test_wire_images_key_the_cache_and_the_body_equals_a_fresh_translation(strict: Any) -> None:
    provider = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9")
    spec = provider.spec_for(MODEL)
    assert spec is not None
    cache = TranslationCache()
    compat = OpenAICompat()
    for pairs in (1, 2, 3):
        data = wire.encode(conversation(pairs))
        request = limits.decode_request(data, StreamCompletionRequest, strict)
        images = wire.take_images(request, "messages")
        assert images is not None and len(images) == len(request.messages)
        assert [Message.parse(image) for image in images] == request.messages
        assert wire.take_images(request, "messages") is None  # once
        fresh = dump_body(build_openai_body(request, spec, compat))
        assert build_openai_content(request, spec, compat, cache, images) == fresh
    assert cache.misses == 1 + 2 * 3  # each message translated once over three turns
    # the same id with other content (another image) is translated again
    changed = conversation(3)
    changed.messages[1].content[0].text = TextBlock(text="edited")
    data = wire.encode(changed)
    request = limits.decode_request(data, StreamCompletionRequest, strict)
    images = wire.take_images(request, "messages")
    fresh = dump_body(build_openai_body(request, spec, compat))
    assert build_openai_content(request, spec, compat, cache, images) == fresh
    assert b"edited" in fresh


def test_images_are_dropped_when_the_message_list_changed(strict: Any) -> None:
    request = limits.decode_request(wire.encode(conversation(2)), StreamCompletionRequest, strict)
    request.messages.pop()
    assert wire.take_images(request, "messages") is None


def test_the_counted_body_is_the_streamed_body(strict: Any) -> None:
    provider = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9")
    spec = provider.spec_for(MODEL)
    assert spec is not None
    request = limits.decode_request(wire.encode(conversation(4)), StreamCompletionRequest, strict)
    fresh = dump_body(provider.build_body(request, spec))
    assert provider.count_input_tokens(request) == -(-len(fresh) // 4)
    assert provider._bodies.take(request, spec) == fresh
    assert provider._bodies.take(request, spec) is None  # used once
    # a request built in Python (not decoded by the server) is never kept
    plain = conversation(4)
    provider.count_input_tokens(plain)
    assert provider._bodies.take(plain, spec) is None
    # reconfiguring drops what was kept
    provider.count_input_tokens(request)
    asyncio.run(provider.configure({"api_key": "other"}))
    assert provider._bodies.take(request, spec) is None
    assert len(provider._bodies) == 0


def test_decode_request_takes_seen_messages_from_the_memo_and_hands_their_keys_along(
    strict: Any,
) -> None:
    first = conversation(4)
    limits.decode_request(wire.encode(first), StreamCompletionRequest, strict)
    renamed = StreamCompletionRequest.parse(bytes(first))
    for i, message in enumerate(renamed.messages):
        message.id = f"restart-{i}"
    data = wire.encode(renamed)
    hits = limits.MESSAGE_MEMO.hits
    decoded = limits.decode_request(data, StreamCompletionRequest, strict)
    assert limits.MESSAGE_MEMO.hits == hits + len(renamed.messages)
    assert decoded == StreamCompletionRequest.parse(data)
    assert [m.id for m in decoded.messages] == [f"restart-{i}" for i in range(9)]
    images = wire.take_images(decoded, "messages")
    assert isinstance(images, wire.MessageImages)
    assert images == [wire.encode(m) for m in renamed.messages]
    assert images.content_keys == [wire.content_key(i) for i in images if i is not None]


DEPTH_ERROR = "nested deeper than protobuf's limit of 100 message levels"


def _deep_message() -> Message:
    """A user message whose tool result holds a Struct nested past upb's depth limit (the
    fast decoder takes it; upb refuses it). Built by hand: to_struct refuses JSON this deep."""
    struct = Struct(fields={"a": Value(number_value=1.0)})
    for _ in range(40):  # 40 JSON levels = about 120 protobuf message levels
        struct = Struct(fields={"a": Value(struct_value=struct)})
    use = ToolUseBlock(id="deep", name="shell", input=struct)
    return Message(role=Role.ASSISTANT, id="deep-0", content=[ContentBlock(tool_use=use)])


def test_upb_checks_only_what_follows_the_messages_matched_to_the_last_list(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resent conversation's messages matched by position to the last list of a body that
    passed are not parsed by upb again: upb gets the rest of the body and the new messages."""
    monkeypatch.setattr(limits, "MESSAGE_MEMO", DecodeMemo())
    parsed: list[int] = []
    check = limits.strict_parse

    def counting(cls: Any, data: bytes, *, runs: bool = False) -> Any:
        parsed.append(len(data))
        return check(cls, data, runs=runs)

    monkeypatch.setattr(limits, "strict_parse", counting)
    first = conversation(4)
    data = wire.encode(first)
    limits.decode_request(data, StreamCompletionRequest, strict)
    assert parsed == [len(data)]
    longer = conversation(5)  # the same 9 messages and 2 more
    more = wire.encode(longer)
    decoded = limits.decode_request(more, StreamCompletionRequest, strict)
    assert decoded == StreamCompletionRequest.parse(more)
    new = sum(len(wire.encode(m)) for m in longer.messages[9:])
    rest = len(wire.without_field(more, MESSAGES) or b"")
    assert rest < parsed[1] < rest + new + 16  # the two new messages and their tags
    assert parsed[1] < len(more) // 3


def test_a_body_refused_by_upb_after_a_matched_run_gets_the_whole_bodys_error(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new message upb refuses, after messages matched to the last list, is refused with
    the error of the whole body; a refused body's list is never kept, so resending it is
    refused again; the conversation without it still decodes."""
    monkeypatch.setattr(limits, "MESSAGE_MEMO", DecodeMemo())
    valid = conversation(3)
    limits.decode_request(wire.encode(valid), StreamCompletionRequest, strict)
    bad = conversation(3)
    bad.messages.append(_deep_message())
    data = wire.encode(bad)
    for _ in range(2):
        with pytest.raises(GRPCError) as info:
            limits.decode_request(data, StreamCompletionRequest, strict)
        assert DEPTH_ERROR in str(info.value.message)
        images = cast("list[bytes]", request_images(data))  # none over the bound here
        kept = limits.MESSAGE_MEMO.lists.match(images, split_message_id(images[0]))
        assert len(kept) == len(valid.messages)  # the valid list, not the refused one
    fresh = DecodeMemo()
    monkeypatch.setattr(limits, "MESSAGE_MEMO", fresh)
    with pytest.raises(GRPCError) as whole:
        limits.decode_request(data, StreamCompletionRequest, strict)
    assert whole.value.message == info.value.message
    again = limits.decode_request(wire.encode(valid), StreamCompletionRequest, strict)
    assert again == valid


def test_the_same_conversation_under_new_ids_resumes_the_repairs_memo(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repairs read the messages' content only: with the decode's content keys, the same
    conversation under new message ids (a dangling call among them) resumes from the kept
    list and the body is byte for byte a fresh translation."""
    memo = HistoryMemo()
    monkeypatch.setattr(openai_request, "HISTORY", memo)
    provider = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9")
    spec = provider.spec_for(MODEL)
    assert spec is not None
    compat = OpenAICompat()
    first = conversation(3)
    first.messages.insert(2, Message(role=Role.USER, id="extra", content=first.messages[0].content))
    for epoch in range(3):
        renamed = StreamCompletionRequest.parse(bytes(first))
        for i, message in enumerate(renamed.messages):
            message.id = f"epoch{epoch}-{i}"
        request = limits.decode_request(wire.encode(renamed), StreamCompletionRequest, strict)
        images = wire.take_images(request, "messages")
        assert isinstance(images, wire.MessageImages) and images.content_keys is not None
        body = build_openai_content(request, spec, compat, TranslationCache(), images)
        fresh = dump_body(build_openai_body(renamed, spec, compat))
        assert body == fresh
        assert NOT_EXECUTED.encode() in fresh  # the dangling call was answered
    assert (memo._lists.hits, memo._lists.misses) == (2, 1)


async def test_the_server_decodes_a_resent_conversation_from_the_memo() -> None:
    """Through the server's memory budget (whose element budget for a body under 2 MB is the
    most the body can hold, not a cut) a resent conversation takes its messages from the
    decode memo, and is answered as the first time."""
    running = await start_server()
    client = ModelClient.connect(running.address)
    try:
        request = conversation(40)
        request.model_id = "reference-large"
        assert len(wire.encode(request)) >= OFFLOAD_MIN_BYTES // 8
        first = [e async for e in client.stream(request, timeout=30)]
        hits = limits.MESSAGE_MEMO.hits
        again = [e async for e in client.stream(request, timeout=30)]
        assert limits.MESSAGE_MEMO.hits == hits + len(request.messages)
        # the same answer (the reference provider's simulated prompt cache aside)
        assert [e.text_delta for e in again] == [e.text_delta for e in first]
        assert again[-1] == first[-1] and first[-1].stop is not None
        assert (await client.describe()).name  # still serving
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)


async def test_a_large_request_is_decoded_validated_and_counted_in_one_worker_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[str] = []
    run_cpu = handlers.run_cpu

    async def counting(size: int, func: Any, *args: Any, **kwargs: Any) -> Any:
        named = func.func if isinstance(func, functools.partial) else func
        steps.append(getattr(named, "__name__", repr(named)))
        return await run_cpu(size, func, *args, **kwargs)

    monkeypatch.setattr(handlers, "run_cpu", counting)
    monkeypatch.setattr(memory_budget, "run_cpu", counting)  # the budgeted decode step
    running = await start_server()
    client = ModelClient.connect(running.address)
    try:
        big = "word " * (OFFLOAD_MIN_BYTES // 5)
        events = [e async for e in client.stream(make_request(big), timeout=30)]
        assert events[-1].stop is not None
        assert steps[:1] == ["_decode_and_check"]
        assert "checked_request" not in steps
        # an invalid large request is refused from that same step, naming the rule
        steps.clear()
        bad = make_request(big, params=GenerationParams(max_output_tokens=10**9))
        events = [e async for e in client.stream(bad, timeout=30)]
        assert events[-1].error is not None
        assert "max_output_tokens" in events[-1].error.message
        assert steps[:1] == ["_decode_and_check"] and "checked_request" not in steps
        assert (await client.describe()).name  # still serving
    finally:
        client.close()
        await running.server.shutdown(grace_period=0)
