"""``protocol-py`` fixes for the second new user's findings (issues 10 and 11 polish):
``capabilities`` shows the rates of the recurring pricing window that applies now, ``cost --json``
names that window (``window_index``), TLS option errors without the address hint, ``--timeout``
bounding the TLS connect, ``chat`` continuing a paused turn."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from protocol_py import protojson
from protocol_py.cli import TABLE_WIDTH, capabilities_table, main
from protocol_py.providers.catalog import deepseek_models

# A Tuesday: 11:00 UTC is in DeepSeek's off-peak window 10:00-24:00 Mon-Fri (window 3 of 4),
# 02:00 UTC in the peak hours 01:00-04:00 (the tier's own rates).
OFF_PEAK = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
PEAK = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def _pricing_text(rows: list[str]) -> str:
    flash = rows.index(next(r for r in rows if r.startswith("deepseek-flash")))
    text = []
    for row in rows[flash + 1 :]:
        if row and not row.startswith(" "):
            break
        text.append(row.strip())
    return " ".join(text)


def test_capabilities_shows_the_window_rates_that_apply_now_and_the_window_count() -> None:
    rows = capabilities_table(deepseek_models(), at=OFF_PEAK)
    assert max(len(r) for r in rows) <= TABLE_WIDTH
    assert _pricing_text(rows) == (
        "pricing (USD): now (window 3 of 4 recurring windows): $0.15 in / $0.6 out / $0.003 "
        "cache read per Mtok; outside: $0.3 in / $1.2 out / $0.006 cache read per Mtok"
    )


def test_capabilities_outside_every_window_shows_the_tier_rates_and_the_window_count() -> None:
    rows = capabilities_table(deepseek_models(), at=PEAK)
    assert max(len(r) for r in rows) <= TABLE_WIDTH
    assert _pricing_text(rows) == (
        "pricing (USD): now (outside its 4 recurring windows): $0.3 in / $1.2 out / $0.006 "
        "cache read per Mtok"
    )


@pytest.mark.parametrize(
    ("at", "window_index", "total"),
    [("2026-12-01T11:00:00Z", 2, "0.21"), ("2026-12-01T02:00:00Z", None, "0.42")],
)
def test_cost_json_names_the_window_that_applied_zero_based(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    at: str,
    window_index: int | None,
    total: str,
) -> None:
    pricing = tmp_path / "pricing.json"  # deepseek-flash: $0.3/$1.2, off-peak windows at half
    pricing.write_text(protojson.dumps(deepseek_models()[0].pricing))
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"inputTokens": 1_000_000, "outputTokens": 100_000}))
    argv = ["cost", "--pricing", str(pricing), "--usage", str(usage), "--at", at, "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["tier_index"], out["window_index"], out["total_usd"]) == (0, window_index, total)
