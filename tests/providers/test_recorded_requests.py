"""Request translation against the request bodies of the third-party recordings.

The recordings keep the request body without its messages; each case below restates what the
caller asked for (its GenerationParams, tool choice and provider_options) and the translated
body must equal the recorded one on every recorded key, while the messages and tools follow
the probe. Read from ../shared/fixtures/vendor/recorded/ (skipped with a reason when absent).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol_py.codec.structs import to_struct
from protocol_py.providers.anthropic.request import build_anthropic_body
from protocol_py.providers.openai.request import OpenAICompat, build_openai_body
from protocol_py_gen.content.v1 import ContentBlock, ContextSection, Message, Role, TextBlock
from protocol_py_gen.model.v1 import (
    CachingSpec,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingSpec,
    ToolChoice,
    ToolChoiceMode,
    ToolDeclaration,
)

from ..support.adapters import RECORDED_ABSENT, SHARED_RECORDED

AUTO = ToolChoice(mode=ToolChoiceMode.AUTO)
CASES: dict[str, dict[str, Any]] = {
    "anthropic_compaction_cache_iterations": {
        "params": GenerationParams(max_output_tokens=4096),
        "options": ["cache_control", "context_management"],
    },
    "anthropic_redacted_thinking_sonnet45": {
        "params": GenerationParams(max_output_tokens=4096, thinking_budget_tokens=1024),
    },
    "anthropic_refusal_no_content": {
        "params": GenerationParams(max_output_tokens=128000),
        "options": ["thinking"],
    },
    "anthropic_stop_sequence_prefill": {
        "params": GenerationParams(max_output_tokens=8192, stop_sequences=["```"], temperature=1.0),
    },
    "anthropic_thinking_signature_tool_noargs": {
        "params": GenerationParams(max_output_tokens=64000, thinking_budget_tokens=1024),
        "options": ["thinking"],
    },
    "anthropic_tool_use_input_json_delta": {"params": GenerationParams(max_output_tokens=1024)},
    "azure_model_router_reasoning": {"usage": False},
    "deepseek_reasoner_tool_call_cache_hit": {"usage": True},
    "groq_gpt_oss_reasoning_tool_call": {
        "usage": False,
        "params": GenerationParams(tool_choice=AUTO),
        "options": ["n"],
    },
    "groq_midstream_error_event": {
        "usage": False,
        "params": GenerationParams(tool_choice=AUTO),
        "options": ["n"],
    },
    "mistral_magistral_thinking_chunks": {"usage": False},
    "mistral_tool_call_no_index": {"usage": False},
    "openai_gpt5_moderation_trailing_chunk": {"usage": True, "options": ["moderation"]},
    "openai_parallel_tool_calls": {"usage": False},
    "openai_refusal_delta": {"usage": False, "options": ["response_format"]},
    "xai_grok3mini_reasoning_excluded_tool_call": {"usage": True},
}


def _recording(name: str) -> dict[str, Any]:
    if not SHARED_RECORDED.is_dir():
        pytest.skip(RECORDED_ABSENT)
    data: dict[str, Any] = json.loads((SHARED_RECORDED / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_request_body(name: str) -> None:
    data = _recording(name)
    case = CASES[name]
    recorded: dict[str, Any] = data["request"]["body"]
    probe: dict[str, Any] = data["probe"]
    messages = [
        Message(
            role=Role.USER, id="u1", content=[ContentBlock(text=TextBlock(text=probe["prompt"]))]
        )
    ]
    if probe.get("assistant_prefill"):
        messages.append(
            Message(
                role=Role.ASSISTANT,
                id="a1",
                content=[ContentBlock(text=TextBlock(text=probe["assistant_prefill"]))],
            )
        )
    system = probe.get("system") or next(
        (b["text"] for b in recorded.get("system", []) if b.get("type") == "text"), None
    )
    tools = [
        ToolDeclaration(
            name=t["name"],
            description=t.get("description", ""),
            input_schema=to_struct(t["input_schema"]),
        )
        for t in probe.get("tools", [])
    ]
    options = {key: recorded[key] for key in case.get("options", [])}
    if "n" in options:
        options["n"] = int(options["n"])
    request = StreamCompletionRequest(
        model_id=recorded["model"],
        messages=messages,
        tools=tools,
        params=case.get("params"),
        assembled_context=(
            [ContextSection(label="system", content=[ContentBlock(text=TextBlock(text=system))])]
            if system
            else []
        ),
        provider_options=to_struct(options) if options else None,
    )
    spec = ModelSpec(
        id=recorded["model"],
        context_window=200_000,
        max_output_tokens=128_000,
        supports_tool_use=True,
        thinking=ThinkingSpec(supported=True),
        caching=CachingSpec(supported=True, explicit_markers=True),
    )
    if data["vendor"] == "anthropic":
        body = build_anthropic_body(request, spec)
        sent_tools = [
            {"name": t["name"], "input_schema": t["input_schema"]} for t in body.get("tools", [])
        ]
        user = body["messages"][0]["content"]
    else:
        body = build_openai_body(request, spec, OpenAICompat(stream_usage=case["usage"]))
        sent_tools = [
            {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
            for t in body.get("tools", [])
        ]
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    assert {key: body.get(key) for key in recorded} == recorded
    assert user == probe["prompt"]
    assert sent_tools == [
        {"name": t["name"], "input_schema": t["input_schema"]} for t in probe.get("tools", [])
    ]
    if probe.get("assistant_prefill"):
        assert body["messages"][-1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": probe["assistant_prefill"]}],
        }
