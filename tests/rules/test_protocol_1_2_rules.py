"""The protocol 1.2 rules as the public validators and cost report them: validate_request,
validate_request_shape, validate_model_spec, validate_pricing, cost, validate_usage and the
stream checker."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from protocol_py.errors import InvalidValueError, StreamOrderError, Violation, errors_only
from protocol_py.rules.capabilities import validate_model_spec
from protocol_py.rules.cost import TERM_NAMES, cost, format_usd, validate_usage
from protocol_py.rules.pricing import validate_pricing
from protocol_py.rules.request import validate_request, validate_request_shape
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ContextSection,
    Message,
    Role,
    TextBlock,
    VendorBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CachingSpec,
    GenerationParams,
    ModelSpec,
    Pricing,
    PricingTier,
    PricingWindow,
    RequestCount,
    RequestRate,
    StreamCompletionRequest,
    StreamEvent,
    ThinkingConstraints,
    ThinkingDisable,
    ThinkingSpec,
    TokenRange,
    Usage,
)

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BLOCK = VendorBlock(vendor="anthropic", block_type="compaction", data=b'{"type":"compaction"}')


def spec() -> ModelSpec:
    return ModelSpec(
        id="claude-x",
        context_window=200_000,
        max_output_tokens=64_000,
        supports_tool_use=True,
        thinking=ThinkingSpec(
            supported=True,
            budget=BudgetControl(range=TokenRange(min=1024, max=63_999)),
            disable=ThinkingDisable.ALWAYS,
            constraints=ThinkingConstraints(
                max_output_exceeds_budget=True,
                forced_tool_choice_refused=True,
                fixed_temperature=1.0,
            ),
        ),
        caching=CachingSpec(supported=True, explicit_markers=True),
        pricing=Pricing(
            currency="USD",
            tiers=[
                PricingTier(
                    input_per_mtok=3,
                    output_per_mtok=15,
                    cache_write_per_mtok=3.75,
                    cache_read_per_mtok=0.3,
                    request_rates=[RequestRate(name="web_search", price_per_request=0.01)],
                )
            ],
        ),
    )


def message(role: Role, msg_id: str, *blocks: ContentBlock) -> Message:
    return Message(role=role, id=msg_id, content=list(blocks))


def text(value: str, *entries: VendorData) -> ContentBlock:
    return ContentBlock(text=TextBlock(text=value, vendor_data=list(entries)))


def request(*messages: Message, **fields: object) -> StreamCompletionRequest:
    built = StreamCompletionRequest(
        model_id="claude-x",
        messages=list(messages) or [message(Role.USER, "u1", text("hi"))],
        call_context=CallContext(session_id="s", turn_id="t"),
    )
    for name, value in fields.items():
        setattr(built, name, value)
    return built


def pairs(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.path, v.rule) for v in errors_only(violations)]


# -- requests ----------------------------------------------------------------------------------


def test_a_paused_server_tool_turn_replayed_with_its_vendor_blocks_is_valid() -> None:
    history = request(
        message(Role.USER, "u1", text("search the web")),
        message(
            Role.ASSISTANT,
            "a1",
            text("Searching."),
            ContentBlock(vendor_block=BLOCK),
            text("", VendorData(location="anthropic.text.citations", value=b"[]")),
        ),
        kernel_protocol_version="1.2",
    )
    assert validate_request(history, spec()) == []


def test_vendor_block_rules_in_a_request() -> None:
    bad = VendorBlock(vendor="Anthropic", block_type="", data=b"[]")
    found = validate_request(
        request(
            message(Role.USER, "u1", text("q"), ContentBlock(vendor_block=BLOCK)),
            message(Role.ASSISTANT, "a1", ContentBlock(vendor_block=bad)),
        ),
        spec(),
    )
    assert pairs(found) == [
        ("messages[0].content[1].vendor_block", "request.content.vendor_block_in_user_message"),
        (
            "messages[1].content[0].vendor_block.vendor",
            "request.content.vendor_block.vendor_invalid",
        ),
        (
            "messages[1].content[0].vendor_block.block_type",
            "request.content.vendor_block.block_type_empty",
        ),
        (
            "messages[1].content[0].vendor_block.data",
            "request.content.vendor_block.data_not_object",
        ),
    ]


def test_text_vendor_data_rules_in_a_request() -> None:
    twice = [
        VendorData(location="gemini.part.thought_signature", value=b"a"),
        VendorData(location="gemini.part.thought_signature", value=b"b"),
    ]
    found = validate_request(request(message(Role.USER, "u1", text("q", *twice))), spec())
    assert found == [
        Violation(
            "messages[0].content[0].text.vendor_data[1]",
            "request.content.text.vendor_data.location_duplicate",
            "location 'gemini.part.thought_signature' appears twice on one text block",
        )
    ]


def test_vendor_blocks_inside_a_tool_result_or_context_are_refused_as_before() -> None:
    found = validate_request(
        request(
            assembled_context=[
                ContextSection(provider="p", content=[ContentBlock(vendor_block=BLOCK)])
            ]
        ),
        spec(),
    )
    assert pairs(found) == [
        ("assembled_context[0].content[0].vendor_block", "request.context.content_kind")
    ]


def test_constraint_violations_come_with_the_other_param_rules() -> None:
    params = GenerationParams(thinking_budget_tokens=2048, temperature=0.5)
    assert pairs(validate_request(request(params=params), spec())) == [
        ("params.temperature", "request.params.temperature.thinking_fixed")
    ]


def test_kernel_protocol_version_is_a_shape_rule() -> None:
    bad = request(kernel_protocol_version="2.0")
    expected = [("kernel_protocol_version", "request.kernel_protocol_version.other_major")]
    assert pairs(validate_request_shape(bad)) == expected
    assert pairs(validate_request(bad, spec())) == expected
    assert validate_request(request(kernel_protocol_version="1.1"), spec()) == []


# -- capabilities and pricing ------------------------------------------------------------------


def test_model_spec_reports_declaration_and_fee_rules() -> None:
    model = spec()
    assert validate_model_spec(model) == []
    assert model.caching is not None and model.pricing is not None
    model.caching.max_breakpoints = 0
    model.pricing.tiers[0].request_rates.append(RequestRate(name="web_search", price_per_request=1))
    assert pairs(validate_model_spec(model, path="models[0]")) == [
        (
            "models[0].pricing.tiers[0].request_rates[1].name",
            "pricing.tiers.request_rate.name_duplicate",
        ),
        ("models[0].caching.max_breakpoints", "caching.max_breakpoints.not_positive"),
    ]


def test_storage_rate_without_caching_is_refused() -> None:
    pricing = Pricing(
        currency="USD",
        tiers=[PricingTier(input_per_mtok=1, output_per_mtok=2, cache_storage_per_mtok_hour=1)],
    )
    assert pairs(validate_pricing(pricing, caching_supported=False)) == [
        (
            "pricing.tiers[0].cache_storage_per_mtok_hour",
            "pricing.tiers.cache_storage_without_caching",
        )
    ]
    assert validate_pricing(pricing, caching_supported=None) == []


# -- cost --------------------------------------------------------------------------------------


def gemini_pricing() -> Pricing:
    return Pricing(
        currency="USD",
        tiers=[
            PricingTier(
                input_per_mtok=1.25,
                output_per_mtok=10,
                cache_write_per_mtok=1.25,
                cache_read_per_mtok=0.125,
                cache_storage_per_mtok_hour=4.5,
                request_rates=[RequestRate(name="google_search", price_per_request=0.035)],
                windows=[PricingWindow(start_minute=0, end_minute=1440, input_per_mtok=0.5)],
            )
        ],
    )


def test_cost_adds_request_fees_and_storage_exactly() -> None:
    usage = Usage(
        input_tokens=1000,
        output_tokens=100,
        cache_write_tokens=200_000,
        request_counts=[RequestCount(name="google_search", count=3)],
        cache_storage_token_seconds=200_000 * 3600,
    )
    breakdown = cost(gemini_pricing(), usage, AT)
    assert breakdown.window_index == 0  # the window replaces the input rate, not the fees
    assert {name: format_usd(breakdown.terms[name]) for name in TERM_NAMES} == {
        "input": "0.0005",
        "output": "0.001",
        "cache_read": "0",
        "cache_write_5m": "0.25",
        "cache_write_1h": "0",
        "reasoning": "0",
        "requests": "0.105",
        "cache_storage": "0.9",
    }
    assert breakdown.total == Decimal("1.2565")
    assert breakdown.request_fees == {"google_search": Decimal("0.105")}
    assert breakdown.to_json()["request_fees"] == {"google_search": "0.105"}
    assert "  request fee google_search = 0.105 USD" in breakdown.render_text().splitlines()


def test_cost_refuses_a_fee_or_storage_the_tier_does_not_price() -> None:
    pricing = Pricing(currency="USD", tiers=[PricingTier(input_per_mtok=1, output_per_mtok=1)])
    with pytest.raises(InvalidValueError) as fee:
        cost(pricing, Usage(request_counts=[RequestCount(name="web_search", count=1)]), AT)
    assert (fee.value.path, fee.value.rule) == (
        "pricing.tiers[0].request_rates",
        "cost.rate_missing",
    )
    with pytest.raises(InvalidValueError) as storage:
        cost(pricing, Usage(cache_storage_token_seconds=1), AT)
    assert storage.value.rule == "cost.rate_missing"
    # a free model costs 0 whatever it reports
    free = cost(Pricing(currency="USD", free=True), Usage(cache_storage_token_seconds=9), AT)
    assert free.total == 0 and free.terms["cache_storage"] == 0


def test_validate_usage_lists_the_fee_rules() -> None:
    usage = Usage(
        request_counts=[RequestCount(name="x", count=-1), RequestCount(name="x", count=1)],
        cache_storage_token_seconds=-3,
    )
    assert [(v.path, v.rule) for v in validate_usage(usage)] == [
        ("usage.request_counts[0].count", "usage.negative"),
        ("usage.request_counts[1].name", "usage.request_count.name_duplicate"),
        ("usage.cache_storage_token_seconds", "usage.negative"),
    ]


@pytest.mark.parametrize(
    ("usage", "rule"),
    [
        (
            Usage(request_counts=[RequestCount(name="web_search", count=-1)]),
            "stream.usage.negative",
        ),
        (Usage(cache_storage_token_seconds=-1), "stream.usage.negative"),
        (
            Usage(request_counts=[RequestCount(name="Web", count=1)]),
            "stream.usage.request_count.name_invalid",
        ),
    ],
)
def test_the_stream_checker_applies_the_usage_fee_rules(usage: Usage, rule: str) -> None:
    checker = StreamOrderChecker()
    with pytest.raises(StreamOrderError) as caught:
        checker.check(StreamEvent(usage=usage))
    assert caught.value.rule == rule
