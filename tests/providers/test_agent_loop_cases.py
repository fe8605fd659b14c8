"""The agent-loop cases (testdata/cases/D*.json) end to end: the real server and client in front
of a stub upstream, each asserting the case's expected values."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import betterproto2
import pytest

from protocol_py.client.conversation import Conversation
from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers import catalog
from protocol_py.providers.anthropic.request import build_anthropic_body
from protocol_py.providers.http.history import NOT_EXECUTED
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.fees import request_fees
from protocol_py.rules.vendor_data import ANTHROPIC_TEXT_CITATIONS, OPENAI_EXTRA_CONTENT
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import (
    ErrorKind,
    RequestCount,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    UsageComponent,
)

from ._agent_loop import case, decode, served, spec_of, sse_reply

ANTHROPIC_HEADERS = {"request-id": "req_1"}


def haiku() -> Any:
    return next(m for m in catalog.anthropic_models() if m.id == "claude-haiku-4-5")


def kind(event: StreamEvent) -> str:
    return betterproto2.which_one_of(event, "event")[0]


async def events_of(served_: Any, request: StreamCompletionRequest) -> list[StreamEvent]:
    return [e async for e in served_.client.stream(request, timeout=30)]


def calls_of(message: Message) -> list[tuple[str, str, Any]]:
    return [
        (b.tool_use.id, b.tool_use.name, from_struct(b.tool_use.input))
        for b in message.content
        if b.tool_use is not None
    ]


# -- D02: Anthropic thinking parameter rules --------------------------------------------------

D02 = case("D02")
D02_FIELDS = {
    "R1_budget_not_below_max_tokens": (
        "params.thinking_budget_tokens",
        "request.params.thinking_budget_tokens.not_below_max_output",
    ),
    "R2_forced_tool_choice_with_thinking": (
        "params.tool_choice",
        "request.params.tool_choice.thinking_forced",
    ),
    "R3_temperature_with_budget_thinking": (
        "params.temperature",
        "request.params.temperature.thinking_fixed",
    ),
}


@pytest.mark.parametrize("row", sorted(D02["input"]["rows"]))
async def test_thinking_rules_stop_the_request_before_the_vendor(row: str) -> None:
    request = decode(D02["input"]["rows"][row])
    field, rule = D02_FIELDS[row]
    async with served("anthropic") as s:
        completion = await s.client.complete(request, timeout=30)
        assert s.stub.seen == []  # never sent
    error = completion.error
    assert error is not None and error.kind == ErrorKind.INVALID_REQUEST
    assert field in error.message and rule in error.message
    assert completion.message.content == []


@pytest.mark.parametrize("row", sorted(D02["input"]["rows"]))
def test_the_adapter_itself_builds_no_such_body(row: str) -> None:
    """Without the server's validation in front, the adapter refuses the same rows."""
    field, rule = D02_FIELDS[row]
    with pytest.raises(InvalidValueError) as info:
        build_anthropic_body(decode(D02["input"]["rows"][row]), haiku())
    assert (info.value.path, info.value.rule) == (field, rule)


def test_the_catalog_declares_the_constraints_for_the_kernel() -> None:
    thinking = haiku().thinking
    assert thinking is not None and thinking.constraints is not None
    c = thinking.constraints
    assert (c.max_output_exceeds_budget, c.forced_tool_choice_refused, c.fixed_temperature) == (
        True,
        True,
        1.0,
    )


# -- D03: tool results first ------------------------------------------------------------------

TEXT_REPLY = [
    "event: message_start",
    'data: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",'
    '"model":"claude-haiku-4-5","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}',
    "",
    "event: content_block_start",
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
    "",
    "event: content_block_delta",
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}',
    "",
    "event: content_block_stop",
    'data: {"type":"content_block_stop","index":0}',
    "",
    "event: message_delta",
    'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}',
    "",
    "event: message_stop",
    'data: {"type":"message_stop"}',
    "",
]


async def test_tool_results_open_the_user_message_on_anthropic() -> None:
    request = decode(case("D03")["input"]["request"])
    async with served("anthropic", sse_reply(TEXT_REPLY, ANTHROPIC_HEADERS)) as s:
        completion = await s.client.complete(request, timeout=30)
        sent = s.stub.seen[0].json()
    assert completion.error is None
    assert sent["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A",
                "content": [{"type": "text", "text": "-3 C"}],
            },
            {"type": "text", "text": "<reminder>answer in Celsius</reminder>"},
        ],
    }


# -- D04: a tool call left unanswered ---------------------------------------------------------

D04 = case("D04")

OPENAI_TEXT_REPLY = [
    'data: {"id":"c1","model":"gpt-6-sol","choices":[{"index":0,"delta":{"content":"ok"}}]}',
    "",
    'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
    "",
    "data: [DONE]",
    "",
]


async def test_anthropic_gets_a_not_executed_result_before_the_user_text() -> None:
    request = decode(D04["input"]["request"])
    async with served("anthropic", sse_reply(TEXT_REPLY, ANTHROPIC_HEADERS)) as s:
        completion = await s.client.complete(request, timeout=30)
        sent = s.stub.seen[0].json()
    assert completion.error is None
    assert sent["messages"][1]["content"][-1]["type"] == "tool_use"
    assert sent["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A",
                "content": [{"type": "text", "text": NOT_EXECUTED}],
                "is_error": True,
            },
            {"type": "text", "text": "Never mind, tell me a joke instead."},
        ],
    }


async def test_chat_completions_gets_a_tool_message_before_the_user_text() -> None:
    request = decode(D04["input"]["request"])
    request.model_id = D04["input"]["also_with_modelId"]
    async with served("openai", sse_reply(OPENAI_TEXT_REPLY)) as s:
        completion = await s.client.complete(request, timeout=30)
        sent = s.stub.seen[0].json()["messages"]
    assert completion.error is None
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[1]["tool_calls"][0]["id"] == "toolu_01A"
    assert sent[2] == {"role": "tool", "tool_call_id": "toolu_01A", "content": NOT_EXECUTED}
    assert sent[3] == {"role": "user", "content": "Never mind, tell me a joke instead."}


# -- D06: web search requests and their cost --------------------------------------------------

D06 = case("D06")


async def test_web_search_counts_reach_usage_and_cost() -> None:
    request = decode(D06["input"]["request"])
    reply = sse_reply(D06["input"]["lines"], ANTHROPIC_HEADERS)
    async with served("anthropic", reply) as s:
        completion = await s.client.complete(request, timeout=30)
        sent = s.stub.seen[0].json()
    assert sent["tools"] == [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]
    assert completion.error is None
    message = completion.message
    texts = [b.text.text for b in message.content if b.text is not None]
    assert texts == ["Let me look that up.", "Team A won 2-1."]
    assert calls_of(message) == []  # the vendor ran the search: no client tool call
    assert completion.stop is not None and completion.stop.reason == StopReason.END_TURN
    usage = completion.usage
    assert usage is not None
    assert (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    ) == (9800, 120, 0, 0)
    assert usage.components == [UsageComponent(name="web_search_requests", value=3)]
    assert usage.request_counts == [RequestCount(name="web_search", count=3)]
    assert completion.cost is not None
    token_terms = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h", "reasoning")
    tokens = sum((completion.cost.terms[name] for name in token_terms), Decimal(0))
    assert tokens == Decimal("0.0104")
    assert completion.cost.request_fees == {"web_search": Decimal("0.03")}
    assert completion.cost.terms["requests"] == Decimal("0.03")
    assert completion.cost.total == Decimal("0.0404")
    pricing = haiku().pricing
    assert request_fees(usage, pricing.tiers[0], 0) == {"web_search": Decimal("0.03")}


async def test_server_tool_blocks_and_citations_go_back_verbatim() -> None:
    request = decode(D06["input"]["request"])
    replies = [sse_reply(D06["input"]["lines"], ANTHROPIC_HEADERS)] * 2
    async with served("anthropic", *replies) as s:
        completion = await s.client.complete(request, timeout=30)
        vendor = [
            (b.vendor_block.vendor, b.vendor_block.block_type, json.loads(b.vendor_block.data))
            for b in completion.message.content
            if b.vendor_block is not None
        ]
        assert vendor == [
            (
                "anthropic",
                "server_tool_use",
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_01X",
                    "name": "web_search",
                    "input": {"query": "2026 final winner"},
                },
            ),
            (
                "anthropic",
                "web_search_tool_result",
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_01X",
                    "content": [
                        {
                            "type": "web_search_result",
                            "title": "Final report",
                            "url": "https://example.org/final",
                            "encrypted_content": "EncAAA",
                            "page_age": "2 days",
                        }
                    ],
                },
            ),
        ]
        cited = [b.text for b in completion.message.content if b.text is not None][1]
        (entry,) = cited.vendor_data
        assert entry.location == ANTHROPIC_TEXT_CITATIONS
        citation = {
            "type": "web_search_result_location",
            "cited_text": "Team A won 2-1",
            "url": "https://example.org/final",
            "title": "Final report",
            "encrypted_index": "EncIdx",
        }
        assert json.loads(entry.value) == [citation]
        follow = decode(D06["input"]["request"])
        follow.messages = [
            *follow.messages,
            completion.message,
            Message(
                role=Role.USER,
                id="m3",
                content=[ContentBlock(text=TextBlock(text="And the score?"))],
            ),
        ]
        await s.client.complete(follow, timeout=30)
        replayed = s.stub.seen[1].json()["messages"][1]
    assert replayed == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look that up."},
            vendor[0][2],
            vendor[1][2],
            {"type": "text", "text": "Team A won 2-1.", "citations": [citation]},
        ],
    }


async def test_vendor_blocks_are_not_sent_to_another_vendor() -> None:
    request = decode(D06["input"]["request"])
    async with served("anthropic", sse_reply(D06["input"]["lines"], ANTHROPIC_HEADERS)) as s:
        completion = await s.client.complete(request, timeout=30)
    follow = decode(D04["input"]["request"])
    follow.model_id = "gpt-6-sol"
    follow.messages = [
        follow.messages[0],
        completion.message,
        Message(role=Role.USER, id="m3", content=[ContentBlock(text=TextBlock(text="more"))]),
    ]
    async with served("openai", sse_reply(OPENAI_TEXT_REPLY)) as s:
        done = await s.client.complete(follow, timeout=30)
        sent = s.stub.seen[0].json()["messages"]
    assert done.error is None
    assert sent[1] == {"role": "assistant", "content": "Let me look that up.Team A won 2-1."}


# -- D08: interleaved thinking ---------------------------------------------------------------

D08 = case("D08")


async def test_interleaved_thinking_keeps_order_and_signatures_on_replay() -> None:
    request = decode(D08["input"]["request"])
    replies = [sse_reply(D08["input"]["lines"], ANTHROPIC_HEADERS), sse_reply(TEXT_REPLY)]
    async with served("anthropic", *replies) as s:
        events = await events_of(s, request)
        content = [kind(e) for e in events if kind(e) not in ("stream_start", "metadata")]
        assert content == [
            "thinking_delta",
            "thinking_signature",
            "tool_call_start",
            "tool_call_delta",
            "tool_call_done",
            "thinking_delta",
            "thinking_signature",
            "redacted_thinking",
            "tool_call_start",
            "tool_call_delta",
            "tool_call_done",
            "usage",
            "stop",
        ]
        signatures = [e.thinking_signature.signature for e in events if e.thinking_signature]
        assert signatures == [b"SIG_A", b"SIG_B"]
        assert events[-1].stop is not None and events[-1].stop.reason == StopReason.TOOL_USE
        conv = Conversation(spec=haiku(), params=request.params, tools=list(request.tools))
        conv.messages = list(request.messages)
        folded = accumulate(events, produced_by_provider="anthropic")
        assert folded.unreplayable_blocks == []
        conv.assistant(folded)
        conv.tool_result("toolu_A", "-3 C")
        conv.tool_result("toolu_B", "14 C")
        done = await s.client.complete(conv.request(), timeout=30)
        sent = s.stub.seen[1].json()
    assert done.error is None
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "First Oslo.", "signature": "SIG_A"},
                {
                    "type": "tool_use",
                    "id": "toolu_A",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
                {"type": "thinking", "thinking": "Now Rome.", "signature": "SIG_B"},
                {"type": "redacted_thinking", "data": "REDACTED_C"},
                {
                    "type": "tool_use",
                    "id": "toolu_B",
                    "name": "get_weather",
                    "input": {"city": "Rome"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_A",
                    "content": [{"type": "text", "text": "-3 C"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_B",
                    "content": [{"type": "text", "text": "14 C"}],
                },
            ],
        },
    ]


# -- D09: Gemini first-call-only signatures (OpenAI-compatible) ------------------------------

D09 = case("D09")


@pytest.mark.parametrize("shape", sorted(D09["input"]["lines"]))
async def test_only_the_first_call_is_signed_and_replayed_so(shape: str) -> None:
    spec = spec_of(D09["input"]["model_spec"])
    request = decode(D09["input"]["request"])
    replies = [sse_reply(D09["input"]["lines"][shape]), sse_reply(OPENAI_TEXT_REPLY)]
    async with served("openai", *replies, specs=[spec]) as s:
        events = await events_of(s, request)
        assert "error" not in [kind(e) for e in events]
        dones = [e.tool_call_done for e in events if e.tool_call_done is not None]
        assert [
            (d.id, [(v.location, json.loads(v.value)) for v in d.vendor_data]) for d in dones
        ] == [
            (
                "function-call-11",
                [(OPENAI_EXTRA_CONTENT, {"google": {"thought_signature": "SIG_PAR_1"}})],
            ),
            ("function-call-12", []),
        ]
        stop = events[-1].stop
        assert stop is not None
        assert (stop.reason, stop.vendor_reason, stop.model_affirmed) == (
            StopReason.TOOL_USE,
            "stop",
            False,
        )
        folded = accumulate(events)
        assert calls_of(folded.message) == [
            ("function-call-11", "get_weather", {"city": "Paris"}),
            ("function-call-12", "get_weather", {"city": "Rome"}),
        ]
        conv = Conversation(spec=spec, tools=list(request.tools))
        conv.messages = list(request.messages)
        conv.assistant(folded)
        conv.tool_result("function-call-11", "sunny")
        conv.tool_result("function-call-12", "rain")
        done = await s.client.complete(conv.request(), timeout=30)
        sent = s.stub.seen[1].json()["messages"]
    assert done.error is None
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    first, second = sent[1]["tool_calls"]
    assert first["id"] == "function-call-11"
    assert first["extra_content"] == {"google": {"thought_signature": "SIG_PAR_1"}}
    assert second["id"] == "function-call-12" and "extra_content" not in second
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:]] == [
        ("function-call-11", "sunny"),
        ("function-call-12", "rain"),
    ]


# -- D11: two calls under one id -------------------------------------------------------------

D11 = case("D11")


@pytest.mark.parametrize("variant", ["lines", "lines_variant_B"])
async def test_two_calls_under_one_id_are_two_calls(variant: str) -> None:
    spec = spec_of(D11["input"]["model_spec"])
    request = decode(D11["input"]["request"])
    replies = [sse_reply(D11["input"][variant]), sse_reply(OPENAI_TEXT_REPLY)]
    async with served("openai", *replies, specs=[spec]) as s:
        completion = await s.client.complete(request, timeout=30)
        assert completion.error is None
        calls = calls_of(completion.message)
        assert [(c[1], c[2]) for c in calls] == [
            ("think", {"thought": "plan"}),
            ("get_supplier", {"kind": "steel"}),
        ]
        assert calls[0][0] == "call_f0de"
        assert calls[1][0] != "call_f0de" and calls[1][0].startswith("call_")
        assert completion.stop is not None and completion.stop.reason == StopReason.TOOL_USE
        conv = Conversation(spec=spec, tools=list(request.tools))
        conv.messages = list(request.messages)
        conv.assistant(completion)
        conv.tool_result(calls[0][0], "ok")
        conv.tool_result(calls[1][0], "Acme Steel")
        done = await s.client.complete(conv.request(), timeout=30)  # accepted: ids distinct
        sent = s.stub.seen[1].json()["messages"]
    assert done.error is None
    assert [c["id"] for c in sent[1]["tool_calls"]] == [calls[0][0], calls[1][0]]
    assert [m["tool_call_id"] for m in sent[2:]] == [calls[0][0], calls[1][0]]


# -- D12: a stray empty tool_calls entry ------------------------------------------------------

D12 = case("D12")


async def test_a_stray_empty_tool_calls_entry_is_ignored() -> None:
    spec = spec_of(D12["input"]["model_spec"])
    request = decode(D12["input"]["request"])
    async with served("openai", sse_reply(D12["input"]["lines"]), specs=[spec]) as s:
        completion = await s.client.complete(request, timeout=30)
    assert completion.error is None
    assert [b.text.text for b in completion.message.content if b.text] == [
        "Yes: it printed Hello, World!"
    ]
    assert calls_of(completion.message) == []
    assert len(completion.message.content) == 1
    usage = completion.usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (120, 9)
    stop = completion.stop
    assert stop is not None and (stop.reason, stop.vendor_reason) == (StopReason.END_TURN, "stop")


# -- D13: OpenRouter signed reasoning_details -------------------------------------------------

D13 = case("D13")
D13_DETAIL = {
    "type": "reasoning.text",
    "text": "User wants Oslo weather.",
    "signature": "ErUBCkYIBxgCKkD",
    "format": "anthropic-claude-v1",
    "index": 0,
}


async def test_reasoning_details_are_kept_and_replayed_unmodified() -> None:
    spec = spec_of(D13["input"]["model_spec"])
    request = decode(D13["input"]["request"])
    replies = [sse_reply(D13["input"]["lines"]), sse_reply(OPENAI_TEXT_REPLY)]
    async with served("openai", *replies, specs=[spec]) as s:
        completion = await s.client.complete(request, timeout=30)
        assert completion.error is None
        blocks = completion.message.content
        thinking = blocks[0].thinking
        assert thinking is not None
        assert (thinking.text, thinking.signature) == (
            "User wants Oslo weather.",
            b"ErUBCkYIBxgCKkD",
        )
        assert completion.response.unreplayable_blocks == []
        assert calls_of(completion.message) == [("toolu_01Q", "get_weather", {"city": "Oslo"})]
        (block,) = [b.vendor_block for b in blocks if b.vendor_block is not None]
        assert (block.vendor, block.block_type) == ("openai", "reasoning.text")
        assert json.loads(block.data) == D13_DETAIL
        usage = completion.usage
        assert usage is not None and usage.vendor_cost is not None
        assert (usage.vendor_cost.amount, usage.vendor_cost.unit) == ("0.00066", "usd")
        conv = Conversation(spec=spec, tools=list(request.tools), params=request.params)
        conv.messages = list(request.messages)
        conv.assistant(completion)
        conv.tool_result("toolu_01Q", "-3 C")
        done = await s.client.complete(conv.request(), timeout=30)
        sent = s.stub.seen[1].json()["messages"]
    assert done.error is None
    assistant = sent[1]
    assert assistant["reasoning_details"] == [D13_DETAIL]
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_01Q"]
    assert "reasoning_content" not in assistant  # the entries carry the reasoning


# -- D15: an unknown StopReason from a newer minor -------------------------------------------


def test_case_is_copied() -> None:
    assert case("D15")["input"]["events_hex"]["stop{reason: 9, model_affirmed: true}"] == (
        "620408091801"
    )
