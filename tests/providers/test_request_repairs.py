"""Requests a vendor would refuse: repaired where the repair does not change what was asked,
otherwise refused with the field and a stable rule id, before any vendor call."""

from __future__ import annotations

from typing import Any

import pytest

from protocol_py.codec import wire
from protocol_py.errors import InvalidValueError
from protocol_py.providers import catalog
from protocol_py.providers.anthropic.request import build_anthropic_body
from protocol_py.providers.http.call_ids import OPENAI_TOOL_CALL_ID, vendor_id_entry
from protocol_py.providers.http.history import NOT_EXECUTED
from protocol_py.providers.http.request import dump_body
from protocol_py.providers.http.translation_cache import TranslationCache
from protocol_py.providers.openai.request import (
    OpenAICompat,
    build_openai_body,
    build_openai_content,
)
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
)


def model(model_id: str) -> ModelSpec:
    everything = catalog.anthropic_models() + catalog.openai_models()
    return next(m for m in everything if m.id == model_id)


def user(mid: str, *blocks: ContentBlock) -> Message:
    return Message(role=Role.USER, id=mid, content=list(blocks))


def assistant(mid: str, *blocks: ContentBlock, provider: str = "anthropic") -> Message:
    return Message(role=Role.ASSISTANT, id=mid, content=list(blocks), produced_by_provider=provider)


def text(value: str) -> ContentBlock:
    return ContentBlock(text=TextBlock(text=value))


def call(call_id: str, *vendor: Any) -> ContentBlock:
    return ContentBlock(tool_use=ToolUseBlock(id=call_id, name="f", vendor_data=list(vendor)))


def answer(call_id: str) -> ContentBlock:
    return ContentBlock(tool_result=ToolResultBlock(tool_use_id=call_id, content=[text("ok")]))


def thought(signature: bytes = b"SIG") -> ContentBlock:
    return ContentBlock(thinking=ThinkingBlock(text="hmm", signature=signature))


def request(*messages: Message, **params: Any) -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id="claude-haiku-4-5",
        messages=list(messages),
        params=GenerationParams(**params) if params else None,
    )


# -- thinking and the final assistant turn (Anthropic) ----------------------------------------


def test_a_tool_loop_that_began_without_thinking_is_sent_without_thinking() -> None:
    """The model was switched mid-loop: the answered turn has no thinking in front of its call;
    with thinking on, Anthropic would refuse it; the loop's continuation does not think anyway."""
    req = request(
        user("u1", text("go")),
        assistant("a1", call("toolu_1"), provider="openai"),
        user("u2", answer("toolu_1")),
        thinking_budget_tokens=2048,
    )
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert "thinking" not in body
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]


def test_thinking_in_the_loop_keeps_thinking_on() -> None:
    req = request(
        user("u1", text("go")),
        assistant("a1", thought(), call("toolu_1")),
        user("u2", answer("toolu_1")),
        thinking_budget_tokens=2048,
    )
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "tool_use"]


def test_with_thinking_off_the_final_turn_carries_no_thinking_but_earlier_turns_do() -> None:
    req = request(
        user("u1", text("go")),
        assistant("a1", thought(b"OLD"), text("first answer")),
        user("u2", text("and now?")),
        assistant("a2", thought(), call("toolu_1")),
        user("u3", answer("toolu_1")),
    )
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert "thinking" not in body
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "text"]
    assert [b["type"] for b in body["messages"][3]["content"]] == ["tool_use"]


def test_an_adaptive_model_keeps_its_final_turn_as_it_is() -> None:
    req = request(
        user("u1", text("go")),
        assistant("a1", thought(), call("toolu_1")),
        user("u2", answer("toolu_1")),
    )
    req.model_id = "claude-opus-5-5"
    body = build_anthropic_body(req, model("claude-opus-5-5"))
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "tool_use"]


# -- dangling calls ---------------------------------------------------------------------------


def test_a_call_followed_by_another_assistant_message_gets_a_user_message_of_results() -> None:
    req = request(
        user("u1", text("go")),
        assistant("a1", call("toolu_1"), call("toolu_2")),
        assistant("a2", text("never mind")),
        user("u2", text("next")),
    )
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [(b["tool_use_id"], b["is_error"]) for b in body["messages"][2]["content"]] == [
        ("toolu_1", True),
        ("toolu_2", True),
    ]
    openai = build_openai_body(req, model("gpt-6-sol"), OpenAICompat())
    assert [m["role"] for m in openai["messages"]] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert openai["messages"][2]["content"] == NOT_EXECUTED


def test_a_partly_answered_turn_gets_only_the_missing_results_in_call_order() -> None:
    req = request(
        user("u1", text("go")),
        assistant("a1", call("toolu_1"), call("toolu_2")),
        user("u2", text("note"), answer("toolu_2")),
    )
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    content = body["messages"][2]["content"]
    assert [(b["type"], b.get("tool_use_id"), b.get("is_error")) for b in content] == [
        ("tool_result", "toolu_2", None),
        ("tool_result", "toolu_1", True),
        ("text", None, None),
    ]


def test_the_repaired_history_is_never_served_from_the_translation_cache_stale() -> None:
    req = request(user("u1", text("go")), assistant("a1", call("c1")), user("u2", text("other")))
    req.model_id = "gpt-6-sol"
    spec = model("gpt-6-sol")
    images = [wire.encode(m) for m in req.messages]
    cache = TranslationCache()
    for _ in range(2):  # a cold and a warm cache
        content = build_openai_content(req, spec, OpenAICompat(), cache, images)
        assert content == dump_body(build_openai_body(req, spec, OpenAICompat()))


# -- ids the vendor cannot take ---------------------------------------------------------------


def test_another_vendors_ids_are_sent_to_anthropic_as_stable_derived_ids() -> None:
    req = request(
        user("u1", text("go")),
        assistant("a1", call("functions.read_file:0"), provider="openai"),
        user("u2", answer("functions.read_file:0")),
    )
    first = build_anthropic_body(req, model("claude-haiku-4-5"))
    again = build_anthropic_body(req, model("claude-haiku-4-5"))
    sent = first["messages"][1]["content"][0]["id"]
    assert sent.startswith("toolu_") and len(sent) == 32 and sent.replace("_", "").isalnum()
    assert first["messages"][2]["content"][0]["tool_use_id"] == sent
    assert dump_body(first) == dump_body(again)  # stable turn after turn


def test_an_id_over_40_characters_is_shortened_for_chat_completions() -> None:
    long_id = "toolu_" + "x" * 60
    kept = "read_file:0"
    req = request(
        user("u1", text("go")),
        assistant("a1", call(long_id), call("call_k", vendor_id_entry(OPENAI_TOOL_CALL_ID, kept))),
        user("u2", answer(long_id), answer("call_k")),
    )
    body = build_openai_body(req, model("gpt-6-sol"), OpenAICompat())
    ids = [c["id"] for c in body["messages"][1]["tool_calls"]]
    assert len(ids[0]) == 31 and ids[0].startswith("call_")
    assert ids[1] == kept  # the vendor's own id, kept as vendor data, goes back
    assert [m["tool_call_id"] for m in body["messages"][2:4]] == ids


# -- refusals ---------------------------------------------------------------------------------


def refused(build: Any) -> tuple[str | None, str | None]:
    with pytest.raises(InvalidValueError) as info:
        build()
    return info.value.path, info.value.rule


def test_more_cache_markers_than_the_model_takes_are_refused() -> None:
    messages = [user(f"u{i}", text(f"t{i}")) for i in range(5)]
    req = request(*messages)
    req.cache_breakpoints = [CacheBreakpoint(after_message_index=i) for i in range(5)]
    assert refused(lambda: build_anthropic_body(req, model("claude-haiku-4-5"))) == (
        "cache_breakpoints",
        "request.cache_breakpoints.too_many",
    )
    req.cache_breakpoints = req.cache_breakpoints[:4]
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert sum("cache_control" in m["content"][0] for m in body["messages"][:4]) == 4


def test_a_one_hour_breakpoint_is_a_1h_marker_and_must_come_first() -> None:
    req = request(user("u1", text("a")), user("u2", text("b")))
    req.cache_breakpoints = [
        CacheBreakpoint(after_tools=Empty(), ttl_seconds=3600),
        CacheBreakpoint(after_message_index=1, ttl_seconds=300),
    ]
    req.tools = []
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert body["messages"][1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    req.cache_breakpoints = [
        CacheBreakpoint(after_message_index=0, ttl_seconds=3600),
        CacheBreakpoint(after_message_index=1),
    ]
    body = build_anthropic_body(req, model("claude-haiku-4-5"))
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    req.cache_breakpoints = [
        CacheBreakpoint(after_message_index=0),
        CacheBreakpoint(after_message_index=1, ttl_seconds=3600),
    ]
    assert refused(lambda: build_anthropic_body(req, model("claude-haiku-4-5"))) == (
        "cache_breakpoints",
        "adapter.anthropic.cache_control.ttl_order",
    )
    req.cache_breakpoints = [CacheBreakpoint(after_message_index=0, ttl_seconds=600)]
    assert refused(lambda: build_anthropic_body(req, model("claude-haiku-4-5"))) == (
        "cache_breakpoints.ttl_seconds",
        "request.cache_breakpoints.ttl_unsupported",
    )


def test_stop_sequences_a_model_refuses_are_refused_not_dropped() -> None:
    spec = model("gpt-6-sol")
    spec.supports_stop_sequences = False
    req = request(user("u1", text("go")), stop_sequences=["END"])
    req.model_id = spec.id
    assert refused(lambda: build_openai_body(req, spec, OpenAICompat())) == (
        "params.stop_sequences",
        "request.params.stop_sequences.unsupported",
    )
    spec.supports_stop_sequences = None
    spec.max_stop_sequences = 1
    req.params = GenerationParams(stop_sequences=["A", "B"])
    assert refused(lambda: build_anthropic_body(req, spec)) == (
        "params.stop_sequences",
        "request.params.stop_sequences.too_many",
    )


def test_a_growing_conversation_is_repaired_the_same_from_the_memo() -> None:
    """Turn after turn the repairs' memo skips the kept messages: the bytes equal a fresh
    translation, a dangling call in the kept part included."""
    spec = model("gpt-6-sol")
    history = [
        user("u0", text("go")),
        assistant("a0", call("c0", vendor_id_entry(OPENAI_TOOL_CALL_ID, "read_file:0"))),
        user("u1", text("never mind")),
    ]
    cache = TranslationCache()
    for turn in range(1, 4):
        history += [
            assistant(f"a{turn}", call(f"c{turn}")),
            user(f"r{turn}", answer(f"c{turn}")),
        ]
        req = request(*history)
        req.model_id = spec.id
        images = [wire.encode(m) for m in req.messages]
        content = build_openai_content(req, spec, OpenAICompat(), cache, images)
        fresh = build_openai_body(req, spec, OpenAICompat())
        assert content == dump_body(fresh)
        assert fresh["messages"][1]["tool_calls"][0]["id"] == "read_file:0"
        assert fresh["messages"][2] == {
            "role": "tool",
            "tool_call_id": "read_file:0",
            "content": NOT_EXECUTED,
        }
