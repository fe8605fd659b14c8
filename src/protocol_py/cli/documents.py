"""``protocol-py validate`` and ``cost``: offline checks of Capabilities, ModelSpec, Pricing
and Usage documents (proto3 JSON files)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from protocol_py.cli.options import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError, Parser
from protocol_py.codec import protojson
from protocol_py.errors import ValidationError, describe_json_error, errors_only
from protocol_py.rules.cost import cost, validate_usage
from protocol_py.rules.documents import DOCUMENT_KINDS, load_document
from protocol_py.rules.pricing import RATE_FIELDS
from protocol_py.rules.timestamps import parse_timestamp
from protocol_py_gen.model.v1 import Pricing, PricingTier, Usage


def add_validate_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``validate`` and its argument to ``sub``."""
    kinds = ", ".join(DOCUMENT_KINDS)
    validate = sub.add_parser(
        "validate",
        help=f"check a proto3-JSON document ({kinds}) against the protocol's rules",
        description=f"Check one proto3-JSON document against the protocol's rules. Accepted "
        f"kinds: {kinds} (recognised from its top-level keys). Prints 'FILE: valid KIND', or "
        "every violation (field path, rule, message) and exits 1. Samples: "
        "examples/documents/capabilities.json, examples/documents/pricing.json.",
    )
    validate.add_argument(
        "file", metavar="FILE", help=f"a JSON file holding one {'/'.join(DOCUMENT_KINDS)} object"
    )


def add_cost_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``cost`` and its options to ``sub``."""
    cost = sub.add_parser(
        "cost",
        help="price a Usage with a Pricing",
        description="Price one Usage (token counts) with one Pricing (per-million-token rates, "
        "tiers, windows) and print the cost per rate and in total. Samples: "
        "examples/documents/pricing.json, examples/documents/usage.json.",
    )
    cost.add_argument(
        "--pricing", required=True, metavar="FILE", help="proto3-JSON Pricing (required)"
    )
    cost.add_argument("--usage", required=True, metavar="FILE", help="proto3-JSON Usage (required)")
    cost.add_argument(
        "--at",
        default=None,
        metavar="TIME",
        help=(
            "receipt time (default: now): YYYY-MM-DD (00:00 UTC) or "
            "YYYY-MM-DDTHH:MM[:SS[.fraction]] with Z or +HH:MM/+HHMM/+HH (ISO 8601 extended "
            "format, RFC 3339; no basic format, week or ordinal dates, no surrounding spaces)"
        ),
    )
    cost.add_argument("--json", action="store_true", help="print one JSON object (default: text)")


_UNDETERMINED: Final = {
    "file.unreadable": "cannot read",
    "file.not_json": "not valid JSON",
    "document.not_object": "not a JSON object",
    "document.unknown_kind": "not a Capabilities, ModelSpec or Pricing",
}
"""``validate``'s summary, by rule id, for a file whose document kind could not be
determined."""


def cmd_validate(args: argparse.Namespace) -> int:
    """``validate FILE``: print every violation as ``path: rule_id: message`` (a warning ends
    with `` (warning)``); exit 1 if any has error severity (warnings are printed but do not
    fail). JSON problems and rule violations are reported together
    (:func:`protocol_py.rules.documents.validate_document`)."""

    kind, violations = load_document(args.file)
    for violation in violations:
        print(f"{violation} (warning)" if violation.severity == "warning" else str(violation))
    errors = errors_only(violations)
    if errors:
        if kind == "unknown":  # say why no document kind could be determined
            kind = _UNDETERMINED.get(errors[0].rule, "document kind not determined")
        print(f"{args.file}: {kind}: {len(errors)} error(s)", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{args.file}: valid {kind}", file=sys.stderr)
    return EXIT_OK


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise CliError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None

    def reject(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        plain = json.loads(raw, parse_constant=reject)
        exact = json.loads(raw, parse_float=Decimal, parse_int=Decimal, parse_constant=reject)
    except json.JSONDecodeError as exc:
        raise CliError(f"{what} {path}: not valid JSON: {describe_json_error(exc)}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError(f"{what} {path}: not valid JSON: {exc}") from None
    if not isinstance(plain, dict):
        raise CliError(f"{what} {path}: expected a JSON object")
    return plain, exact


_TIER_KEYS = protojson.field_keys(PricingTier)


def _check_exact_rates(exact: Any, path: str) -> None:
    """Reject a rate whose JSON text a double cannot carry exactly (``docs/decisions.md#d8``).

    Rates are doubles on the wire and cost uses ``Decimal(repr(rate))``, which equals the JSON
    text for every shortest-repr number (``0.15``, ``3``, ``"0.6"``). A rate written with more
    digits than a double holds (``0.1000000000000000000001``) would be silently rounded, so it is
    refused instead.
    """
    tiers = exact.get("tiers") if isinstance(exact, dict) else None
    if not isinstance(tiers, list):
        return
    for i, tier in enumerate(tiers):
        if not isinstance(tier, dict):
            continue
        for name, value in tier.items():
            if _TIER_KEYS.get(name) not in RATE_FIELDS:
                continue
            try:
                text = Decimal(value) if isinstance(value, str | Decimal) else None
            except ArithmeticError:
                continue  # the decoder reports malformed values
            if text is None or not text.is_finite():
                continue
            if Decimal(repr(float(text))) != text:
                raise CliError(
                    f"{path}: tiers[{i}].{name}: {value} cannot be carried exactly by a double "
                    f"(nearest is {float(text)!r}); write the rate with at most 17 "
                    "significant digits",
                )


def _usage_rule_problems(usage: Usage, pruned: Sequence[str]) -> list[Any]:
    """:func:`~protocol_py.rules.pricing.validate_usage`'s violations with paths as the JSON
    problems
    name them (``input_tokens``), leaving out fields that did not decode (already reported)."""
    found = []
    for violation in validate_usage(usage):
        path = violation.path.removeprefix("usage.")
        if path not in pruned:
            found.append(replace(violation, path=path))
    return found


def cmd_cost(args: argparse.Namespace) -> int:
    """``cost``: price a proto3-JSON Usage with a proto3-JSON Pricing at ``--at`` (default
    now); the breakdown as text, or with ``--json`` one object ``{tier_index, terms,
    total_usd, ...}`` whose amounts are exact decimal strings."""

    if args.at is not None and not args.at.strip():
        raise CliError("--at: empty; expected an ISO 8601 date or date-time", EXIT_USAGE)
    try:
        at = parse_timestamp(args.at, path="--at") if args.at is not None else datetime.now(UTC)
    except ValueError as exc:
        message = str(exc)
        if not message.startswith("--at"):
            message = f"--at: {message}"
        raise CliError(message, EXIT_USAGE) from None
    pricing_plain, pricing_exact = _read_json(args.pricing, "--pricing")
    usage_plain, _ = _read_json(args.usage, "--usage")
    _check_exact_rates(pricing_exact, args.pricing)
    pricing, problems = protojson.decode(Pricing, pricing_plain)
    usage, usage_problems, pruned = protojson.decode_lenient(Usage, usage_plain)
    if usage is not None:  # the rules too, on the fields that decoded: every problem at once
        usage_problems = [*usage_problems, *_usage_rule_problems(usage, pruned)]
    bad = [f"{args.pricing}: {v}" for v in problems] + [
        f"{args.usage}: {v}" for v in usage_problems
    ]
    if bad or pricing is None or usage is None:
        raise CliError(f"invalid input: {len(bad)} error(s): " + "; ".join(bad))
    try:
        breakdown = cost(pricing, usage, at)
    except ValidationError as exc:
        lines = "; ".join(str(v) for v in exc.violations)
        raise CliError(
            f"invalid pricing {args.pricing}: {len(exc.violations)} error(s): {lines}"
        ) from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(breakdown.to_json(), ensure_ascii=False))
    else:
        print(breakdown.render_text())
    return EXIT_OK


__all__ = [
    "add_cost_parser",
    "add_validate_parser",
    "cmd_cost",
    "cmd_validate",
]
