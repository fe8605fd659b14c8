"""Capability-aware routing (spec: "generation-parameter validation and capability-aware
routing").

A kernel holds an ordered fallback chain of targets (provider + ModelSpec). :func:`route` returns
the first target that can serve a request and, for every target it passed over, the violations
that disqualified it, so the choice can be explained.

Routing checks *capabilities*, not names: each candidate is validated as if the request's
``model_id`` were that candidate's ``spec.id`` (the kernel rewrites ``model_id`` when it
dispatches to a fallback), so ``request.model_id.*`` rules never disqualify a candidate. A
candidate is skipped when

* its ``spec`` is absent (``routing.target.spec_missing``) or its provider name is empty
  (``routing.target.provider_empty``),
* its ModelSpec itself is invalid
  (:func:`~protocol_py.rules.capabilities.validate_model_spec`; paths are prefixed ``spec.``), or
* the request breaks a rule against it (:func:`~protocol_py.rules.request.validate_request`).

Only errors disqualify; warnings (for example non-portable tool-schema keywords) never do and
are not listed in :attr:`Skipped.violations`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol_py.codec import type_check
from protocol_py.errors import InvalidValueError, Violation, errors_only
from protocol_py.rules.capabilities import validate_model_spec
from protocol_py.rules.request import _validate_request
from protocol_py_gen.model.v1 import ModelTarget, StreamCompletionRequest

__all__ = ["Route", "Skipped", "route"]


@dataclass(frozen=True)
class Skipped:
    """A candidate passed over.

    Attributes:
        index: Zero-based position of the candidate in the list given to :func:`route`.
        target: The candidate itself.
        violations: The error-severity violations that disqualified it (never empty).
    """

    index: int
    target: ModelTarget
    violations: list[Violation]


@dataclass(frozen=True)
class Route:
    """The outcome of :func:`route`.

    Attributes:
        target: The first candidate that accepts the request, or None when none does.
        index: Its zero-based position in the candidate list, or None.
        skipped: Every candidate before it (every candidate, when none accepts), in order.
    """

    target: ModelTarget | None
    index: int | None
    skipped: list[Skipped]

    @property
    def ok(self) -> bool:
        """True when a target was chosen."""
        return self.target is not None

    def explain(self) -> str:
        """A multi-line human-readable account: one line per skipped candidate and violation,
        then the choice."""
        lines: list[str] = []
        for skip in self.skipped:
            name = skip.target.spec.id if skip.target.spec is not None else "?"
            lines.append(f"skipped [{skip.index}] {skip.target.provider}/{name}:")
            lines.extend(f"  {v}" for v in skip.violations)
        if self.target is not None:
            name = self.target.spec.id if self.target.spec is not None else "?"
            lines.append(f"chose [{self.index}] {self.target.provider}/{name}")
        else:
            lines.append("no candidate accepts the request")
        return "\n".join(lines)


def _target_violations(request: StreamCompletionRequest, target: ModelTarget) -> list[Violation]:
    out: list[Violation] = []
    if target.provider == "":
        out.append(
            Violation("provider", "routing.target.provider_empty", "the target names no provider")
        )
    if target.spec is None:
        out.append(
            Violation("spec", "routing.target.spec_missing", "the target carries no ModelSpec")
        )
        return out
    out.extend(errors_only(validate_model_spec(target.spec, path="spec")))
    out.extend(errors_only(_validate_request(request, target.spec, check_model_id=False)))
    return out


def route(request: StreamCompletionRequest, candidates: Sequence[ModelTarget]) -> Route:
    """Pick the first candidate whose ModelSpec accepts ``request``.

    Args:
        request: The request to place; its ``model_id`` is ignored (see the module docstring).
        candidates: The fallback chain, most preferred first.

    Returns:
        A :class:`Route` with the chosen target and index (both None when no candidate accepts)
        and a :class:`Skipped` entry, with its disqualifying violations, for every candidate
        passed over. Candidates after the chosen one are not examined.

    Raises:
        InvalidValueError: ``request`` is not a StreamCompletionRequest, ``candidates`` is not a
            sequence of ModelTarget, or a message holds a wrongly typed field (rule
            ``value.wrong_type``, path ``candidates[i]...`` for a target). ``None`` in a field
            without proto3 presence reads as its default (a ``provider`` of None is empty).
    """
    if not isinstance(request, StreamCompletionRequest):
        raise InvalidValueError(
            f"request: expected a model.v1.StreamCompletionRequest, got {type(request).__name__}",
            rule="value.wrong_type",
        )
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise InvalidValueError(
            f"candidates: expected a sequence of model.v1.ModelTarget, got "
            f"{type(candidates).__name__}",
            rule="value.wrong_type",
        )
    skipped: list[Skipped] = []
    for index, target in enumerate(candidates):
        if not isinstance(target, ModelTarget):
            raise InvalidValueError(
                f"candidates[{index}]: expected a model.v1.ModelTarget, got "
                f"{type(target).__name__}",
                path=f"candidates[{index}]",
                rule="value.wrong_type",
            )
        checked, _unknown = type_check.check_message(target, path=f"candidates[{index}]")
        violations = _target_violations(request, checked)
        if not violations:
            return Route(target=target, index=index, skipped=skipped)
        skipped.append(Skipped(index=index, target=target, violations=violations))
    return Route(target=None, index=None, skipped=skipped)
