"""CLI polish: ``--version``, defaults and choices in help, ``capabilities`` within 100
columns with tiers numbered from 1, ``cost --json`` keys exactly as the README documents them,
``validate`` naming a JSON syntax error's line, column and what was expected."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from protocol_py.cli.app import capabilities_table, main
from protocol_py.providers.reference.provider import reference_models
from protocol_py.rules.pricing import TERM_NAMES
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION

from .conftest import CONSOLE_SCRIPT, REPO

CLI_DOC = (REPO / "docs" / "cli.md").read_text()


def test_dash_dash_version_prints_package_and_protocol() -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert (done.returncode, done.stdout) == (
        0,
        f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})\n",
    )


@pytest.mark.parametrize("command", ["chat", "capabilities", "describe"])
def test_help_shows_the_server_default(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 127.0.0.1:50051" in text


def test_capabilities_table_fits_100_columns_and_numbers_tiers_from_1() -> None:
    rows = capabilities_table(reference_models())
    for row in rows:
        print(f"{len(row):3d} {row}")
    assert max(len(r) for r in rows) <= 100
    pricing = [r.strip() for r in rows if r.strip().startswith("pricing (USD):")]
    assert len(pricing) == 3
    large = " ".join(" ".join(rows[rows.index(next(r for r in rows if "(tier" in r)) :]).split())
    assert large.startswith(  # by prompt size: tier 1 at 0 tokens, and the range it covers
        "pricing (USD): $3 in / $15 out / $0.3 cache read per Mtok (tier 1 of 2: prompts below "
        "200,000 tokens) reference-medium"
    )
    assert "tier 0" not in "\n".join(rows)
    # the thinking summary is wrapped, not cut: every word of it is still there
    large = rows[1 : rows.index(next(r for r in rows if r.strip().startswith("pricing")))]
    words = " ".join(" ".join(large).split())
    assert (
        "effort low/medium/high/max (default high), adaptive, off: conditional at low/medium"
        in (" ".join(words.split("explicit+implicit", 1)[1].split()))
    )


def test_capabilities_table_wraps_within_a_narrow_width() -> None:
    rows = capabilities_table(reference_models(), width=80)
    assert max(len(r) for r in rows) <= 80


def documented_cost_keys() -> tuple[list[str], list[str]]:
    paragraph = CLI_DOC.split("`cost --json` prints one object with exactly these keys:", 1)[1]
    paragraph = paragraph.split("\n\n", 1)[0]
    keys = re.findall(r"`(\w+)`\s+\(", paragraph)
    terms_text = paragraph.split("each cost term,", 1)[1].split("to a USD", 1)[0]
    terms = re.findall(r"`(\w+)`", terms_text)
    return keys, terms


def test_cost_json_keys_are_exactly_those_the_readme_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys, terms = documented_cost_keys()
    assert keys == [
        "tier_index",
        "window_index",
        "terms",
        "total_usd",
        "free",
        "vendor_cost",
        "components",
    ]
    assert terms == list(TERM_NAMES)
    pricing = tmp_path / "pricing.json"
    pricing.write_text(
        json.dumps({"currency": "USD", "tiers": [{"inputPerMtok": 3, "outputPerMtok": 15}]})
    )
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"inputTokens": 1000, "outputTokens": 10}))
    assert main(["cost", "--pricing", str(pricing), "--usage", str(usage), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == keys
    assert list(out["terms"]) == terms
    assert out["tier_index"] == 0 and out["total_usd"] == "0.00315"
    assert out["window_index"] is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"models": [\n', "line 2 column 1: the text ends early (expected a JSON value)"),
        ('{"id": "x",}', "line 1 column 12: expected a property name in double quotes"),
        ('{"id": "x"} extra', "line 1 column 13: unexpected text after the JSON value"),
        ('{"id" "x"}', "line 1 column 7: expected ':' after the property name"),
    ],
)
def test_validate_names_a_json_syntax_error(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "doc.json"
    path.write_text(text)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: file.not_json: not valid JSON: {expected}")
