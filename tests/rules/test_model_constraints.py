"""Model constraint declarations and the request rules that check them (protocol 1.2,
protocol_py.rules.constraints)."""

from __future__ import annotations

import pytest

from protocol_py.errors import Violation
from protocol_py.rules.constraints import (
    declaration_violations,
    effective_budget,
    request_violations,
    thinking_on,
)
from protocol_py.rules.version_gate import kernel_version_violations
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.google.protobuf import Empty
from protocol_py_gen.model.v1 import (
    BudgetControl,
    CacheBreakpoint,
    CachingSpec,
    EffortControl,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingConstraints,
    ThinkingDisable,
    ThinkingSpec,
    TokenRange,
    ToolChoice,
    ToolChoiceMode,
)

ANTHROPIC_THINKING = ThinkingConstraints(
    max_output_exceeds_budget=True, forced_tool_choice_refused=True, fixed_temperature=1.0
)


def claude(**changes: object) -> ModelSpec:
    """An Anthropic-style model: a budget control (no default), extended-thinking constraints,
    5-minute and one-hour caches, four breakpoints."""
    spec = ModelSpec(
        id="claude-x",
        context_window=200_000,
        max_output_tokens=64_000,
        thinking=ThinkingSpec(
            supported=True,
            budget=BudgetControl(range=TokenRange(min=1024, max=63_999)),
            disable=ThinkingDisable.ALWAYS,
            constraints=ANTHROPIC_THINKING,
        ),
        caching=CachingSpec(
            supported=True,
            explicit_markers=True,
            breakpoint_ttl_seconds=[300, 3600],
            default_ttl_seconds=300,
            max_breakpoints=4,
        ),
    )
    for name, value in changes.items():
        setattr(spec, name, value)
    return spec


def gemini3() -> ModelSpec:
    return ModelSpec(
        id="gemini-3-pro",
        context_window=1_048_576,
        max_output_tokens=65_536,
        thinking=ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=["low", "high"], default="high"),
            budget=BudgetControl(range=TokenRange(min=128, max=32_768), deprecated=True),
            adaptive_by_default=True,
            disable=ThinkingDisable.NEVER,
            effort_budget_exclusive=True,
        ),
        caching=CachingSpec(supported=True, implicit_automatic=True),
        supports_stop_sequences=True,
        max_stop_sequences=5,
    )


def request(
    params: GenerationParams | None = None, breakpoints: list[CacheBreakpoint] | None = None
) -> StreamCompletionRequest:
    return StreamCompletionRequest(model_id="m", params=params, cache_breakpoints=breakpoints or [])


def pairs(violations: list[Violation]) -> list[tuple[str, str]]:
    return [(v.path, v.rule) for v in violations]


# -- when thinking is on -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thinking", "params", "on", "budget"),
    [
        (ThinkingSpec(supported=False), GenerationParams(thinking_budget_tokens=2048), False, None),
        (claude().thinking, None, False, None),  # no budget, no default, not adaptive
        (claude().thinking, GenerationParams(thinking_budget_tokens=2048), True, 2048),
        (
            claude().thinking,
            GenerationParams(thinking_budget_tokens=2048, disable_thinking=True),
            False,
            None,
        ),
        (
            ThinkingSpec(supported=True, budget=BudgetControl(default=4096)),
            None,
            True,
            4096,
        ),
        (ThinkingSpec(supported=True, budget=BudgetControl(default=0)), None, False, None),
        (gemini3().thinking, None, True, None),  # adaptive, no budget default
        (gemini3().thinking, GenerationParams(thinking_effort="low"), True, None),
        (
            ThinkingSpec(supported=True, budget=BudgetControl(default=4096)),
            GenerationParams(thinking_budget_tokens=8000),
            True,
            8000,
        ),
    ],
)
def test_thinking_on_and_the_budget_in_force(
    thinking: ThinkingSpec, params: GenerationParams | None, on: bool, budget: int | None
) -> None:
    assert thinking_on(params, thinking) is on
    assert effective_budget(params, thinking) == budget


# -- request rules -----------------------------------------------------------------------------


def test_a_request_within_every_constraint_passes() -> None:
    params = GenerationParams(
        thinking_budget_tokens=10_000,
        max_output_tokens=16_000,
        temperature=1.0,
        tool_choice=ToolChoice(mode=ToolChoiceMode.AUTO),
        stop_sequences=["</a>"],
    )
    breakpoints = [
        CacheBreakpoint(after_tools=Empty(), ttl_seconds=3600),
        CacheBreakpoint(after_message_index=0),
    ]
    assert request_violations(request(params, breakpoints), claude()) == []


def test_a_budget_not_below_the_requested_cap_is_refused_naming_the_budget() -> None:
    params = GenerationParams(thinking_budget_tokens=16_000, max_output_tokens=16_000)
    (violation,) = request_violations(request(params), claude())
    assert violation == Violation(
        "params.thinking_budget_tokens",
        "request.params.thinking_budget_tokens.not_below_max_output",
        "model 'claude-x' counts reasoning inside the output cap: the requested thinking budget "
        "16000 MUST be below the requested max_output_tokens 16000",
    )
    params.max_output_tokens = 16_001
    assert request_violations(request(params), claude()) == []


def test_a_default_budget_against_the_requested_cap_names_the_cap() -> None:
    spec = claude()
    assert spec.thinking is not None and spec.thinking.budget is not None
    spec.thinking.budget.default = 8192
    (violation,) = request_violations(request(GenerationParams(max_output_tokens=4096)), spec)
    assert violation == Violation(
        "params.max_output_tokens",
        "request.params.thinking_budget_tokens.not_below_max_output",
        "model 'claude-x' counts reasoning inside the output cap: the default thinking budget "
        "8192 MUST be below the requested max_output_tokens 4096",
    )


def test_a_budget_against_the_model_cap_when_the_request_sets_no_cap() -> None:
    params = GenerationParams(thinking_budget_tokens=64_000)
    (violation,) = request_violations(request(params), claude())
    assert violation.path == "params.thinking_budget_tokens"
    assert violation.message.endswith("MUST be below the model's max_output_tokens 64000")


@pytest.mark.parametrize("mode", [ToolChoiceMode.ANY, ToolChoiceMode.SPECIFIC])
def test_a_forced_tool_choice_is_refused_while_thinking(mode: ToolChoiceMode) -> None:
    choice = ToolChoice(mode=mode, tool_name="f" if mode == ToolChoiceMode.SPECIFIC else None)
    params = GenerationParams(thinking_budget_tokens=2048, tool_choice=choice)
    (violation,) = request_violations(request(params), claude())
    assert violation == Violation(
        "params.tool_choice.mode",
        "request.params.tool_choice.thinking_forced",
        f"model 'claude-x' refuses a forced tool choice (TOOL_CHOICE_MODE_{mode.name}) while "
        "thinking is on; use AUTO or NONE, or turn thinking off",
    )
    # the same choice without thinking is not this rule's business
    assert request_violations(request(GenerationParams(tool_choice=choice)), claude()) == []


def test_temperature_other_than_the_fixed_one_is_refused_while_thinking() -> None:
    params = GenerationParams(thinking_budget_tokens=2048, temperature=0.7)
    (violation,) = request_violations(request(params), claude())
    assert violation == Violation(
        "params.temperature",
        "request.params.temperature.thinking_fixed",
        "model 'claude-x' accepts only temperature 1 while thinking is on, got 0.7",
    )
    off = GenerationParams(thinking_budget_tokens=2048, temperature=0.7, disable_thinking=True)
    assert [v.rule for v in request_violations(request(off), claude())] == []


def test_every_broken_constraint_is_reported() -> None:
    params = GenerationParams(
        thinking_budget_tokens=32_000,
        max_output_tokens=8000,
        temperature=0.0,
        tool_choice=ToolChoice(mode=ToolChoiceMode.ANY),
    )
    assert pairs(request_violations(request(params), claude())) == [
        (
            "params.thinking_budget_tokens",
            "request.params.thinking_budget_tokens.not_below_max_output",
        ),
        ("params.tool_choice.mode", "request.params.tool_choice.thinking_forced"),
        ("params.temperature", "request.params.temperature.thinking_fixed"),
    ]


def test_effort_and_budget_together_are_refused_where_exclusive() -> None:
    params = GenerationParams(thinking_effort="high", thinking_budget_tokens=4096)
    (violation,) = request_violations(request(params), gemini3())
    assert violation == Violation(
        "params.thinking_budget_tokens",
        "request.params.thinking_budget_tokens.with_effort",
        "model 'gemini-3-pro' takes thinking_effort or thinking_budget_tokens, never both (got "
        "effort 'high' and budget 4096)",
    )
    assert request_violations(request(GenerationParams(thinking_effort="high")), gemini3()) == []
    budget_only = GenerationParams(thinking_budget_tokens=4096)
    assert request_violations(request(budget_only), gemini3()) == []


def test_stop_sequences_unsupported_and_too_many() -> None:
    five = GenerationParams(stop_sequences=["a", "b", "c", "d", "e"])
    assert request_violations(request(five), gemini3()) == []
    six = GenerationParams(stop_sequences=["a", "b", "c", "d", "e", "f"])
    assert request_violations(request(six), gemini3()) == [
        Violation(
            "params.stop_sequences",
            "request.params.stop_sequences.too_many",
            "model 'gemini-3-pro' accepts at most 5 stop sequences, got 6",
        )
    ]
    refuses = claude(supports_stop_sequences=False)
    assert request_violations(request(GenerationParams(stop_sequences=["x"])), refuses) == [
        Violation(
            "params.stop_sequences",
            "request.params.stop_sequences.unsupported",
            "model 'claude-x' does not accept stop sequences (supports_stop_sequences=false); "
            "1 given",
        )
    ]
    # absent means accepted (1.0 and 1.1 models), and no sequences are never refused
    assert request_violations(request(GenerationParams(stop_sequences=["x"])), claude()) == []
    assert request_violations(request(GenerationParams()), refuses) == []


def test_breakpoint_ttl_must_be_declared() -> None:
    breakpoints = [
        CacheBreakpoint(after_tools=Empty(), ttl_seconds=3600),
        CacheBreakpoint(after_assembled_context=Empty(), ttl_seconds=600),
    ]
    assert request_violations(request(None, breakpoints), claude()) == [
        Violation(
            "cache_breakpoints[1].ttl_seconds",
            "request.cache_breakpoints.ttl_unsupported",
            "model 'claude-x' accepts cache lifetimes of 300, 3600 seconds, not 600",
        )
    ]
    spec = claude()
    assert spec.caching is not None
    spec.caching.breakpoint_ttl_seconds = []
    (violation,) = request_violations(request(None, breakpoints[:1]), spec)
    assert violation.message == (
        "model 'claude-x' accepts cache lifetimes of none seconds, not 3600"
    )


def test_more_breakpoints_than_the_model_takes_are_refused() -> None:
    five = [CacheBreakpoint(after_message_index=i) for i in range(5)]
    assert request_violations(request(None, five), claude()) == [
        Violation(
            "cache_breakpoints",
            "request.cache_breakpoints.too_many",
            "model 'claude-x' accepts at most 4 cache breakpoints per request, got 5",
        )
    ]
    assert request_violations(request(None, five[:4]), claude()) == []


def test_breakpoints_of_a_model_without_explicit_markers_are_not_checked() -> None:
    five = [CacheBreakpoint(after_message_index=i, ttl_seconds=7) for i in range(5)]
    assert request_violations(request(None, five), gemini3()) == []


# -- declarations ------------------------------------------------------------------------------


def test_consistent_declarations_pass() -> None:
    assert declaration_violations(claude()) == []
    assert declaration_violations(gemini3(), path="models[1]") == []


def test_every_inconsistent_declaration_is_reported() -> None:
    spec = ModelSpec(
        id="bad",
        thinking=ThinkingSpec(
            supported=False,
            constraints=ThinkingConstraints(fixed_temperature=-1.0),
            effort_budget_exclusive=True,
        ),
        caching=CachingSpec(
            supported=True,
            implicit_automatic=True,
            breakpoint_ttl_seconds=[300, 0, 300],
            default_ttl_seconds=0,
            max_breakpoints=-2,
        ),
        supports_stop_sequences=False,
        max_stop_sequences=0,
    )
    assert pairs(declaration_violations(spec, path="models[0]")) == [
        ("models[0].thinking.constraints", "thinking.unsupported.constraints_present"),
        (
            "models[0].thinking.constraints.fixed_temperature",
            "thinking.constraints.fixed_temperature_negative",
        ),
        (
            "models[0].thinking.effort_budget_exclusive",
            "thinking.effort_budget_exclusive.without_both",
        ),
        ("models[0].max_stop_sequences", "model.max_stop_sequences.not_positive"),
        ("models[0].max_stop_sequences", "model.max_stop_sequences.while_unsupported"),
        (
            "models[0].caching.breakpoint_ttl_seconds[1]",
            "caching.breakpoint_ttl_seconds.not_positive",
        ),
        (
            "models[0].caching.breakpoint_ttl_seconds[2]",
            "caching.breakpoint_ttl_seconds.duplicate",
        ),
        ("models[0].caching.default_ttl_seconds", "caching.default_ttl_seconds.not_positive"),
        ("models[0].caching.max_breakpoints", "caching.max_breakpoints.not_positive"),
        (
            "models[0].caching.breakpoint_ttl_seconds",
            "caching.breakpoint_ttl_seconds.without_explicit_markers",
        ),
        (
            "models[0].caching.default_ttl_seconds",
            "caching.default_ttl_seconds.without_explicit_markers",
        ),
        (
            "models[0].caching.max_breakpoints",
            "caching.max_breakpoints.without_explicit_markers",
        ),
    ]


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_fixed_temperature_must_be_finite(value: float) -> None:
    spec = claude()
    assert spec.thinking is not None
    spec.thinking.constraints = ThinkingConstraints(fixed_temperature=value)
    assert pairs(declaration_violations(spec)) == [
        (
            "thinking.constraints.fixed_temperature",
            "thinking.constraints.fixed_temperature_not_finite",
        )
    ]


# -- kernel_protocol_version -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (None, None),
        ("1.0", None),
        ("1.2", None),
        ("1.7", None),
        ("2.0", "request.kernel_protocol_version.other_major"),
        ("0.9", "request.kernel_protocol_version.other_major"),
        ("", "request.kernel_protocol_version.invalid"),
        ("1.2.0", "request.kernel_protocol_version.invalid"),
        ("v1.2", "request.kernel_protocol_version.invalid"),
    ],
)
def test_kernel_protocol_version(value: str | None, rule: str | None) -> None:
    found = kernel_version_violations(value)
    assert [(v.path, v.rule) for v in found] == (
        [] if rule is None else [("kernel_protocol_version", rule)]
    )


def test_kernel_protocol_version_messages() -> None:
    assert kernel_version_violations("x" * 100)[0].message == (
        f"kernel_protocol_version 'xxxxxxxxxxxxxxxx' MUST be MAJOR.MINOR, for example "
        f"{PROTOCOL_VERSION!r}"
    )
    assert kernel_version_violations("2.1")[0].message == (
        f"a kernel of protocol 2.1 cannot talk to this plugin of protocol {PROTOCOL_VERSION} "
        "(another major version)"
    )
