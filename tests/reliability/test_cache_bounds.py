"""No RSS creep after large StreamCompletions: every cache the server keeps across calls is bounded
by bytes as well as entries, and a finished call's HTTP/2 stream is not kept by the connection
handler."""

from __future__ import annotations

import asyncio
import json

import pytest
from grpclib.client import Channel

from protocol_py.bounded_text import MAX_LISTED_ITEM_CHARS
from protocol_py.codec.structs import to_struct
from protocol_py.providers.http.body_memo import MAX_KEPT_BODY_BYTES, BodyMemo
from protocol_py.providers.http.translation_cache import TranslationCache, message_key
from protocol_py.providers.reference import provider as reference
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.rules import json_schema
from protocol_py.rules.request import validate_request_shape
from protocol_py.server.grpc_layer.admission import AdmissionHandler
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import Role
from protocol_py_gen.model.v1 import (
    DescribeRequest,
    ModelServiceStub,
    ModelSpec,
    StreamCompletionRequest,
    StreamEvent,
    ToolDeclaration,
)

from .conftest import Served, acall, still_serving, user

MIB = 1024 * 1024


def conversation(turns: int, tag: str) -> StreamCompletionRequest:
    messages = [user(f"message {k} {tag}", f"01J{k:023d}") for k in range(turns)]
    for k, message in enumerate(messages):
        message.role = Role.USER if k % 2 == 0 else Role.ASSISTANT
    return StreamCompletionRequest(
        model_id="reference-large",
        messages=messages,
        call_context=CallContext(session_id="sess-1", turn_id=f"turn-{tag}"),
    )


async def test_reference_prompt_cache_stays_within_its_entry_and_byte_bounds(
    served: Served,
) -> None:
    provider = served.server.provider
    assert isinstance(provider, ReferenceProvider)
    for tag in ("a", "b"):  # two conversations of more segments than the cache holds
        body = bytes(conversation(reference.CACHE_ENTRIES + 1001, tag))
        result = await acall(served.address, "StreamCompletion", body, stream=True)
        assert result.code == "OK", result
        assert StreamEvent.parse(result.replies[-1]).stop is not None
    entries = len(provider._cache)
    print(f"prompt cache: {entries} entries, {provider.cache_bytes} bytes")
    assert entries == reference.CACHE_ENTRIES
    key_bytes = sum(len(key) for key in provider._cache)
    assert provider.cache_bytes == key_bytes + entries * reference.CACHE_ENTRY_OVERHEAD_BYTES
    assert provider.cache_bytes <= reference.CACHE_BYTES
    await still_serving(served)


def test_body_memo_keeps_at_most_its_byte_bound() -> None:
    memo = BodyMemo()
    spec = ModelSpec(id="m")
    first, second = StreamCompletionRequest(model_id="1"), StreamCompletionRequest(model_id="2")
    big = b"x" * (MAX_KEPT_BODY_BYTES // 2 + 1)
    memo.keep(first, spec, big)
    memo.keep(second, spec, big)  # both would exceed the bound: the oldest goes
    assert memo.size_bytes == len(big)
    assert memo.take(first, spec) is None
    assert memo.take(second, spec) is big
    assert memo.size_bytes == 0
    huge = StreamCompletionRequest(model_id="3")
    memo.keep(huge, spec, b"x" * (MAX_KEPT_BODY_BYTES + 1))  # larger than the bound: not kept
    assert (len(memo), memo.size_bytes) == (0, 0)


def test_translation_cache_counts_its_keys_message_encodings() -> None:
    cache = TranslationCache(max_entries=100, max_bytes=3000)
    messages = [user(f"{k}" + "y" * 1000, f"01J{k:023d}") for k in range(4)]
    key = message_key(messages[0])
    assert key is not None
    for message in messages:
        cache.fragment("settings", message, lambda m: b"fragment")
    encoded = len(key)  # the message's encoding without its id
    assert 1000 < encoded < len(bytes(messages[0]))
    # each entry counts 8 fragment bytes + its key's encoding: only two fit in 3000 bytes
    assert len(cache) == 2
    assert cache.size_bytes == 2 * (8 + encoded)
    # the same content under a new id is the same entry
    cache.fragment("settings", user("3" + "y" * 1000, "01JNEW"), lambda m: b"other")
    assert len(cache) == 2 and cache.hits == 1


def test_metaschema_memo_skips_schemas_over_its_size_bound() -> None:
    memo = json_schema._memoised_metaschema_check
    memo.cache_clear()
    small = {"type": "object", "properties": {"a": {"type": "string"}}}
    large = {
        "type": "object",
        "properties": {f"p{k}": {"type": "string"} for k in range(2000)},
    }
    for schema in (small, large):
        tool = ToolDeclaration(name="f", input_schema=to_struct(schema))
        request = StreamCompletionRequest(model_id="m", tools=[tool])
        validate_request_shape(request)
    assert memo.cache_info().currsize == 1  # only the small schema is memoised by its text


def test_a_large_schema_is_checked_once_under_its_digest_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A schema over SCHEMA_MEMO_MAX_CHARS is memoised under the SHA-256 digest of its JSON
    text: resent, it is not checked again; errors come back the same; at most
    LARGE_SCHEMA_MEMO_ENTRIES schemas are kept, the least recently used dropped first."""
    checked: list[int] = []
    check = json_schema._metaschema_check

    def counted(text: str, formats: bool) -> tuple[tuple[str, str], ...]:
        checked.append(len(text))
        return check(text, formats)

    monkeypatch.setattr(json_schema, "_metaschema_check", counted)
    monkeypatch.setattr(json_schema._large_memo, "max_entries", 2)
    json_schema._large_memo.clear()

    def schema(tag: str, bad: bool = False) -> dict[str, object]:
        properties = {f"{tag}{k}": {"type": "string"} for k in range(1000)}
        return {"type": 5 if bad else "object", "properties": properties}

    def errors(value: dict[str, object]) -> list[tuple[str, str]]:
        tool = ToolDeclaration(name="f", input_schema=to_struct(value))
        found = validate_request_shape(StreamCompletionRequest(model_id="m", tools=[tool]))
        return [(v.path, v.rule) for v in found if v.path.startswith("tools")]

    assert len(json.dumps(schema("a"))) > json_schema.SCHEMA_MEMO_MAX_CHARS
    assert errors(schema("a")) == errors(schema("a")) == []
    assert len(checked) == 1
    bad = errors(schema("b", bad=True))
    assert bad == errors(schema("b", bad=True))
    assert ("tools[0].input_schema.type", "request.tools.input_schema.invalid") in bad
    assert len(checked) == 2
    errors(schema("c"))  # a third: "a", the least recently used, is dropped
    assert len(json_schema._large_memo) == 2
    errors(schema("a"))
    assert len(checked) == 4


async def test_finished_calls_leave_no_stream_in_the_connection_handler(served: Served) -> None:
    """grpclib forgot finished streams only every 10th call; the handler kept each one (and
    its buffers) until then."""
    channel = Channel("127.0.0.1", served.port)
    try:
        stub = ModelServiceStub(channel)
        for _ in range(3):
            assert (await stub.describe(DescribeRequest())).producer is not None
        await asyncio.sleep(0.05)
        handlers = [
            p.handler for p in served.server._protocols if isinstance(p.handler, AdmissionHandler)
        ]
        assert len(handlers) == 1  # the channel's connection is still open
        assert handlers[0]._paths == {}
    finally:
        channel.close()
    await still_serving(served)


def test_what_the_schema_memo_keeps_of_an_error_is_cut_whatever_the_caller_text() -> None:
    """jsonschema's message quotes the offending value whole and the path names the schema's
    keys: a 1 MB ``type`` and a 5,000-character property name are kept (and reported) cut to
    MAX_LISTED_ITEM_CHARS bytes each."""
    json_schema._large_memo.clear()
    schema = {"type": "a" * 1_000_000, "properties": {"k" * 5000: {"type": 7}}}
    tool = ToolDeclaration(name="f", input_schema=to_struct(schema))
    found = validate_request_shape(StreamCompletionRequest(model_id="m", tools=[tool]))
    invalid = [v for v in found if v.rule == "request.tools.input_schema.invalid"]
    assert len(invalid) == 2
    assert all(len(v.message) < 2 * MAX_LISTED_ITEM_CHARS for v in invalid)
    assert all(len(v.path) < 2 * MAX_LISTED_ITEM_CHARS for v in invalid)
    kept = [
        text
        for errors, _ in json_schema._large_memo._entries.values()
        for p in errors
        for text in p
    ]
    assert len(kept) == 4 and all(len(text) <= MAX_LISTED_ITEM_CHARS for text in kept)


def test_the_large_schema_memo_keeps_no_more_bytes_than_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each memoised check counts its digest and its errors' characters against
    LARGE_SCHEMA_MEMO_BYTES: a schema with 900 offending locations is counted at about 60 KB,
    and past the bound the oldest entries go."""
    memo = json_schema._large_memo
    memo.clear()
    monkeypatch.setattr(memo, "max_bytes", 100_000)  # one entry is about 60 KB

    def bad(tag: str) -> ToolDeclaration:
        properties = {f"{tag}{k:04d}": {"type": 7} for k in range(900)}
        return ToolDeclaration(name="f", input_schema=to_struct({"properties": properties}))

    for tag in ("a", "b"):
        found = validate_request_shape(StreamCompletionRequest(model_id="m", tools=[bad(tag)]))
        assert len([v for v in found if v.rule == "request.tools.input_schema.invalid"]) == 900
    assert len(memo) == 1 and 50_000 < memo.size_bytes <= 100_000
