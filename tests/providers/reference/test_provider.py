"""The built-in offline provider ``reference``: declarations, every event kind, stop sequences,
max_output_tokens, tool calls, prompt caching, exact token counts, configuration."""

from __future__ import annotations

import threading
import time
from typing import Any

import betterproto2
import pytest

from protocol_py.codec.structs import from_struct, to_struct
from protocol_py.errors import errors_only
from protocol_py.providers import provider_class
from protocol_py.providers.reference import (
    CONFIG_SCHEMA,
    ReferenceProvider,
    count_text_tokens,
    tokenize,
)
from protocol_py.providers.reference import provider as reference_provider
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py.rules.cost import prompt_tokens
from protocol_py.rules.request import validate_request
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.server import offload
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock, ToolResultBlock
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    CountTokensRequest,
    ErrorKind,
    GenerationParams,
    RenderRequest,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    ThinkingDisable,
    ToolChoice,
    ToolChoiceMode,
    ToolDeclaration,
)

from ...support.servers import make_request, user

WEATHER = ToolDeclaration(
    name="get_weather",
    description="Current weather for a city",
    input_schema=to_struct(
        {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        }
    ),
)


async def run(provider: ReferenceProvider, request: StreamCompletionRequest) -> list[StreamEvent]:
    assert request.call_context is not None
    return [e async for e in provider.stream(request, request.call_context)]


def kinds(events: list[StreamEvent]) -> list[str]:
    return [betterproto2.which_one_of(e, "event")[0] for e in events]


def check_order(events: list[StreamEvent]) -> None:
    checker = StreamOrderChecker()
    for event in events:
        checker.check(event)


def test_capabilities_are_valid_and_cover_the_required_shapes() -> None:
    caps = ReferenceProvider().capabilities()
    caps.protocol_version = "1.0"
    assert errors_only(validate_capabilities(caps)) == []
    by_id = {m.id: m for m in caps.models}
    assert set(by_id) == {"reference-large", "reference-medium", "reference-small"}
    large = by_id["reference-large"]
    assert large.thinking is not None and large.thinking.effort is not None
    assert large.thinking.adaptive_by_default is True
    assert large.thinking.disable is ThinkingDisable.CONDITIONAL
    assert large.thinking.disable_allowed_efforts == ["low", "medium"]
    medium = by_id["reference-medium"]
    assert medium.thinking is not None and medium.thinking.budget is not None
    small = by_id["reference-small"]
    assert small.thinking is not None and small.thinking.supported is False
    assert small.caching is not None and small.caching.supported is False
    assert small.pricing is not None
    assert all(t.cache_read_per_mtok is None for t in small.pricing.tiers)
    # tiered pricing: prompt-size tiers on large, time tiers on medium
    assert large.pricing is not None and len(large.pricing.tiers) == 2
    assert large.pricing.tiers[0].input_tokens_until == 200_000
    assert medium.pricing is not None and medium.pricing.tiers[1].effective_from == "2026-07-01"
    assert provider_class("reference") is ReferenceProvider


def test_config_schema_forbids_additional_properties_at_every_level() -> None:
    def objects(schema: Any) -> list[dict[str, Any]]:
        found = []
        if isinstance(schema, dict):
            if schema.get("type") == "object":
                found.append(schema)
            for value in schema.values():
                found.extend(objects(value))
        return found

    published = from_struct(ReferenceProvider().capabilities().config_schema)
    assert published == CONFIG_SCHEMA
    nested = objects(CONFIG_SCHEMA)
    assert len(nested) == 2
    assert all(o.get("additionalProperties") is False for o in nested)


def test_tokenizer_round_trips_and_counts() -> None:
    text = "Hello,  world!\nIt's 42."
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert tokens == ["Hello", ",", "  ", "world", "!", "\n", "It", "'", "s", " ", "42", "."]
    assert count_text_tokens(text) == 12


async def test_text_stream_with_thinking_signature_usage_and_stop() -> None:
    provider = ReferenceProvider()
    request = make_request("Tell me something")
    events = await run(provider, request)
    check_order(events)
    names = kinds(events)
    assert names[:2] == ["stream_start", "metadata"]
    assert "thinking_delta" in names and "thinking_signature" in names
    assert names.index("thinking_signature") < names.index("text_delta")
    assert names[-2:] == ["usage", "stop"]
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason is StopReason.END_TURN
    blocks = [betterproto2.which_one_of(b, "block")[0] for b in result.message.content]
    assert blocks == ["thinking", "text"]
    thinking = result.message.content[0].thinking
    assert thinking is not None and thinking.signature.startswith(b"refsig:")
    text = result.message.content[1].text
    assert text is not None and "You wrote: Tell me something" in text.text
    usage = result.usage
    assert usage is not None
    assert usage.reasoning_tokens == count_text_tokens(thinking.text)
    assert usage.output_tokens == count_text_tokens(thinking.text) + count_text_tokens(text.text)
    assert usage.reasoning_already_counted is True
    # the prompt size equals CountTokens' exact answer
    counted = await provider.count_tokens(
        CountTokensRequest(model_id=request.model_id, messages=request.messages)
    )
    assert prompt_tokens(usage) == counted.input_tokens


async def test_thinking_controls() -> None:
    provider = ReferenceProvider()
    off = await run(
        provider,
        make_request("x", params=GenerationParams(thinking_effort="low", disable_thinking=True)),
    )
    assert "thinking_delta" not in kinds(off)
    low = accumulate(
        await run(provider, make_request("x", params=GenerationParams(thinking_effort="low")))
    )
    high = accumulate(await run(provider, make_request("x")))
    assert low.usage is not None and high.usage is not None
    assert 0 < (low.usage.reasoning_tokens or 0) < (high.usage.reasoning_tokens or 0)
    # budget model: no thinking without a budget; with one, thinking appears
    plain = await run(provider, make_request("x", model="reference-medium"))
    assert "thinking_delta" not in kinds(plain)
    budget = await run(
        provider,
        make_request(
            "x", model="reference-medium", params=GenerationParams(thinking_budget_tokens=2000)
        ),
    )
    assert "thinking_signature" in kinds(budget)
    small = await run(provider, make_request("x", model="reference-small"))
    assert "thinking_delta" not in kinds(small)
    small_usage = accumulate(small).usage
    assert small_usage is not None
    assert small_usage.reasoning_tokens is None and small_usage.cache_read_tokens is None


async def test_stop_sequence_cuts_text_before_the_sequence() -> None:
    events = await run(
        ReferenceProvider(),
        make_request("alpha beta gamma", params=GenerationParams(stop_sequences=["zzz", "beta"])),
    )
    check_order(events)
    result = accumulate(events)
    assert result.stop is not None
    assert result.stop.reason is StopReason.STOP_SEQUENCE
    assert result.stop.matched_stop_sequence == "beta"
    text = result.message.content[-1].text
    assert text is not None and text.text.endswith("You wrote: alpha ")
    assert "beta" not in text.text


async def test_max_output_tokens_is_honoured() -> None:
    events = await run(
        ReferenceProvider(),
        make_request("a long prompt " * 20, params=GenerationParams(max_output_tokens=70)),
    )
    check_order(events)
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason is StopReason.MAX_TOKENS
    assert result.usage is not None and result.usage.output_tokens == 70
    produced = sum(
        count_text_tokens(b.text.text if b.text else b.thinking.text if b.thinking else "")
        for b in result.message.content
    )
    assert produced == 70


async def test_tool_call_with_fragmented_arguments() -> None:
    provider = ReferenceProvider()
    events = await run(
        provider, make_request("What is the weather? use tool please", tools=[WEATHER])
    )
    check_order(events)
    names = kinds(events)
    assert names.count("tool_call_delta") > 2  # fragmented JSON
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason is StopReason.TOOL_USE
    use = result.message.content[-1].tool_use
    assert use is not None and use.name == "get_weather"
    assert from_struct(use.input) == {
        "city": "city",  # no word after "city", no name in the prompt: the property's name
        "unit": "celsius",
        "days": 1,
    }
    # naming the tool triggers it too; tool_choice NONE forbids it
    named = accumulate(
        await run(provider, make_request("call get_weather for Oslo", tools=[WEATHER]))
    )
    assert named.stop is not None and named.stop.reason is StopReason.TOOL_USE
    named_use = named.message.content[-1].tool_use
    assert named_use is not None and from_struct(named_use.input)["city"] == "Oslo"
    none = accumulate(
        await run(
            provider,
            make_request(
                "use tool",
                tools=[WEATHER],
                params=GenerationParams(tool_choice=ToolChoice(mode=ToolChoiceMode.NONE)),
            ),
        )
    )
    assert none.stop is not None and none.stop.reason is StopReason.END_TURN
    no_trigger = accumulate(await run(provider, make_request("just chat", tools=[WEATHER])))
    assert no_trigger.stop is not None and no_trigger.stop.reason is StopReason.END_TURN


async def test_tool_result_is_answered() -> None:
    assert WEATHER.name
    messages = [
        user("use tool"),
        Message(role=Role.ASSISTANT, id="01J00000000000000000000002", content=[]),
        Message(
            role=Role.USER,
            id="01J00000000000000000000003",
            content=[
                ContentBlock(
                    tool_result=ToolResultBlock(
                        tool_use_id="t1", content=[ContentBlock(text=TextBlock(text="sunny, 21C"))]
                    )
                )
            ],
        ),
    ]
    result = accumulate(
        await run(ReferenceProvider(), make_request(messages=messages, tools=[WEATHER]))
    )
    text = result.message.content[-1].text
    assert text is not None and "The tool returned: sunny, 21C." in text.text


async def test_prompt_cache_reads_when_a_prefix_repeats() -> None:
    provider = ReferenceProvider()
    system = "You are a careful assistant. " * 10
    first = accumulate(await run(provider, make_request("first question", system=system))).usage
    second = accumulate(await run(provider, make_request("second question", system=system))).usage
    assert first is not None and second is not None
    assert first.cache_read_tokens == 0
    assert first.cache_write_tokens is not None and first.cache_write_tokens > 0
    assert second.cache_read_tokens == first.cache_write_tokens
    assert second.cache_write_tokens == 0
    # explicit breakpoint after the first message of a two-turn conversation
    turn = [
        user("one"),
        Message(role=Role.ASSISTANT, id="01J00000000000000000000002", content=[]),
        user("two", "01J00000000000000000000003"),
    ]
    req = make_request(messages=turn, system=system)
    req.cache_breakpoints = [CacheBreakpoint(after_message_index=1)]
    third = accumulate(await run(provider, req)).usage
    assert third is not None and third.cache_read_tokens == first.cache_write_tokens
    assert third.cache_write_tokens is not None and third.cache_write_tokens > 0


async def test_counts_match_request_validation_shapes() -> None:
    caps = ReferenceProvider().capabilities()
    spec = next(m for m in caps.models if m.id == "reference-large")
    assert errors_only(validate_request(make_request("x", tools=[WEATHER]), spec)) == []


async def test_configure_pace_and_simulated_error() -> None:
    provider = ReferenceProvider()
    await provider.configure({"pace_tokens_per_second": 400})
    started = time.monotonic()
    events = await run(provider, make_request("hi", model="reference-small"))
    elapsed = time.monotonic() - started
    usage = accumulate(events).usage
    assert usage is not None
    assert elapsed >= usage.output_tokens / 400 * 0.9
    await provider.configure({"simulate_error": {"kind": "rate_limited", "after_events": 3}})
    events = await run(provider, make_request("hi", model="reference-small"))
    check_order(events)
    assert len(events) == 4
    assert events[-1].error is not None and events[-1].error.kind is ErrorKind.RATE_LIMITED
    assert events[-1].error.retryable is True
    with pytest.raises(ValueError, match=r"simulate_error\.kind"):
        await provider.configure({"simulate_error": {"kind": "unspecified"}})


async def test_render_payloads() -> None:
    provider = ReferenceProvider()
    echo = await provider.render(RenderRequest(payload_type="reference.echo", payload=b"hi"))
    assert echo.text == "hi"
    rep = await provider.render(
        RenderRequest(payload_type="reference.repeat", payload=b'{"text": "ab", "times": 3}')
    )
    assert rep.text == "ababab"
    with pytest.raises(ValueError, match="payload_type"):
        await provider.render(RenderRequest(payload_type="other", payload=b""))


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("reference-medium", None),  # budget model without a budget: no reasoning
        ("reference-large", GenerationParams(thinking_effort="low", disable_thinking=True)),
        ("reference-small", None),  # no thinking at all
    ],
)
async def test_usage_reports_reasoning_only_when_the_model_reasoned(
    model: str, params: GenerationParams | None
) -> None:
    events = await run(ReferenceProvider(), make_request("x", model=model, params=params))
    usage = accumulate(events).usage
    assert usage is not None and usage.output_tokens > 0
    assert usage.reasoning_tokens is None
    assert usage.reasoning_already_counted is None
    reasoned = accumulate(
        await run(
            ReferenceProvider(),
            make_request(
                "x", model="reference-medium", params=GenerationParams(thinking_budget_tokens=2000)
            ),
        )
    ).usage
    assert reasoned is not None and (reasoned.reasoning_tokens or 0) > 0
    assert reasoned.reasoning_already_counted is True


async def _city_argument(prompt: str) -> object:
    result = accumulate(await run(ReferenceProvider(), make_request(prompt, tools=[WEATHER])))
    use = result.message.content[-1].tool_use
    assert use is not None and use.name == "get_weather"
    return from_struct(use.input)["city"]


async def test_the_word_after_a_property_name_is_its_argument() -> None:
    assert await _city_argument("call get_weather, city: Bergen") == "Bergen"
    assert await _city_argument("call get_weather with CITY=Tromso now") == "Tromso"
    # "city" inside "velocity" is not the property's name: the capitalised name is used instead
    assert await _city_argument("call get_weather for Oslo, velocity: fast") == "Oslo"


def _wide_tool(properties: int, name: str = "wide") -> ToolDeclaration:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(properties)},
    }
    return ToolDeclaration(name=name, description="Many strings", input_schema=to_struct(schema))


async def _arguments(prompt: str, tools: list[ToolDeclaration]) -> dict[str, Any]:
    result = accumulate(await run(ReferenceProvider(), make_request(prompt, tools=tools)))
    use = result.message.content[-1].tool_use
    assert use is not None and use.name == tools[0].name
    return from_struct(use.input)


async def test_name_lookups_stop_at_their_bound_whatever_the_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One lookup per declared tool, then one per string property: a schema of 1,050 string
    properties, each named in the prompt with its word, has the first MAX_NAME_LOOKUPS - 1
    filled from the prompt and the rest given their own names (the prompt holds no proper
    name); the proper name is searched for once."""
    searches: list[str] = []
    search = reference_provider._search_windows

    def counted(pattern: Any, text: str, keep: int) -> Any:
        searches.append(text[:10])
        return search(pattern, text, keep)

    monkeypatch.setattr(reference_provider, "_search_windows", counted)
    prompt = "use tool " + " ".join(f"p{i}: v{i}" for i in range(1050))
    args = await _arguments(prompt, [_wide_tool(1050)])
    filled = reference_provider.MAX_NAME_LOOKUPS - 1  # one lookup for the tool's name
    assert [args[f"p{i}"] for i in range(filled)] == [f"v{i}" for i in range(filled)]
    assert [args[f"p{i}"] for i in range(filled, 1050)] == [f"p{i}" for i in range(filled, 1050)]
    assert len(searches) == 1


async def test_a_name_found_inside_other_words_all_along_costs_bounded_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A property named ``e`` in a prompt of 60,000 ``e`` inside other words: at most
    MAX_LOOKUP_CANDIDATES places are examined over the whole completion; the argument falls
    back to the proper name."""
    steps = [0]
    word_at = reference_provider._word_at

    def counted(text: str, word: str, start: int) -> bool:
        steps[0] += 1
        return word_at(text, word, start)

    monkeypatch.setattr(reference_provider, "_word_at", counted)
    schema = {"type": "object", "properties": {"e": {"type": "string"}, "f": {"type": "string"}}}
    tool = ToolDeclaration(name="glued", description="x", input_schema=to_struct(schema))
    args = await _arguments("use tool for Oslo " + "ee " * 30_000 + "f: later", [tool])
    assert steps[0] == reference_provider.MAX_LOOKUP_CANDIDATES
    assert args == {"e": "Oslo", "f": "Oslo"}  # the budget was spent before "f" was found


def test_a_lookup_in_a_cancelled_worker_step_stops() -> None:
    """Each lookup passes a checkpoint: in a worker step whose call was cancelled it raises
    JobCancelled before searching."""
    stop = threading.Event()
    stop.set()
    lookups = reference_provider._PromptLookups("call get_weather now")
    with pytest.raises(offload.JobCancelled):
        offload._stoppable(stop, lambda: lookups.names("get_weather"))
    assert lookups.names("get_weather")  # outside a step: no checkpoint applies


async def test_a_tool_named_inside_a_longer_word_is_not_chosen() -> None:
    result = accumulate(
        await run(ReferenceProvider(), make_request("what about xget_weather?", tools=[WEATHER]))
    )
    assert result.stop is not None and result.stop.reason is not StopReason.TOOL_USE
