"""Capability-aware routing: the first accepting candidate, explanations for every skipped one,
typed errors for bad input."""

from __future__ import annotations

import pytest

from protocol_py.codec.structs import to_struct
from protocol_py.errors import InvalidValueError
from protocol_py.rules.routing import Route, Skipped, route
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, ImageBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import (
    CachingSpec,
    EffortControl,
    GenerationParams,
    ModelSpec,
    ModelTarget,
    Pricing,
    StreamCompletionRequest,
    ThinkingDisable,
    ThinkingSpec,
    ToolDeclaration,
)


def spec(model_id: str, *, vision: bool = False, levels: tuple[str, ...] = ()) -> ModelSpec:
    thinking = ThinkingSpec()
    if levels:
        thinking = ThinkingSpec(
            supported=True,
            effort=EffortControl(levels=list(levels), default=levels[0]),
            disable=ThinkingDisable.NEVER,
        )
    return ModelSpec(
        id=model_id,
        context_window=1000,
        max_output_tokens=100,
        supports_vision=vision,
        supports_tool_use=True,
        thinking=thinking,
        caching=CachingSpec(),
        pricing=Pricing(currency="USD", free=True),
    )


def request(*, image: bool = False, effort: str | None = None) -> StreamCompletionRequest:
    blocks = [ContentBlock(text=TextBlock(text="look"))]
    if image:
        blocks.append(ContentBlock(image=ImageBlock(data=b"\x89PNG", media_type="image/png")))
    return StreamCompletionRequest(
        model_id="primary",
        messages=[Message(id="01A", role=Role.USER, content=blocks)],
        params=GenerationParams(thinking_effort=effort) if effort is not None else None,
        call_context=CallContext(session_id="s", turn_id="t"),
    )


def test_first_accepting_candidate_wins_with_explanations() -> None:
    candidates = [
        ModelTarget(provider="local", spec=spec("small")),
        ModelTarget(provider="acme", spec=spec("seer", vision=True, levels=("low",))),
        ModelTarget(provider="acme", spec=spec("oracle", vision=True, levels=("low", "high"))),
    ]
    result = route(request(image=True, effort="high"), candidates)
    assert isinstance(result, Route)
    assert result.ok
    assert result.index == 2
    assert result.target is candidates[2]
    assert [s.index for s in result.skipped] == [0, 1]
    assert all(isinstance(s, Skipped) for s in result.skipped)
    assert result.skipped[0].target is candidates[0]
    assert sorted(v.rule for v in result.skipped[0].violations) == [
        "request.content.image_unsupported",
        "request.params.thinking_effort.unsupported",
    ]
    assert [v.rule for v in result.skipped[1].violations] == [
        "request.params.thinking_effort.unknown_level"
    ]
    assert "'high'" in result.skipped[1].violations[0].message
    lines = result.explain().splitlines()
    assert lines[0] == "skipped [0] local/small:"
    assert lines[-1] == "chose [2] acme/oracle"
    assert any(
        line.startswith("  messages[0].content[1].image: request.content.image_unsupported: ")
        for line in lines
    )


def test_no_candidate_accepts() -> None:
    candidates = [
        ModelTarget(provider="p", spec=spec("a")),
        ModelTarget(provider="p", spec=spec("b")),
    ]
    result = route(request(image=True), candidates)
    assert (result.ok, result.target, result.index) == (False, None, None)
    assert [s.index for s in result.skipped] == [0, 1]
    assert result.explain().splitlines()[-1] == "no candidate accepts the request"
    assert route(request(), []) == Route(target=None, index=None, skipped=[])


def test_model_id_is_not_a_routing_criterion() -> None:
    # The request names "primary"; the candidate is "fallback": routing checks capabilities.
    result = route(request(), [ModelTarget(provider="p", spec=spec("fallback"))])
    assert result.index == 0 and result.skipped == []


def test_warnings_do_not_disqualify_and_are_not_listed() -> None:
    req = request()
    req.tools = [
        ToolDeclaration(name="f", input_schema=to_struct({"type": "object", "title": "x"}))
    ]
    result = route(req, [ModelTarget(provider="p", spec=spec("a"))])
    assert result.index == 0


def test_invalid_spec_and_missing_fields_skip_the_target() -> None:
    broken = spec("x")
    broken.context_window = 0
    candidates = [
        ModelTarget(provider="p", spec=broken),
        ModelTarget(provider="p"),
        ModelTarget(provider="", spec=spec("y")),
        ModelTarget(provider="p", spec=spec("z")),
    ]
    result = route(request(), candidates)
    assert result.index == 3
    assert [[(v.path, v.rule) for v in s.violations] for s in result.skipped] == [
        [("spec.context_window", "model.context_window.not_positive")],
        [("spec", "routing.target.spec_missing")],
        [("provider", "routing.target.provider_empty")],
    ]
    assert "skipped [1] p/?:" in result.explain()


def test_candidates_after_the_chosen_one_are_not_examined() -> None:
    candidates: list[object] = [ModelTarget(provider="p", spec=spec("a")), "not a target"]
    result = route(request(), candidates)  # type: ignore[arg-type]
    assert result.index == 0


@pytest.mark.parametrize(
    ("req", "candidates", "path"),
    [
        ("request", [], ""),
        (None, [], ""),
        (request(), ModelTarget(provider="p", spec=spec("a")), ""),
        (request(), "abc", ""),
        (request(), [spec("a")], "candidates[0]"),
    ],
)
def test_bad_input_types_raise_typed_errors(req: object, candidates: object, path: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        route(req, candidates)  # type: ignore[arg-type]
    assert info.value.rule == "value.wrong_type"
    assert info.value.path == path


def test_target_with_provider_none_reads_as_empty() -> None:
    result = route(request(), [ModelTarget(provider=None, spec=spec("m"))])  # type: ignore[arg-type]
    assert result.target is None
    assert [(v.path, v.rule) for v in result.skipped[0].violations] == [
        ("provider", "routing.target.provider_empty")
    ]


def test_target_with_wrongly_typed_provider_is_a_typed_error() -> None:
    with pytest.raises(InvalidValueError) as info:
        route(request(), [ModelTarget(provider=5, spec=spec("m"))])  # type: ignore[arg-type]
    assert (info.value.path, info.value.rule) == ("candidates[0].provider", "value.wrong_type")
