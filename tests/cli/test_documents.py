"""``protocol-py validate`` and ``cost``: JSON syntax errors with line and column, problems and
rule violations together, warnings, what could not be determined, the ``--at`` forms, tier and
window indexes, every usage problem named with its file and rule id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol_py.cli import main
from protocol_py.codec import protojson
from protocol_py.providers.catalog import deepseek_models

from ._console import write


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
    flash = deepseek_models()[0].pricing
    assert flash is not None
    pricing.write_text(protojson.dumps(flash))
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"inputTokens": 1_000_000, "outputTokens": 100_000}))
    argv = ["cost", "--pricing", str(pricing), "--usage", str(usage), "--at", at, "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["tier_index"], out["window_index"], out["total_usd"]) == (0, window_index, total)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    pricing = tmp_path / "p.json"
    pricing.write_text(
        json.dumps({"currency": "USD", "tiers": [{"inputPerMtok": 1, "outputPerMtok": 2}]})
    )
    usage = tmp_path / "u.json"
    usage.write_text(json.dumps({"inputTokens": 1000000}))
    return str(pricing), str(usage)


@pytest.mark.parametrize("at", ["2026-07-01T00:00:00Z ", " 2026-07-01", "2026-07-01\n"])
def test_cost_at_with_surrounding_whitespace_is_a_usage_error(
    files: tuple[str, str], at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--at", at]) == 2
    err = capsys.readouterr().err
    assert err.startswith("protocol-py cost: --at: ")
    assert "whitespace" in err


@pytest.mark.parametrize("at", ["20260701T000000Z", "2026-W27-3", "2026-07-01T00Z"])
def test_cost_at_forms_outside_the_documented_set_are_usage_errors(
    files: tuple[str, str], at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing, usage = files
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--at", at]) == 2
    assert "is not an ISO 8601" in capsys.readouterr().err


def test_cost_help_lists_the_accepted_at_forms(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["cost", "--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps lines, even at hyphens
    assert "YYYY-MM-DDTHH:MM[:SS[.fraction]]" in out
    assert "nobasicformat,weekorordinaldates" in out


def test_validate_prints_json_problems_and_rule_violations_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {"currency": "EUR", "tiers": [{"inputPerMtok": 1, "outputPerMtok": -1, "bogus": 1}]}
        )
    )
    assert main(["validate", str(path)]) == 1
    captured = capsys.readouterr()
    rules = [line.split(": ")[1] for line in captured.out.splitlines()]
    assert rules == [
        "json.unknown_field",
        "pricing.currency_not_usd",
        "pricing.tiers.rate_negative",
    ]
    assert captured.err.strip() == f"{path}: Pricing: 3 error(s)"


def test_validate_marks_a_newer_minor_protocol_version_as_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "protocolVersion": "1.9",
        "models": [
            {
                "id": "m",
                "contextWindow": 10,
                "maxOutputTokens": 5,
                "thinking": {},
                "caching": {},
                "pricing": {"currency": "USD", "free": True},
            }
        ],
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    (line,) = captured.out.splitlines()
    assert line.startswith("protocol_version: capabilities.protocol_version.newer_minor: ")
    assert line.endswith(" (warning)")
    assert captured.err.strip() == f"{path}: valid Capabilities"


PRICING = {"currency": "USD", "tiers": [{"inputPerMtok": 3, "outputPerMtok": 15}]}


def test_cost_text_numbers_tiers_from_1_and_json_keeps_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing = write(
        tmp_path,
        "p.json",
        {
            "currency": "USD",
            "tiers": [
                {"inputPerMtok": 1, "outputPerMtok": 2, "inputTokensUntil": 1000},
                {"inputPerMtok": 3, "outputPerMtok": 4, "inputTokensFrom": 1000},
            ],
        },
    )
    usage = write(tmp_path, "u.json", {"inputTokens": 5000, "outputTokens": 1})
    assert main(["cost", "--pricing", pricing, "--usage", usage]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "pricing: tier 2"
    assert main(["cost", "--pricing", pricing, "--usage", usage, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tier_index"] == 1


def test_cost_reports_every_usage_problem_with_file_and_rule_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing = write(tmp_path, "p.json", PRICING)
    usage = write(tmp_path, "u.json", {"inputTokens": -5, "outputTokens": "x"})
    assert main(["cost", "--pricing", pricing, "--usage", usage]) == 1
    assert capsys.readouterr().err == (
        f"protocol-py cost: invalid input: 2 error(s): {usage}: output_tokens: json.invalid: "
        'expected an integer (int64, as a number or a decimal string), got JSON string "x"; '
        f"{usage}: input_tokens: usage.negative: token count -5 is negative\n"
    )
    alone = write(tmp_path, "u2.json", {"inputTokens": 3, "outputTokens": 1, "reasoningTokens": -1})
    assert main(["cost", "--pricing", pricing, "--usage", alone]) == 1
    assert capsys.readouterr().err == (
        f"protocol-py cost: invalid input: 1 error(s): {alone}: reasoning_tokens: "
        "usage.negative: token count -1 is negative\n"
    )


def test_validate_names_what_could_not_be_determined(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, "bad1.json", "{")
    assert main(["validate", bad]) == 1
    assert capsys.readouterr().err == f"{bad}: not valid JSON: 1 error(s)\n"
    array = write(tmp_path, "array.json", "[]")
    assert main(["validate", array]) == 1
    assert capsys.readouterr().err == f"{array}: not a JSON object: 1 error(s)\n"
    huge = write(
        tmp_path,
        "huge.json",
        '{"currency": "USD", "tiers": [{"inputPerMtok": 1e400, "outputPerMtok": 1}]}',
    )
    assert main(["validate", huge]) == 1
    out = capsys.readouterr().out
    assert out == (
        "tiers[0].input_per_mtok: json.invalid: not a finite number: the JSON number is beyond "
        "the range of a double\n"
    )
