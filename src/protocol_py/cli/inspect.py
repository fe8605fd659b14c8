"""``protocol-py capabilities``, ``describe`` and ``version``: what a server serves and is."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from protocol_py.cli.options import (
    DEFAULT_SERVER,
    EXIT_OK,
    SERVER_HELP,
    Parser,
    add_client_options,
    add_timeout_option,
    run_client,
)
from protocol_py.codec import protojson
from protocol_py.errors import ProtocolError
from protocol_py.rules.cost import format_usd
from protocol_py.rules.pricing import PricingTable
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION
from protocol_py_gen.common.v1 import ProducerRef
from protocol_py_gen.model.v1 import Capabilities, PricingTier


def add_capabilities_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``capabilities`` and its options to ``sub``."""
    caps = sub.add_parser(
        "capabilities",
        help="list the models a server serves",
        description="Ask a running server for its Capabilities and print one row per model "
        "(context window, thinking, caching, prices), or --json.",
    )
    caps.add_argument("--server", default=DEFAULT_SERVER, metavar="ADDRESS", help=SERVER_HELP)
    add_client_options(caps)
    caps.add_argument(
        "--json",
        action="store_true",
        help="print the proto3 JSON of the Capabilities (default: a table)",
    )
    add_timeout_option(caps)


def add_describe_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``describe`` and its options to ``sub``."""
    describe = sub.add_parser(
        "describe",
        help="show a server's plugin identity",
        description="Ask a running server for its plugin identity (name, version, protocol "
        "version) and print it.",
    )
    describe.add_argument("--server", default=DEFAULT_SERVER, metavar="ADDRESS", help=SERVER_HELP)
    add_client_options(describe)
    add_timeout_option(describe)


def add_version_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``version`` to ``sub``."""
    sub.add_parser(
        "version",
        help="package and protocol version",
        description="Print this package's version and the protocol version it implements.",
    )


def _thinking_summary(spec: Any) -> str:
    thinking = spec.thinking
    if thinking is None or not thinking.supported:
        return "no"
    parts = []
    if thinking.effort is not None:
        parts.append(
            f"effort {'/'.join(thinking.effort.levels)} (default {thinking.effort.default})"
        )
    if thinking.budget is not None and thinking.budget.range is not None:
        parts.append(f"budget {thinking.budget.range.min}-{thinking.budget.range.max}")
    if thinking.adaptive_by_default:
        parts.append("adaptive")
    disable = thinking.disable.name.lower()
    if thinking.disable_allowed_efforts:
        disable += f" at {'/'.join(thinking.disable_allowed_efforts)}"
    parts.append(f"off: {disable}")
    return ", ".join(parts)


def _caching_summary(spec: Any) -> str:
    caching = spec.caching
    if caching is None or not caching.supported:
        return "no"
    kinds = [
        name
        for name, on in (
            ("explicit", caching.explicit_markers),
            ("implicit", caching.implicit_automatic),
        )
        if on
    ]
    return "+".join(kinds)


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return format_usd(Decimal(repr(value)))


def _rates_summary(tier: Any, window: Any = None) -> str:
    """``$IN in / $OUT out[ / $CR cache read] per Mtok`` (USD per million tokens) of a tier, or
    of one of its windows: each rate the window declares, else the tier's."""

    def rate(name: str) -> float | None:
        own = None if window is None else getattr(window, name)
        value: float | None = getattr(tier, name) if own is None else own
        return value

    text = f"${_rate(rate('input_per_mtok'))} in / ${_rate(rate('output_per_mtok'))} out"
    if (cache_read := rate("cache_read_per_mtok")) is not None:
        text += f" / ${_rate(cache_read)} cache read"
    return text + " per Mtok"


def _tier_place(tiers: Sequence[PricingTier], index: int, now: bool = True) -> str:
    """Which of several tiers applies, numbered from 1: ``"tier 2 of 2 now"`` when tiers differ
    by time (``now`` False: without the word, said elsewhere); ``"tier 1 of 2: prompts below
    200,000 tokens"`` when by prompt size (the range of input tokens, half-open, the shown
    rates cover); both when by both; ``""`` for a single tier."""
    if len(tiers) < 2:
        return ""
    tier = tiers[index]
    where = f"tier {index + 1} of {len(tiers)}"
    if now and any(t.effective_from or t.effective_until for t in tiers):
        where += " now"
    low, high = tier.input_tokens_from, tier.input_tokens_until
    if low and high is not None:
        where += f": prompts from {low:,} to below {high:,} tokens"
    elif high is not None:
        where += f": prompts below {high:,} tokens"
    elif low:
        where += f": prompts from {low:,} tokens"
    return where


def _pricing_summary(spec: Any, at: datetime | None = None) -> str:
    """The rates that apply at ``at`` (default now) to a prompt of 0 tokens: the tier's, or,
    while one of the tier's recurring windows holds ``at`` (protocol 1.1), the window's over the
    tier's, saying which window of how many (numbered from 1) and the tier's own rates."""
    pricing = spec.pricing
    if pricing is None:
        return "?"
    if pricing.free:
        return "free"
    try:
        index, window = PricingTable(pricing).resolve_window(at or datetime.now(UTC), 0)
    except (ValueError, ProtocolError):
        return "invalid"
    tier = pricing.tiers[index]
    where = _tier_place(pricing.tiers, index, now=not tier.windows)
    if not tier.windows:
        return _rates_summary(tier) + (f" ({where})" if where else "")
    count = len(tier.windows)
    windows = "recurring window" if count == 1 else "recurring windows"
    if window is None:
        where += f"{', ' if where else ''}outside its {count} {windows}"
        return f"now ({where}): {_rates_summary(tier)}"
    where += f"{', ' if where else ''}window {window + 1} of {count} {windows}"
    return (
        f"now ({where}): {_rates_summary(tier, tier.windows[window])}; "
        f"outside: {_rates_summary(tier)}"
    )


TABLE_WIDTH: Final = 100
"""Columns ``capabilities`` fits its table into (characters)."""


def capabilities_table(
    models: Sequence[Any], width: int = TABLE_WIDTH, at: datetime | None = None
) -> list[str]:
    """The ``capabilities`` table: one row per model (MODEL, CONTEXT and MAX OUT in tokens,
    CACHING, THINKING wrapped to the columns left), then an indented ``pricing:`` line (USD per
    million tokens at ``at``, default now: a recurring window's rates while it applies; tiers and
    windows numbered from 1), every line at most ``width`` characters."""
    head = ("MODEL", "CONTEXT", "MAX OUT", "CACHING")
    rows = [
        (m.id, str(m.context_window), str(m.max_output_tokens), _caching_summary(m)) for m in models
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    indent = sum(widths) + 2 * len(widths)
    room = max(20, width - indent)

    def line(cells: Sequence[str], last: str) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + "  " + last

    out = [line(head, "THINKING").rstrip()]
    pad = " " * (widths[0] + 2)
    for model, row in zip(models, rows, strict=True):
        thinking = textwrap.wrap(_thinking_summary(model), room, break_on_hyphens=False) or [""]
        out.append(line(row, thinking[0]).rstrip())
        out.extend((" " * indent + more).rstrip() for more in thinking[1:])
        pricing = f"pricing (USD): {_pricing_summary(model, at)}"
        out.extend(textwrap.wrap(pricing, width, initial_indent=pad, subsequent_indent=pad + "  "))
    return out


def cmd_capabilities(args: argparse.Namespace) -> int:
    """``capabilities``: :func:`capabilities_table` (fits 100 columns), or ``--json``."""
    caps: Capabilities = run_client(
        lambda client: client.get_capabilities(timeout=args.timeout),
        args.server,
        args,
        args.timeout,
    )
    if args.json:
        print(protojson.dumps(caps, indent=2))
        return EXIT_OK
    for line in capabilities_table(caps.models):
        print(line)
    print(f"protocol {caps.protocol_version}")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    """``describe``: the plugin's name, version, source, category and protocol version."""
    producer: ProducerRef = run_client(
        lambda client: client.describe(timeout=args.timeout), args.server, args, args.timeout
    )
    print(f"name:             {producer.name}")
    print(f"version:          {producer.version}")
    print(f"source:           {producer.source or '-'}")
    print(f"category:         {producer.category.name.lower()}")
    print(f"protocol_version: {producer.protocol_version}")
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    """``version``: ``protocol-py <package version> (protocol <MAJOR.MINOR>)``."""
    print(f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})")
    return EXIT_OK


__all__ = [
    "TABLE_WIDTH",
    "add_capabilities_parser",
    "add_describe_parser",
    "add_version_parser",
    "capabilities_table",
    "cmd_capabilities",
    "cmd_describe",
    "cmd_version",
]
