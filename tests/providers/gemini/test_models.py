"""The curated Gemini models: valid declarations, and the kernel's validation refuses what the
vendor would refuse (docs/adapters.md "Gemini")."""

from __future__ import annotations

from typing import Any

import pytest

from protocol_py.providers.gemini.models import BREAKPOINT_TTLS, MAX_STOP_SEQUENCES, gemini_models
from protocol_py.providers.gemini.provider import GeminiProvider
from protocol_py.rules.capabilities import validate_capabilities
from protocol_py.rules.constraints import declaration_violations, request_violations
from protocol_py.rules.fees import tier_violations
from protocol_py.rules.request import validate_request
from protocol_py_gen.model.v1 import CacheBreakpoint, GenerationParams

from ._gemini import completion

SPECS = {s.id: s for s in gemini_models()}


def test_catalog_is_valid_and_covers_2_5_and_3() -> None:
    caps = GeminiProvider(api_key="k").capabilities()
    caps.protocol_version = "1.2"
    assert validate_capabilities(caps) == []
    assert all(declaration_violations(s) == [] for s in SPECS.values())
    assert sorted(SPECS) == [
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
        "gemini-2.5-pro",
        "gemini-3-flash-preview",
        "gemini-3-pro-preview",
        "gemini-3.1-pro-preview",
    ]
    for spec in SPECS.values():
        assert (spec.context_window, spec.max_output_tokens) == (1_048_576, 65_536)
        assert spec.caching is not None and spec.caching.implicit_automatic
        assert spec.caching.explicit_markers
        assert list(spec.caching.breakpoint_ttl_seconds) == list(BREAKPOINT_TTLS)
        assert spec.pricing is not None
        assert all(t.cache_storage_per_mtok_hour for t in spec.pricing.tiers)
        for i, tier in enumerate(spec.pricing.tiers):
            assert tier_violations(tier, f"pricing.tiers[{i}]", True) == []


def test_pro_models_have_the_200k_prompt_tier() -> None:
    for model, short, long in (
        ("gemini-2.5-pro", (1.25, 10.0, 0.125), (2.5, 15.0, 0.25)),
        ("gemini-3-pro-preview", (2.0, 12.0, 0.2), (4.0, 18.0, 0.4)),
    ):
        pricing = SPECS[model].pricing
        assert pricing is not None
        low, high = pricing.tiers
        assert (low.input_tokens_from, low.input_tokens_until) == (None, 200_000)
        assert (high.input_tokens_from, high.input_tokens_until) == (200_000, None)
        assert (low.input_per_mtok, low.output_per_mtok, low.cache_read_per_mtok) == short
        assert (high.input_per_mtok, high.output_per_mtok, high.cache_read_per_mtok) == long


@pytest.mark.parametrize(
    ("model", "params", "field", "rule"),
    [
        (
            "gemini-2.5-pro",
            {"disable_thinking": True},
            "params.disable_thinking",
            "request.params.disable_thinking.unsupported",
        ),
        (
            "gemini-3-pro-preview",
            {"disable_thinking": True},
            "params.disable_thinking",
            "request.params.disable_thinking.unsupported",
        ),
        (
            "gemini-3-pro-preview",
            {"thinking_effort": "medium"},
            "params.thinking_effort",
            "request.params.thinking_effort.unknown_level",
        ),
        (
            "gemini-3-flash-preview",
            {"thinking_budget_tokens": 1024},
            "params.thinking_budget_tokens",
            "request.params.thinking_budget_tokens.unsupported",
        ),
        (
            "gemini-2.5-flash",
            {"thinking_effort": "low"},
            "params.thinking_effort",
            "request.params.thinking_effort.unsupported",
        ),
        (
            "gemini-2.5-flash-lite",
            {"thinking_budget_tokens": 100},
            "params.thinking_budget_tokens",
            "request.params.thinking_budget_tokens.out_of_range",
        ),
    ],
)
def test_validation_refuses_what_the_vendor_refuses(
    model: str, params: dict[str, Any], field: str, rule: str
) -> None:
    request = completion(model, params=GenerationParams(**params))
    assert [(v.path, v.rule) for v in validate_request(request, SPECS[model])] == [(field, rule)]


@pytest.mark.parametrize(
    ("model", "params"),
    [
        ("gemini-2.5-flash", {"disable_thinking": True}),
        ("gemini-2.5-flash-lite", {"thinking_budget_tokens": 512}),
        ("gemini-3-flash-preview", {"thinking_effort": "minimal"}),
        ("gemini-2.5-pro", {"thinking_budget_tokens": 32_768}),
    ],
)
def test_validation_accepts_what_the_vendor_accepts(model: str, params: dict[str, Any]) -> None:
    request = completion(model, params=GenerationParams(**params))
    assert validate_request(request, SPECS[model]) == []


def test_stop_sequences_and_breakpoint_lifetimes_are_bounded() -> None:
    spec = SPECS["gemini-2.5-flash"]
    many = completion(
        "gemini-2.5-flash",
        params=GenerationParams(stop_sequences=[f"s{i}" for i in range(MAX_STOP_SEQUENCES + 1)]),
    )
    assert [v.rule for v in request_violations(many, spec)] == [
        "request.params.stop_sequences.too_many"
    ]
    odd = completion(
        "gemini-2.5-flash",
        cache_breakpoints=[CacheBreakpoint(after_message_index=0, ttl_seconds=7)],
    )
    assert [v.rule for v in request_violations(odd, spec)] == [
        "request.cache_breakpoints.ttl_unsupported"
    ]
