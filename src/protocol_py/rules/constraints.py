"""What a model declares its vendor refuses, and the request rules that check it (protocol 1.2).

A vendor that answers 400 to a request shape the protocol can express makes the kernel learn
about it only after a round trip, as an INVALID_REQUEST error. Protocol 1.2 lets a model declare
those refusals, so the kernel's validation reports them first, with the field and a stable rule
id:

- ``ThinkingSpec.constraints`` (:class:`ThinkingConstraints`): while thinking is on
  (:func:`thinking_on`), the output cap must exceed the reasoning budget, a forced tool choice
  is refused and the temperature is fixed (Anthropic's extended thinking);
- ``ThinkingSpec.effort_budget_exclusive``: effort and budget never together (Gemini 3);
- ``ModelSpec.supports_stop_sequences`` / ``max_stop_sequences``;
- ``CachingSpec.breakpoint_ttl_seconds`` / ``default_ttl_seconds`` / ``max_breakpoints`` with
  ``CacheBreakpoint.ttl_seconds`` (Anthropic's one-hour cache and four-marker limit).

:func:`declaration_violations` checks the declarations themselves (what a kernel checks when it
loads Capabilities); :func:`request_violations` checks a request against them. Rule ids:

Declarations (paths below the ModelSpec):

- ``thinking.unsupported.constraints_present`` (``thinking.constraints``): constraints on a
  model that does not reason
- ``thinking.constraints.fixed_temperature_not_finite`` / ``..._negative``
  (``thinking.constraints.fixed_temperature``)
- ``thinking.effort_budget_exclusive.without_both`` (``thinking.effort_budget_exclusive``):
  exclusivity declared without both an effort and a budget control
- ``model.max_stop_sequences.not_positive`` / ``model.max_stop_sequences.while_unsupported``
  (``max_stop_sequences``)
- ``caching.breakpoint_ttl_seconds.not_positive`` / ``.duplicate``
  (``caching.breakpoint_ttl_seconds[i]``), ``caching.default_ttl_seconds.not_positive``,
  ``caching.max_breakpoints.not_positive``, and ``caching.<field>.without_explicit_markers``
  for each of the three on a model without ``explicit_markers``

Requests (paths below the StreamCompletionRequest):

- ``request.params.thinking_budget_tokens.not_below_max_output``: the effective budget is not
  below the effective output cap (path: the request field that set one of them, else ``params``)
- ``request.params.tool_choice.thinking_forced`` (``params.tool_choice.mode``)
- ``request.params.temperature.thinking_fixed`` (``params.temperature``)
- ``request.params.thinking_budget_tokens.with_effort`` (``params.thinking_budget_tokens``)
- ``request.params.stop_sequences.unsupported`` / ``.too_many`` (``params.stop_sequences``)
- ``request.cache_breakpoints.ttl_unsupported`` (``cache_breakpoints[i].ttl_seconds``)
- ``request.cache_breakpoints.too_many`` (``cache_breakpoints``)

Breakpoint rules apply only to a model with ``explicit_markers``: for any other model an adapter
ignores breakpoints, TTLs included (spec: "cache_breakpoints").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from protocol_py.errors import Violation
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    CachingSpec,
    GenerationParams,
    ModelSpec,
    StreamCompletionRequest,
    ThinkingSpec,
    ToolChoiceMode,
)

__all__ = [
    "declaration_violations",
    "effective_budget",
    "request_violations",
    "thinking_on",
]

_FORCED = (ToolChoiceMode.ANY, ToolChoiceMode.SPECIFIC)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def thinking_on(params: GenerationParams | None, thinking: ThinkingSpec) -> bool:
    """Whether the model reasons for a request with these params (``ThinkingSpec.constraints``):
    it supports thinking, the request does not set ``disable_thinking = true``, and the request
    sets an effort or a budget, or the model reasons without one (``adaptive_by_default``, or a
    budget default above 0)."""
    if not thinking.supported:
        return False
    params = params or GenerationParams()
    if params.disable_thinking:
        return False
    if params.thinking_effort is not None or params.thinking_budget_tokens is not None:
        return True
    if thinking.adaptive_by_default:
        return True
    budget = thinking.budget
    return budget is not None and (budget.default or 0) > 0


def effective_budget(params: GenerationParams | None, thinking: ThinkingSpec) -> int | None:
    """The reasoning budget in force for a request while thinking is on: the request's
    ``thinking_budget_tokens``, else the model's ``BudgetControl.default``; None when neither is
    set (or thinking is off). Unit: tokens."""
    if not thinking_on(params, thinking):
        return None
    params = params or GenerationParams()
    if params.thinking_budget_tokens is not None:
        return params.thinking_budget_tokens
    budget = thinking.budget
    return budget.default if budget is not None else None


# ---------------------------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------------------------


def _thinking_declarations(thinking: ThinkingSpec, path: str, out: list[Violation]) -> None:
    constraints = thinking.constraints
    if constraints is not None:
        where = _join(path, "constraints")
        if not thinking.supported:
            out.append(
                Violation(
                    where,
                    "thinking.unsupported.constraints_present",
                    "a model with thinking.supported=false has no thinking constraints",
                )
            )
        fixed = constraints.fixed_temperature
        if fixed is not None:
            value = float(fixed)
            if not math.isfinite(value):
                out.append(
                    Violation(
                        _join(where, "fixed_temperature"),
                        "thinking.constraints.fixed_temperature_not_finite",
                        f"fixed_temperature {value} MUST be a finite number",
                    )
                )
            elif value < 0:
                out.append(
                    Violation(
                        _join(where, "fixed_temperature"),
                        "thinking.constraints.fixed_temperature_negative",
                        f"fixed_temperature {value} MUST be >= 0",
                    )
                )
    if thinking.effort_budget_exclusive and (thinking.effort is None or thinking.budget is None):
        out.append(
            Violation(
                _join(path, "effort_budget_exclusive"),
                "thinking.effort_budget_exclusive.without_both",
                "effort_budget_exclusive is meaningful only when both an effort and a budget "
                "control are declared",
            )
        )


def _caching_declarations(caching: CachingSpec, path: str, out: list[Violation]) -> None:
    seen: set[int] = set()
    for i, ttl in enumerate(caching.breakpoint_ttl_seconds):
        where = f"{_join(path, 'breakpoint_ttl_seconds')}[{i}]"
        if ttl <= 0:
            out.append(
                Violation(
                    where,
                    "caching.breakpoint_ttl_seconds.not_positive",
                    f"a cache lifetime MUST be > 0 seconds, got {ttl}",
                )
            )
        elif ttl in seen:
            out.append(
                Violation(
                    where,
                    "caching.breakpoint_ttl_seconds.duplicate",
                    f"cache lifetime {ttl} s is declared more than once",
                )
            )
        seen.add(ttl)
    for name, value in (
        ("default_ttl_seconds", caching.default_ttl_seconds),
        ("max_breakpoints", caching.max_breakpoints),
    ):
        if value is not None and value <= 0:
            out.append(
                Violation(
                    _join(path, name),
                    f"caching.{name}.not_positive",
                    f"{name} {value} MUST be > 0",
                )
            )
    if not caching.explicit_markers:
        for name, present in (
            ("breakpoint_ttl_seconds", bool(caching.breakpoint_ttl_seconds)),
            ("default_ttl_seconds", caching.default_ttl_seconds is not None),
            ("max_breakpoints", caching.max_breakpoints is not None),
        ):
            if present:
                out.append(
                    Violation(
                        _join(path, name),
                        f"caching.{name}.without_explicit_markers",
                        f"{name} describes cache breakpoints, which a model without "
                        "caching.explicit_markers ignores",
                    )
                )


def declaration_violations(spec: ModelSpec, *, path: str = "") -> list[Violation]:
    """Check a ModelSpec's protocol 1.2 constraint declarations (rules: module docstring).

    Args:
        spec: The model's declaration.
        path: The ModelSpec's own path (``models[2]``), prefixed to every violation's path.

    Returns:
        Every violation, in field order; empty when the declarations are consistent.
    """
    out: list[Violation] = []
    if spec.thinking is not None:
        _thinking_declarations(spec.thinking, _join(path, "thinking"), out)
    max_stop = spec.max_stop_sequences
    if max_stop is not None:
        where = _join(path, "max_stop_sequences")
        if max_stop <= 0:
            out.append(
                Violation(
                    where,
                    "model.max_stop_sequences.not_positive",
                    f"max_stop_sequences {max_stop} MUST be > 0",
                )
            )
        if spec.supports_stop_sequences is False:
            out.append(
                Violation(
                    where,
                    "model.max_stop_sequences.while_unsupported",
                    "max_stop_sequences MUST be absent on a model with "
                    "supports_stop_sequences=false",
                )
            )
    if spec.caching is not None:
        _caching_declarations(spec.caching, _join(path, "caching"), out)
    return out


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------


def _thinking_requests(
    params: GenerationParams | None, spec: ModelSpec, out: list[Violation]
) -> None:
    thinking = spec.thinking or ThinkingSpec()
    given = params or GenerationParams()
    if (
        thinking.effort_budget_exclusive
        and given.thinking_effort is not None
        and given.thinking_budget_tokens is not None
    ):
        out.append(
            Violation(
                "params.thinking_budget_tokens",
                "request.params.thinking_budget_tokens.with_effort",
                f"model {spec.id!r} takes thinking_effort or thinking_budget_tokens, never both "
                f"(got effort {given.thinking_effort!r} and budget "
                f"{given.thinking_budget_tokens})",
            )
        )
    constraints = thinking.constraints
    if constraints is None or not thinking_on(params, thinking):
        return
    if constraints.max_output_exceeds_budget:
        budget = effective_budget(params, thinking)
        cap = (
            given.max_output_tokens
            if given.max_output_tokens is not None
            else spec.max_output_tokens
        )
        if budget is not None and budget >= cap:
            if given.thinking_budget_tokens is not None:
                where = "params.thinking_budget_tokens"
            elif given.max_output_tokens is not None:
                where = "params.max_output_tokens"
            else:
                where = "params"
            budget_source = "requested" if given.thinking_budget_tokens is not None else "default"
            cap_source = "requested" if given.max_output_tokens is not None else "model's"
            out.append(
                Violation(
                    where,
                    "request.params.thinking_budget_tokens.not_below_max_output",
                    f"model {spec.id!r} counts reasoning inside the output cap: the "
                    f"{budget_source} thinking budget {budget} MUST be below the {cap_source} "
                    f"max_output_tokens {cap}",
                )
            )
    choice = given.tool_choice
    if constraints.forced_tool_choice_refused and choice is not None and choice.mode in _FORCED:
        out.append(
            Violation(
                "params.tool_choice.mode",
                "request.params.tool_choice.thinking_forced",
                f"model {spec.id!r} refuses a forced tool choice "
                f"(TOOL_CHOICE_MODE_{choice.mode.name}) while thinking is on; use AUTO or NONE, "
                "or turn thinking off",
            )
        )
    fixed = constraints.fixed_temperature
    if (
        fixed is not None
        and given.temperature is not None
        and float(given.temperature) != float(fixed)
    ):
        out.append(
            Violation(
                "params.temperature",
                "request.params.temperature.thinking_fixed",
                f"model {spec.id!r} accepts only temperature {fixed:g} while thinking is on, "
                f"got {float(given.temperature):g}",
            )
        )


def _stop_sequence_requests(
    params: GenerationParams | None, spec: ModelSpec, out: list[Violation]
) -> None:
    sequences = params.stop_sequences if params is not None else []
    if not sequences:
        return
    if spec.supports_stop_sequences is False:
        out.append(
            Violation(
                "params.stop_sequences",
                "request.params.stop_sequences.unsupported",
                f"model {spec.id!r} does not accept stop sequences "
                f"(supports_stop_sequences=false); {len(sequences)} given",
            )
        )
    elif spec.max_stop_sequences is not None and len(sequences) > spec.max_stop_sequences:
        out.append(
            Violation(
                "params.stop_sequences",
                "request.params.stop_sequences.too_many",
                f"model {spec.id!r} accepts at most {spec.max_stop_sequences} stop sequences, "
                f"got {len(sequences)}",
            )
        )


def _breakpoint_requests(
    breakpoints: Sequence[CacheBreakpoint], spec: ModelSpec, out: list[Violation]
) -> None:
    caching = spec.caching or CachingSpec()
    if not caching.explicit_markers or not breakpoints:
        return
    accepted = list(caching.breakpoint_ttl_seconds)
    for i, breakpoint in enumerate(breakpoints):
        ttl = breakpoint.ttl_seconds
        if ttl is not None and ttl not in accepted:
            shown = ", ".join(map(str, accepted)) if accepted else "none"
            out.append(
                Violation(
                    f"cache_breakpoints[{i}].ttl_seconds",
                    "request.cache_breakpoints.ttl_unsupported",
                    f"model {spec.id!r} accepts cache lifetimes of {shown} seconds, not {ttl}",
                )
            )
    limit = caching.max_breakpoints
    if limit is not None and len(breakpoints) > limit:
        out.append(
            Violation(
                "cache_breakpoints",
                "request.cache_breakpoints.too_many",
                f"model {spec.id!r} accepts at most {limit} cache breakpoints per request, got "
                f"{len(breakpoints)}",
            )
        )


def request_violations(request: StreamCompletionRequest, spec: ModelSpec) -> list[Violation]:
    """Check a request against the model's protocol 1.2 constraint declarations (rules: module
    docstring). Constant time in the size of the conversation (only ``params`` and
    ``cache_breakpoints`` are read).

    Returns:
        Every violation (all errors), in field order; empty when the request respects them.
    """
    out: list[Violation] = []
    _thinking_requests(request.params, spec, out)
    _stop_sequence_requests(request.params, spec, out)
    _breakpoint_requests(request.cache_breakpoints, spec, out)
    return out
