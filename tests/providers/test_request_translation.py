"""Request translation: fixture request bodies, replay rules (B06, B08, B09, B10), cache
markers, tool choice, effort collapse and prefix-stable serialization."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.anthropic.request import build_anthropic_body
from protocol_py.providers.http.request import collapse_effort, dump_body
from protocol_py.providers.openai.request import OpenAICompat, build_openai_body
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    DocumentBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    CachingSpec,
    EffortControl,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    StreamEvent,
    ThinkingDisable,
    ThinkingReplay,
    ThinkingSpec,
    ToolChoice,
    ToolChoiceMode,
    ToolDeclaration,
)

from ..support.adapters import (
    VENDOR,
    kinds,
    lines_to_bytes,
    load_case,
    load_fixture,
    translate_body,
)
from ._vendor_calls import user

OPENAI = OpenAICompat()
OPENAI_NO_USAGE = OpenAICompat(stream_usage=False)
DEEPSEEK = OpenAICompat(
    max_tokens_field="max_tokens",
    default_replay=ThinkingReplay.TOOL_TURNS,
    thinking_switch="deepseek",
)


def spec(
    model: str,
    *,
    explicit_markers: bool = False,
    replay: ThinkingReplay = ThinkingReplay.UNSPECIFIED,
    levels: tuple[str, ...] = (),
) -> ModelSpec:
    return ModelSpec(
        id=model,
        context_window=200_000,
        max_output_tokens=64_000,
        supports_tool_use=True,
        thinking=ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=list(levels), default=levels[-1]) if levels else None,
            disable=ThinkingDisable.ALWAYS,
            replay=replay,
        ),
        caching=CachingSpec(supported=True, explicit_markers=explicit_markers),
    )


def text(role: Role, value: str, mid: str = "m") -> Message:
    return Message(role=role, id=mid, content=[ContentBlock(text=TextBlock(text=value))])


def context(value: str) -> list[ContextSection]:
    return [ContextSection(label="system", content=[ContentBlock(text=TextBlock(text=value))])]


def body_of(name: str) -> dict[str, Any]:
    meta, _ = load_fixture(VENDOR / f"{name}.json")
    body: dict[str, Any] = meta["request"]["body"]
    return body


def user_text(body: dict[str, Any], index: int = -1) -> str:
    content: str = body["messages"][index]["content"]
    return content


# --- fixture request bodies ----------------------------------------------------------------


def test_openai_text_include_usage_body() -> None:
    want = body_of("openai_text_include_usage")
    req = StreamCompletionRequest(
        model_id="gpt-4.1",
        messages=[text(Role.USER, user_text(want))],
        assembled_context=context(want["messages"][0]["content"]),
        params=GenerationParams(max_output_tokens=200),
    )
    assert build_openai_body(req, spec("gpt-4.1"), OPENAI) == want


def test_openai_429_and_content_filter_bodies() -> None:
    want = body_of("http_429_openai_rate_limited")
    req = StreamCompletionRequest(model_id="gpt-4.1", messages=[text(Role.USER, user_text(want))])
    assert build_openai_body(req, spec("gpt-4.1"), OPENAI) == want
    want = body_of("openai_content_filter")
    req = StreamCompletionRequest(
        model_id="gpt-4.1-mini", messages=[text(Role.USER, user_text(want))]
    )
    assert build_openai_body(req, spec("gpt-4.1-mini"), OPENAI_NO_USAGE) == want


def test_openai_length_body_with_provider_options() -> None:
    want = body_of("openai_length")
    req = StreamCompletionRequest(
        model_id="o4-mini",
        messages=[text(Role.USER, user_text(want))],
        params=GenerationParams(max_output_tokens=40, thinking_effort="low"),
        provider_options=to_struct({"stream_options": want["stream_options"]}),
    )
    got = build_openai_body(req, spec("o4-mini", levels=("low", "medium", "high")), OPENAI)
    assert got == want
    assert list(got) == list(want)  # key order too: provider option replaced in place


def test_deepseek_body() -> None:
    want = body_of("deepseek_reasoning_cache_keepalive")
    req = StreamCompletionRequest(
        model_id="deepseek-v4-pro",
        messages=[text(Role.USER, user_text(want))],
        assembled_context=context(want["messages"][0]["content"]),
        params=GenerationParams(
            max_output_tokens=4096, thinking_effort="high", disable_thinking=False
        ),
    )
    got = build_openai_body(req, spec("deepseek-v4-pro", levels=("high", "max")), DEEPSEEK)
    assert got == want
    assert list(got) == list(want)


@pytest.mark.parametrize(
    ("name", "params", "markers"),
    [
        ("anthropic_text_plain", GenerationParams(max_output_tokens=512), True),
        (
            "anthropic_thinking_signature",
            GenerationParams(max_output_tokens=8000, thinking_budget_tokens=4000),
            False,
        ),
        (
            "anthropic_redacted_thinking",
            GenerationParams(max_output_tokens=4096, thinking_budget_tokens=2048),
            False,
        ),
        (
            "anthropic_stop_sequence",
            GenerationParams(max_output_tokens=200, stop_sequences=["END_OF_LIST", "\n\nHuman:"]),
            False,
        ),
        ("anthropic_refusal", GenerationParams(max_output_tokens=1024), False),
    ],
)
def test_anthropic_fixture_bodies(name: str, params: GenerationParams, markers: bool) -> None:
    want = body_of(name)
    system = want.get("system")
    req = StreamCompletionRequest(
        model_id=want["model"],
        messages=[text(Role.USER, user_text(want))],
        assembled_context=context(system[0]["text"]) if system else [],
        params=params,
        cache_breakpoints=([CacheBreakpoint(after_assembled_context=Empty())] if markers else []),
    )
    got = build_anthropic_body(req, spec(want["model"], explicit_markers=markers))
    assert got == want
    assert list(got) == list(want)


def test_cache_breakpoints_ignored_without_explicit_markers() -> None:
    want = body_of("anthropic_text_plain")
    req = StreamCompletionRequest(
        model_id=want["model"],
        messages=[text(Role.USER, "hi")],
        assembled_context=context("sys"),
        cache_breakpoints=[
            CacheBreakpoint(after_assembled_context=Empty()),
            CacheBreakpoint(after_message_index=0),
        ],
    )
    got = build_anthropic_body(req, spec(want["model"], explicit_markers=False))
    assert "cache_control" not in json.dumps(got)
    got = build_anthropic_body(req, spec(want["model"], explicit_markers=True))
    assert got["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert got["messages"][0]["content"] == [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    ]


# --- replay from streamed events -----------------------------------------------------------


def anthropic_stream(case_id: str) -> list[StreamEvent]:
    lines = load_case(case_id)["input"]["lines"]
    return translate_body("anthropic", 200, {}, lines_to_bytes(lines))


@pytest.mark.parametrize("case_id", ["B06", "B08"])
def test_anthropic_replay_content_byte_for_byte(case_id: str) -> None:
    case = load_case(case_id)
    assistant = accumulate(anthropic_stream(case_id)).message
    req = StreamCompletionRequest(
        model_id="claude-x",
        messages=[text(Role.USER, "q", "u1"), assistant, text(Role.USER, "next", "u2")],
    )
    body = build_anthropic_body(req, spec("claude-x"))
    assert body["messages"][1] == {
        "role": "assistant",
        "content": case["expected"]["anthropic_replay_content"],
    }
    raw = dump_body(body)
    for item in case["expected"]["anthropic_replay_content"]:
        for key in ("signature", "data"):
            if key in item:
                assert json.dumps(item[key]).encode() in raw


def test_unsigned_thinking_of_interrupted_turn_is_not_replayed() -> None:
    events = anthropic_stream("B09")
    assert kinds(events)[-1] == "error"
    assistant = accumulate(events).message
    assert assistant.content[0].thinking is not None
    assert assistant.content[0].thinking.signature == b""
    req = StreamCompletionRequest(
        model_id="claude-x",
        messages=[text(Role.USER, "q", "u1"), assistant, text(Role.USER, "again", "u2")],
    )
    body = build_anthropic_body(req, spec("claude-x"))
    assert '"type":"thinking"' not in dump_body(body).decode()
    assert [m["role"] for m in body["messages"]] == ["user", "user"]
    # a signed block in the same turn is still replayed, in order
    assistant.content.insert(
        0, ContentBlock(thinking=ThinkingBlock(text="earlier", signature=b"SIG"))
    )
    body = build_anthropic_body(req, spec("claude-x"))
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "earlier", "signature": "SIG"}
    ]


def deepseek_history() -> tuple[Message, list[Message]]:
    case = load_case("B10")
    events = translate_body("openai", 200, {}, lines_to_bytes(case["input"]["lines"]))
    assistant = accumulate(events).message
    result = Message(
        role=Role.USER,
        id="u2",
        content=[
            ContentBlock(
                tool_result=ToolResultBlock(
                    tool_use_id="call_00_X",
                    content=[ContentBlock(text=TextBlock(text="10:30 UTC"))],
                )
            )
        ],
    )
    return assistant, [text(Role.USER, "What time is it?", "u1"), assistant, result]


def test_deepseek_reasoning_replay_on_tool_turns() -> None:
    case = load_case("B10")
    assistant, messages = deepseek_history()
    tools = [ToolDeclaration(name="get_current_time", input_schema=to_struct({"type": "object"}))]
    req = StreamCompletionRequest(model_id="deepseek-v4-flash", messages=messages, tools=tools)
    model = spec("deepseek-v4-flash", replay=ThinkingReplay.TOOL_TURNS)
    body = build_openai_body(req, model, DEEPSEEK)
    replayed = body["messages"][1]
    subset = case["expected"]["replayed_assistant_message_subset"]
    assert {k: replayed[k] for k in subset} == subset
    assert body["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_00_X",
        "content": "10:30 UTC",
    }
    # a tool-calling turn without a thinking block replays an empty reasoning_content
    assistant.content = [b for b in assistant.content if b.thinking is None]
    body = build_openai_body(req, model, DEEPSEEK)
    assert (
        body["messages"][1]["reasoning_content"]
        == case["expected"]["if_history_message_has_no_thinking_block"]["reasoning_content"]
    )
    # OMIT: the same message without the key
    body = build_openai_body(req, spec("deepseek-v4-flash", replay=ThinkingReplay.OMIT), DEEPSEEK)
    assert "reasoning_content" not in body["messages"][1]
    # a plain (no tool call) assistant turn never carries reasoning under TOOL_TURNS
    plain = Message(
        role=Role.ASSISTANT,
        id="a2",
        content=[
            ContentBlock(thinking=ThinkingBlock(text="hmm")),
            ContentBlock(text=TextBlock(text="It is 10:30.")),
        ],
    )
    req = StreamCompletionRequest(model_id="m", messages=[*messages, plain, text(Role.USER, "ok")])
    body = build_openai_body(req, model, DEEPSEEK)
    assert body["messages"][3] == {"role": "assistant", "content": "It is 10:30."}


# --- controls --------------------------------------------------------------------------------


def test_tool_choice_modes_both_vendors() -> None:
    tools = [ToolDeclaration(name="f", description="d", input_schema=to_struct({"type": "object"}))]
    expect = {
        ToolChoiceMode.AUTO: ("auto", {"type": "auto"}),
        ToolChoiceMode.ANY: ("required", {"type": "any"}),
        ToolChoiceMode.NONE: ("none", {"type": "none"}),
        ToolChoiceMode.SPECIFIC: (
            {"type": "function", "function": {"name": "f"}},
            {"type": "tool", "name": "f"},
        ),
    }
    for mode, (oa, an) in expect.items():
        choice = ToolChoice(mode=mode, tool_name="f" if mode == ToolChoiceMode.SPECIFIC else None)
        req = StreamCompletionRequest(
            model_id="m",
            messages=[text(Role.USER, "x")],
            tools=tools,
            params=GenerationParams(tool_choice=choice),
        )
        assert build_openai_body(req, spec("m"), OPENAI)["tool_choice"] == oa
        assert build_anthropic_body(req, spec("m"))["tool_choice"] == an
    assert build_openai_body(req, spec("m"), OPENAI)["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        }
    ]
    assert build_anthropic_body(req, spec("m"))["tools"] == [
        {"name": "f", "description": "d", "input_schema": {"type": "object"}}
    ]


def test_effort_ladder_collapse() -> None:
    assert collapse_effort("low", ("high", "max")) == "high"
    assert collapse_effort("medium", ("high", "max")) == "high"
    assert collapse_effort("xhigh", ("high", "max")) == "max"
    assert collapse_effort("max", ("low", "medium", "high")) == "high"
    assert collapse_effort("minimal", ("low", "medium", "high")) == "low"
    assert collapse_effort("high", ()) == "high"
    assert collapse_effort("turbo", ("low",)) == "turbo"


def test_thinking_controls_mapping() -> None:
    base = {"model_id": "m", "messages": [text(Role.USER, "x")]}
    req = StreamCompletionRequest(**base, params=GenerationParams(disable_thinking=True))
    assert build_anthropic_body(req, spec("m"))["thinking"] == {"type": "disabled"}
    assert build_openai_body(req, spec("m"), DEEPSEEK)["thinking"] == {"type": "disabled"}
    assert build_openai_body(req, spec("m"), OPENAI)["reasoning_effort"] == "none"
    req = StreamCompletionRequest(**base, params=GenerationParams(thinking_effort="medium"))
    body = build_anthropic_body(req, spec("m", levels=("low", "medium", "high")))
    assert body["output_config"] == {"effort": "medium"}
    collapsed = OpenAICompat(effort_levels=("high", "max"))
    assert build_openai_body(req, spec("m"), collapsed)["reasoning_effort"] == "high"
    req = StreamCompletionRequest(
        **base, params=GenerationParams(temperature=0.5, max_output_tokens=10)
    )
    assert build_openai_body(req, spec("m"), DEEPSEEK)["max_tokens"] == 10
    assert build_openai_body(req, spec("m"), OPENAI)["max_completion_tokens"] == 10
    assert build_anthropic_body(req, spec("m"))["temperature"] == 0.5
    assert build_anthropic_body(StreamCompletionRequest(**base), spec("m"))["max_tokens"] == 64_000


def test_reserved_provider_options_rejected() -> None:
    req = StreamCompletionRequest(
        model_id="m",
        messages=[text(Role.USER, "x")],
        provider_options=to_struct({"messages": []}),
    )
    with pytest.raises(InvalidValueError, match=r"provider_options\.messages"):
        build_openai_body(req, spec("m"), OPENAI)
    with pytest.raises(InvalidValueError, match=r"provider_options\.messages"):
        build_anthropic_body(req, spec("m"))


def test_non_utf8_signature_rejected_with_path() -> None:
    bad = Message(
        role=Role.ASSISTANT,
        id="a",
        content=[ContentBlock(thinking=ThinkingBlock(text="t", signature=b"\xff\xfe"))],
    )
    req = StreamCompletionRequest(model_id="m", messages=[text(Role.USER, "x"), bad])
    with pytest.raises(
        InvalidValueError, match=r"messages\[1\]\.content\[0\]\.thinking\.signature"
    ):
        build_anthropic_body(req, spec("m"))


# --- prefix stability ----------------------------------------------------------------------


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = []
    for t in range(turns):
        messages.append(text(Role.USER, f"question {t} \u2028 ünïcode", f"u{t}"))
        if t < turns - 1:
            messages.append(
                Message(
                    role=Role.ASSISTANT,
                    id=f"a{t}",
                    content=[
                        ContentBlock(thinking=ThinkingBlock(text=f"think {t}", signature=b"S/+=")),
                        ContentBlock(redacted_thinking=RedactedThinkingBlock(data=b"R==")),
                        ContentBlock(text=TextBlock(text=f"answer {t}")),
                        ContentBlock(
                            tool_use=ToolUseBlock(
                                id=f"call_{t}", name="f", input=to_struct({"b": 1, "a": [1.5, "x"]})
                            )
                        ),
                    ],
                )
            )
            messages.append(
                Message(
                    role=Role.USER,
                    id=f"r{t}",
                    content=[
                        ContentBlock(
                            tool_result=ToolResultBlock(
                                tool_use_id=f"call_{t}",
                                content=[ContentBlock(text=TextBlock(text="ok"))],
                            )
                        )
                    ],
                )
            )
    return messages


@pytest.mark.parametrize("vendor", ["openai", "deepseek", "anthropic"])
def test_prefix_stable_serialization(vendor: str) -> None:
    tools = [ToolDeclaration(name="f", input_schema=to_struct({"type": "object"}))]
    model = spec("m", explicit_markers=True, replay=ThinkingReplay.UNSPECIFIED)
    bodies = []
    for turns in range(1, 5):
        req = StreamCompletionRequest(
            model_id="m",
            messages=conversation(turns),
            tools=tools,
            assembled_context=context("system prompt"),
            params=GenerationParams(max_output_tokens=100, temperature=0.2),
            cache_breakpoints=[CacheBreakpoint(after_assembled_context=Empty())],
            provider_options=to_struct({"user": "abc"}),
        )
        if vendor == "anthropic":
            body = build_anthropic_body(req, model)
        else:
            body = build_openai_body(req, model, DEEPSEEK if vendor == "deepseek" else OPENAI)
        assert list(body)[-1] == "messages"
        bodies.append(dump_body(body))
        assert dump_body(body) == dump_body(json.loads(dump_body(body)))  # deterministic
    for shorter, longer in itertools.pairwise(bodies):
        assert shorter.endswith(b"]}")
        assert longer.startswith(shorter[:-2])
        assert len(longer) > len(shorter)


def test_foreign_provider_thinking_is_not_replayed_to_anthropic() -> None:
    foreign = Message(
        role=Role.ASSISTANT,
        id="a",
        produced_by_provider="deepseek",
        content=[
            ContentBlock(thinking=ThinkingBlock(text="t", signature=b"S")),
            ContentBlock(redacted_thinking=RedactedThinkingBlock(data=b"R")),
            ContentBlock(text=TextBlock(text="answer")),
        ],
    )
    req = StreamCompletionRequest(
        model_id="m", messages=[text(Role.USER, "x"), foreign, text(Role.USER, "more")]
    )
    assert build_anthropic_body(req, spec("m"))["messages"][1]["content"] == [
        {"type": "text", "text": "answer"}
    ]
    foreign.produced_by_provider = "anthropic"
    assert [b["type"] for b in build_anthropic_body(req, spec("m"))["messages"][1]["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
    ]


def model_spec(
    markers: bool = False, replay: ThinkingReplay = ThinkingReplay.UNSPECIFIED
) -> ModelSpec:
    return ModelSpec(
        id="m",
        max_output_tokens=1000,
        caching=CachingSpec(explicit_markers=True) if markers else None,
        thinking=ThinkingSpec(replay=replay),
    )


def doc(media_type: str, data: bytes, filename: str = "") -> ContentBlock:
    return ContentBlock(document=DocumentBlock(media_type=media_type, data=data, filename=filename))


def doc_request(*blocks: ContentBlock) -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id="m",
        messages=[
            Message(
                role=Role.USER,
                id="u1",
                content=[*blocks, ContentBlock(text=TextBlock(text="read"))],
            )
        ],
    )


def test_anthropic_documents_use_the_text_source_for_text_and_base64_for_pdf() -> None:
    body = build_anthropic_body(
        doc_request(
            doc("text/plain", "plain é".encode(), "a.txt"),
            doc("text/markdown; charset=utf-8", b"# md"),
            doc("application/pdf", b"%PDF-1.4", "b.pdf"),
        ),
        model_spec(),
    )
    blocks = body["messages"][0]["content"]
    assert blocks[0] == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "plain é"},
        "title": "a.txt",
    }
    assert blocks[1]["source"] == {"type": "text", "media_type": "text/plain", "data": "# md"}
    assert blocks[2]["source"] == {
        "type": "base64",
        "media_type": "application/pdf",
        "data": "JVBERi0xLjQ=",
    }


def test_openai_sends_file_parts_for_pdf_only_and_text_documents_as_text() -> None:
    body = build_openai_body(
        doc_request(
            doc("text/csv", b"a,b\n1,2", "t.csv"), doc("application/pdf", b"%PDF", "b.pdf")
        ),
        model_spec(),
        OpenAICompat(),
    )
    parts = body["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "a,b\n1,2"}
    assert parts[1] == {
        "type": "file",
        "file": {"filename": "b.pdf", "file_data": "data:application/pdf;base64,JVBERg=="},
    }


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_unsupported_or_undecodable_documents_are_rejected_naming_the_field(vendor: str) -> None:
    for block in (
        doc("application/vnd.openxmlformats-officedocument.wordprocessingml.document", b"PK"),
        doc("text/plain", b"\xff\xfe\xfa"),
    ):
        with pytest.raises(InvalidValueError, match=r"messages\[0\]\.content\[0\]\.document"):
            if vendor == "openai":
                build_openai_body(doc_request(block), model_spec(), OpenAICompat())
            else:
                build_anthropic_body(doc_request(block), model_spec())


def test_cache_marker_never_lands_on_a_thinking_block() -> None:
    assistant = Message(
        role=Role.ASSISTANT,
        id="a1",
        content=[
            ContentBlock(text=TextBlock(text="ok")),
            ContentBlock(thinking=ThinkingBlock(text="t", signature=b"S")),
            ContentBlock(redacted_thinking=RedactedThinkingBlock(data=b"R")),
        ],
    )
    only_thinking = Message(
        role=Role.ASSISTANT,
        id="a2",
        content=[ContentBlock(thinking=ThinkingBlock(text="t", signature=b"S"))],
    )
    req = StreamCompletionRequest(
        model_id="m",
        messages=[user("q"), assistant, user("q2", "u2"), only_thinking, user("q3", "u3")],
        cache_breakpoints=[
            CacheBreakpoint(after_message_index=1),
            CacheBreakpoint(after_message_index=3),
        ],
    )
    msgs = build_anthropic_body(req, model_spec(markers=True, replay=ThinkingReplay.ALL))[
        "messages"
    ]
    assert [("cache_control" in b, b["type"]) for b in msgs[1]["content"]] == [
        (True, "text"),
        (False, "thinking"),
        (False, "redacted_thinking"),
    ]
    assert all("cache_control" not in b for b in msgs[3]["content"])


@pytest.mark.parametrize(
    ("compat", "replay"),
    [
        (OpenAICompat(), ThinkingReplay.OMIT),
        (OpenAICompat(), ThinkingReplay.ALL),
        (OpenAICompat(), ThinkingReplay.TOOL_TURNS),
    ],
)
def test_openai_thinking_only_assistant_turn_is_not_replayed(
    compat: OpenAICompat, replay: ThinkingReplay
) -> None:
    interrupted = Message(
        role=Role.ASSISTANT, id="a", content=[ContentBlock(thinking=ThinkingBlock(text="partial"))]
    )
    req = StreamCompletionRequest(model_id="m", messages=[user("q"), interrupted, user("q2", "u2")])
    body = build_openai_body(req, model_spec(replay=replay), compat)
    assert body["messages"] == [{"role": "user", "content": "q"}, {"role": "user", "content": "q2"}]
