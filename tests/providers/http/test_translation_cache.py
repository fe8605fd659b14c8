"""The per-message translation cache never changes the bytes sent.

``build_openai_content`` with a cold cache, a warm cache, and after messages change under the
same id must equal ``dump_body(build_openai_body(...))`` byte for byte; the cache stays within
its bounds; a provider whose ``build_body`` is replaced sends exactly that body.
"""

from __future__ import annotations

import pytest

from protocol_py.codec import wire
from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.http.translation_cache import TranslationCache, message_key
from protocol_py.providers.openai.provider import DeepSeekProvider, OpenAIProvider
from protocol_py.providers.openai.request import (
    OpenAICompat,
    build_openai_body,
    build_openai_content,
)
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import (
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingReplay,
    ThinkingSpec,
    ToolDeclaration,
)


def turn(n: int, *, system: bool = True) -> StreamCompletionRequest:
    """Turn ``n`` of a conversation: the first ``2n + 1`` messages (each turn a prefix of the
    next), with thinking, an image, a thinking-only assistant message and unicode."""
    messages = [
        Message(role=Role.USER, id="u0", content=[ContentBlock(text=TextBlock(text="go \u00e9"))])
    ]
    for i in range(1, n + 1):
        content = [
            ContentBlock(thinking=ThinkingBlock(text=f"think {i}", signature=b"sig")),
            ContentBlock(text=TextBlock(text=f"step {i} \U0001f600")),
            ContentBlock(
                tool_use=ToolUseBlock(
                    id=f"c{i}",
                    name="shell",
                    input=to_struct({"z": i, "a": [1.5, None, -0.0], "nested": {"k": "\n"}}),
                )
            ),
        ]
        if i == 2:
            content = [ContentBlock(thinking=ThinkingBlock(text="only thinking"))]
        messages.append(Message(role=Role.ASSISTANT, id=f"a{i}", content=content))
        result = [ContentBlock(text=TextBlock(text="out\t" * 50))]
        user_content = [
            ContentBlock(tool_result=ToolResultBlock(tool_use_id=f"c{i}", content=result))
        ]
        if i == 3:
            user_content.append(
                ContentBlock(image=ImageBlock(data=b"\x89PNG", media_type="image/png"))
            )
            user_content.append(ContentBlock(text=TextBlock(text="and this")))
        if i == 2:
            user_content = [ContentBlock(text=TextBlock(text="continue"))]
        messages.append(Message(role=Role.USER, id=f"u{i}", content=user_content))
    return StreamCompletionRequest(
        model_id="gpt-x",
        messages=messages,
        assembled_context=[
            ContextSection(label="sys", content=[ContentBlock(text=TextBlock(text="be brief"))])
        ]
        if system
        else [],
        tools=[ToolDeclaration(name="shell", input_schema=to_struct({"type": "object"}))],
        params=GenerationParams(max_output_tokens=100, temperature=0.5),
        call_context=CallContext(session_id="s", turn_id=f"t{n}"),
    )


def spec(replay: ThinkingReplay) -> ModelSpec:
    return ModelSpec(
        id="gpt-x",
        context_window=100_000,
        max_output_tokens=1000,
        thinking=ThinkingSpec(supported=True, replay=replay),
    )


@pytest.mark.parametrize("replay", list(ThinkingReplay))
@pytest.mark.parametrize("system", [True, False])
def test_cached_body_equals_a_fresh_translation_turn_after_turn(
    replay: ThinkingReplay, system: bool
) -> None:
    cache = TranslationCache()
    compat = OpenAICompat()
    for n in range(6):
        request = turn(n, system=system)
        fresh = dump_body(build_openai_body(request, spec(replay), compat))
        assert build_openai_content(request, spec(replay), compat, cache) == fresh
        assert build_openai_content(request, spec(replay), compat, cache) == fresh  # warm
    assert cache.hits > 0
    assert cache.misses == 1 + 2 * 5  # every message translated once


def test_a_changed_message_under_the_same_id_is_translated_again() -> None:
    cache = TranslationCache()
    compat = OpenAICompat()
    request = turn(3)
    build_openai_content(request, spec(ThinkingReplay.ALL), compat, cache)
    changed = turn(3)
    assert changed.messages[1].content[2].tool_use is not None
    changed.messages[1].content[2].tool_use.input = to_struct({"z": 1.0, "a": [1.5, None, 0.0]})
    changed.messages[2].content[0].tool_result.content[0].text.text = "x"  # type: ignore[union-attr]
    fresh = dump_body(build_openai_body(changed, spec(ThinkingReplay.ALL), compat))
    assert build_openai_content(changed, spec(ThinkingReplay.ALL), compat, cache) == fresh
    assert message_key(request.messages[1]) != message_key(changed.messages[1])


def renamed(request: StreamCompletionRequest, prefix: str) -> StreamCompletionRequest:
    """``request`` with every message id new (the same content), as after a compaction."""
    copy = StreamCompletionRequest.parse(bytes(request))
    for i, message in enumerate(copy.messages):
        message.id = f"{prefix}{i}"
    return copy


@pytest.mark.parametrize("with_images", [False, True])
def test_the_same_messages_under_new_ids_hit_and_send_the_same_bytes(with_images: bool) -> None:
    cache = TranslationCache()
    compat = OpenAICompat()
    first = turn(5)

    def build(request: StreamCompletionRequest) -> bytes:
        images = [wire.encode(m) for m in request.messages] if with_images else None
        return build_openai_content(
            request,
            spec(ThinkingReplay.ALL),
            compat,
            cache,
            list[bytes | None](images) if images is not None else None,
        )

    assert build(first) == dump_body(build_openai_body(first, spec(ThinkingReplay.ALL), compat))
    misses = cache.misses
    assert misses == len(first.messages)
    again = renamed(first, "new-")
    assert [m.id for m in again.messages] != [m.id for m in first.messages]
    fresh = dump_body(build_openai_body(again, spec(ThinkingReplay.ALL), compat))
    assert build(again) == fresh
    assert cache.misses == misses  # every message found under its new id
    assert message_key(again.messages[1]) == message_key(first.messages[1])


def test_settings_are_part_of_the_key() -> None:
    cache = TranslationCache()
    request = turn(2)
    for compat in (OpenAICompat(), OpenAICompat(reasoning_replay_field="reasoning")):
        for replay in (ThinkingReplay.ALL, ThinkingReplay.OMIT):
            fresh = dump_body(build_openai_body(request, spec(replay), compat))
            assert build_openai_content(request, spec(replay), compat, cache) == fresh


def test_a_translation_error_is_raised_and_nothing_cached() -> None:
    cache = TranslationCache()
    bad = turn(1)
    bad.messages.append(Message(role=Role.UNSPECIFIED, id="x", content=[]))
    with pytest.raises(InvalidValueError, match=r"messages\[3\]\.role"):
        build_openai_content(bad, spec(ThinkingReplay.ALL), OpenAICompat(), cache)
    with pytest.raises(InvalidValueError, match=r"messages\[3\]\.role"):
        build_openai_body(bad, spec(ThinkingReplay.ALL), OpenAICompat())
    assert len(cache) == 3


def test_cache_stays_within_its_entry_and_byte_bounds() -> None:
    cache = TranslationCache(max_entries=4, max_bytes=10_000)
    compat = OpenAICompat()
    request = turn(5)
    body = build_openai_content(request, spec(ThinkingReplay.ALL), compat, cache)
    assert body == dump_body(build_openai_body(request, spec(ThinkingReplay.ALL), compat))
    assert len(cache) == 4
    small = TranslationCache(max_entries=100, max_bytes=300)
    build_openai_content(request, spec(ThinkingReplay.ALL), compat, small)
    assert small.size_bytes <= 300


@pytest.mark.parametrize("cls", [OpenAIProvider, DeepSeekProvider])
def test_provider_build_content_equals_its_body(cls: type[OpenAIProvider]) -> None:
    provider = cls(api_key="k", base_url="http://127.0.0.1:9")
    model = provider.catalog()[0]
    request = turn(4)
    request.model_id = model.id
    expected = dump_body(provider.build_body(request, model))
    assert provider.build_content(request, model) == expected
    assert provider.build_content(request, model) == expected


def test_a_replaced_build_body_is_what_is_sent() -> None:
    provider = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9")
    model = provider.catalog()[0]
    provider.build_body = lambda request, spec: {"custom": True}  # type: ignore[method-assign]
    assert provider.build_content(turn(1), model) == b'{"custom":true}'


def keyed_images(request: StreamCompletionRequest) -> wire.MessageImages:
    """The images and content keys the server's decode hands along for ``request``."""
    images: list[bytes | None] = [wire.encode(m) for m in request.messages]
    return wire.MessageImages(images, [wire.content_key(i) for i in images if i is not None])


def test_with_content_keys_a_conversation_under_new_ids_takes_its_list_in_one_step() -> None:
    cache = TranslationCache()
    compat = OpenAICompat()
    settings = spec(ThinkingReplay.ALL)

    def build(request: StreamCompletionRequest) -> bytes:
        body = build_openai_content(request, settings, compat, cache, keyed_images(request))
        assert body == dump_body(build_openai_body(request, settings, compat))
        return body

    build(turn(4))
    misses, list_hits = cache.misses, cache._lists.hits
    build(renamed(turn(4), "restart-"))  # every id new: the list matches by content
    assert (cache.misses, cache._lists.hits) == (misses, list_hits + 1)
    build(renamed(turn(5), "later-"))  # the list plus two new messages
    assert (cache.misses, cache._lists.hits) == (misses + 2, list_hits + 2)
    changed = renamed(turn(5), "edited-")
    changed.messages[4].content[0].text.text = "rewritten"  # type: ignore[union-attr]
    build(changed)  # the list stops at the changed message: it alone is translated again
    assert cache.misses == misses + 3
    # keys that do not match the images' count are not used
    assert wire.MessageImages([b"a", b"b"], [b"a"]).content_keys is None
